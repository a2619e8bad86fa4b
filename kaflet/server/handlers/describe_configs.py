"""DescribeConfigs (key 32): topic and broker configs with sources, synonyms and documentation."""

from __future__ import annotations

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from kaflet.server.dynamic_config import SOURCE_DEFAULT, ConfigRequestError
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.DESCRIBE_CONFIGS
MIN_VERSION = 0
MAX_VERSION = 4


# ResourceType codes.
_TOPIC, _BROKER, _BROKER_LOGGER, _CLIENT_METRICS, _GROUP = 2, 4, 8, 16, 32


def config_access_error(ctx: RequestContext, operation: AclOperation, resource_type: int,
                        name: str) -> ErrorCode | None:
    """Kafka's check for (Describe|Alter)Configs on one config resource; None when allowed.

    Topics are checked on the topic, groups on the group, brokers (and their loggers) on the cluster.
    Unknown types pass here and are refused by the config service.
    """
    if resource_type == _TOPIC:
        return None if ctx.authorize(operation, ResourceType.TOPIC, name) else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if resource_type == _GROUP:
        return None if ctx.authorize(operation, ResourceType.GROUP, name) else ErrorCode.GROUP_AUTHORIZATION_FAILED
    if resource_type in (_BROKER, _BROKER_LOGGER, _CLIENT_METRICS):
        return None if ctx.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME) \
            else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return None


_DENIED_MESSAGES = {ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
                    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
                    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed."}


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R = codec.response_class(API_KEY)
    Result = R.DescribeConfigsResult
    Entry = Result.DescribeConfigsResourceResult
    Syn = Entry.DescribeConfigsSynonym
    synonyms = ctx.version >= 1 and bool(getattr(req, "include_synonyms", False))
    docs = ctx.version >= 3 and bool(getattr(req, "include_documentation", False))
    results = []
    for res in req.resources:
        denied = config_access_error(ctx, AclOperation.DESCRIBE_CONFIGS, res.resource_type, res.resource_name)
        if denied is not None:
            results.append(Result(error_code=denied, error_message=_DENIED_MESSAGES[denied],
                                  resource_type=res.resource_type, resource_name=res.resource_name, configs=[]))
            continue
        try:
            entries = await ctx.services.admin.configs.describe(res.resource_type, res.resource_name,
                                                             res.configuration_keys)
        except ConfigRequestError as exc:
            results.append(Result(error_code=exc.code, error_message=exc.message, resource_type=res.resource_type,
                                  resource_name=res.resource_name, configs=[]))
            continue
        configs = [
            Entry(
                name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                # v0 has no source, only "is this the built-in default".
                is_default=e.source == SOURCE_DEFAULT, is_sensitive=e.sensitive,
                synonyms=[Syn(name=s.name, value=s.value, source=s.source) for s in e.synonyms] if synonyms else [],
                config_type=e.kind, documentation=e.documentation if docs else None,
            )
            for e in entries
        ]
        results.append(Result(error_code=0, error_message=None, resource_type=res.resource_type,
                              resource_name=res.resource_name, configs=configs))
    return R(results=results)
