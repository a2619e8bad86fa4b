"""ConsumerGroupDescribe (key 69, KIP-848): a consumer group's epochs, assignor and members with
their current and target assignments (``ConsumerGroupCoordinator.describe``)."""

from __future__ import annotations

import uuid
from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.CONSUMER_GROUP_DESCRIBE
MIN_VERSION = 0
MAX_VERSION = 0
#: AuthorizedOperations when they were not asked for (Kafka's Integer.MIN_VALUE).
_NOT_REQUESTED = -(2**31)


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R: Any = codec.response_class(API_KEY)
    G = R.DescribedGroup
    M = G.Member
    A = M.Assignment
    topics = ctx.services.cluster.metadata.topics

    def assignment(by_name: dict[str, list[int]]) -> Any:
        return A(topic_partitions=[
            A.TopicPartitions(topic_id=uuid.UUID(bytes=topics[name].topic_id if name in topics else bytes(16)),
                              topic_name=name,
                              partitions=parts)
            for name, parts in sorted(by_name.items())])

    out = []
    for group_id in req.group_ids:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            out.append(G(error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED), group_id=group_id, group_state="",
                         group_epoch=0, assignment_epoch=0, assignor_name="", members=[]))
            continue
        d = ctx.services.coordinators.groups.consumer_group_describe(group_id)
        ops = _NOT_REQUESTED
        if req.include_authorized_operations and d.error == ErrorCode.NONE:
            ops = sum(1 << op for op in ctx.authorized_operations(ResourceType.GROUP, group_id))
        out.append(G(
            error_code=int(d.error), error_message=d.message, group_id=group_id, group_state=d.state,
            group_epoch=d.group_epoch, assignment_epoch=d.assignment_epoch, assignor_name=d.assignor,
            members=[M(member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                       client_id=m.client_id, client_host=m.client_host,
                       subscribed_topic_names=m.subscribed_topic_names, subscribed_topic_regex=m.subscribed_topic_regex,
                       assignment=assignment(m.assignment), target_assignment=assignment(m.target_assignment))
                     for m in d.members],
            authorized_operations=ops))
    return R(groups=out)
