"""Kafka's ZooKeeper paths and node contents (Kafka 2.8–3.9, ZooKeeper mode).

Builders return the exact bytes Kafka writes (compact UTF-8 JSON, see kafka-facts section 1);
parsers accept what Kafka (any of the versions it still reads) writes. Key order inside JSON
objects is not specified by Kafka (hash maps) and readers ignore it; we use the order of the
published examples.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_plus

# --------------------------------------------------------------------------------------------
# Paths

CLUSTER_ID_PATH = "/cluster/id"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
BROKERS_PATH = "/brokers"
BROKER_IDS_PATH = "/brokers/ids"
BROKER_SEQID_PATH = "/brokers/seqid"
TOPICS_PATH = "/brokers/topics"
CONFIG_PATH = "/config"
CONFIG_CHANGES_PATH = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
ADMIN_PATH = "/admin"
DELETE_TOPICS_PATH = "/admin/delete_topics"
REASSIGN_PARTITIONS_PATH = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION_PATH = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION_PATH = "/isr_change_notification"
LOG_DIR_EVENT_NOTIFICATION_PATH = "/log_dir_event_notification"
LATEST_PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
CONSUMERS_PATH = "/consumers"
FEATURE_PATH = "/feature"
#: Logi-Kafka's preferred controllers: one child per broker id that should win elections.
CONTROLLER_CANDIDATES_PATH = "/config/extension/candidates"
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
#: The only log-dir event Kafka writes (a log directory failed).
LOG_DIR_FAILURE_EVENT = 1

#: Block of producer ids handed out per allocation (first block is 0..999).
PRODUCER_ID_BLOCK_SIZE = 1000
#: broker.id.generation: generated id = /brokers/seqid zkVersion + reserved.broker.max.id.
RESERVED_BROKER_MAX_ID = 1000


class ConfigType:
    """Entity types under /config (the path segment)."""

    TOPIC = "topics"
    CLIENT = "clients"
    USER = "users"
    BROKER = "brokers"
    IP = "ips"
    ALL = ("topics", "clients", "users", "brokers", "ips")


#: The default entity name (for /config/brokers/<default>, /config/users/<default>, ...).
DEFAULT_ENTITY = "<default>"

#: Persistent nodes every broker creates at startup when missing (ZkData.PersistentZkPaths).
PERSISTENT_PATHS: tuple[str, ...] = (
    CONSUMERS_PATH,
    BROKER_IDS_PATH,
    TOPICS_PATH,
    CONFIG_CHANGES_PATH,
    DELETE_TOPICS_PATH,
    BROKER_SEQID_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    LATEST_PRODUCER_ID_BLOCK_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    *(f"{CONFIG_PATH}/{t}" for t in ConfigType.ALL),
)


def broker_path(broker_id: int) -> str:
    """/brokers/ids/<id> (ephemeral broker registration)."""
    return f"{BROKER_IDS_PATH}/{broker_id}"


def topic_path(topic: str) -> str:
    """/brokers/topics/<topic> (replica assignment and topic id)."""
    return f"{TOPICS_PATH}/{topic}"


def partitions_path(topic: str) -> str:
    """/brokers/topics/<topic>/partitions (null data)."""
    return f"{TOPICS_PATH}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    """/brokers/topics/<topic>/partitions/<p> (null data)."""
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    """/brokers/topics/<topic>/partitions/<p>/state (leader and ISR)."""
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}/state"


def config_entity_path(entity_type: str, name: str) -> str:
    """/config/<type>/<name>; user and client names must already be sanitized."""
    return f"{CONFIG_PATH}/{entity_type}/{name}"


def topic_config_path(topic: str) -> str:
    """/config/topics/<topic>."""
    return config_entity_path(ConfigType.TOPIC, topic)


def delete_topic_path(topic: str) -> str:
    """/admin/delete_topics/<topic> (null data): the deletion request."""
    return f"{DELETE_TOPICS_PATH}/{topic}"


def config_change_prefix() -> str:
    """Path prefix to create a sequential config change notification with."""
    return f"{CONFIG_CHANGES_PATH}/{CONFIG_CHANGE_PREFIX}"


# --------------------------------------------------------------------------------------------
# JSON helpers


def _dump(obj: Any) -> bytes:
    # Jackson writes compact UTF-8 (non-ASCII characters unescaped).
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _load(data: bytes | None, what: str) -> dict[str, Any]:
    if data is None:
        raise ValueError(f"{what}: node has null data")
    obj = json.loads(bytes(data).decode("utf-8"))
    if not isinstance(obj, dict):
        raise ValueError(f"{what}: expected a JSON object, got {type(obj).__name__}")
    return obj


# --------------------------------------------------------------------------------------------
# Kafka Uuid (org.apache.kafka.common.Uuid): 16 bytes shown as URL-safe base64 without padding.

ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"
ONE_UUID = "AAAAAAAAAAAAAAAAAAAAAQ"


def uuid_to_str(raw: bytes) -> str:
    """The 22-character string form of a 16-byte Kafka Uuid."""
    if len(raw) != 16:
        raise ValueError(f"a Uuid is 16 bytes, got {len(raw)}")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def uuid_from_str(text: str) -> bytes:
    """Parse Kafka's Uuid string (padding optional) into its 16 bytes; ValueError if malformed."""
    if len(text) > 24:
        raise ValueError(f"Input string with prefix `{text[:24]}` is too long to be decoded as a base64 UUID")
    if not re.fullmatch(r"[A-Za-z0-9_-]*={0,2}", text):
        raise ValueError(f"Input string `{text}` is not URL-safe base64")
    padded = text.rstrip("=")
    padded += "=" * (-len(padded) % 4)
    try:
        raw = base64.urlsafe_b64decode(padded)
    except ValueError as e:
        raise ValueError(f"Input string `{text}` is not valid base64: {e}") from e
    if len(raw) != 16:
        raise ValueError(
            f"Input string `{text}` decoded as {len(raw)} bytes, which is not equal to the expected 16 bytes "
            "of a base64-encoded UUID"
        )
    return raw


def random_uuid() -> str:
    """A new random (version 4) Kafka Uuid string, as Uuid.randomUuid makes them.

    Like Kafka, never returns the reserved ZERO/ONE Uuids nor one whose string starts with '-'
    (it would look like a command-line option).
    """
    while True:
        s = uuid_to_str(uuid.uuid4().bytes)
        if s not in (ZERO_UUID, ONE_UUID) and not s.startswith("-"):
            return s


# --------------------------------------------------------------------------------------------
# /cluster/id


def cluster_id_json(cluster_id: str) -> bytes:
    """``{"version":"1","id":"<id>"}`` (version is the string "1")."""
    return _dump({"version": "1", "id": cluster_id})


def parse_cluster_id(data: bytes | None) -> str:
    """The cluster id from /cluster/id."""
    return str(_load(data, CLUSTER_ID_PATH)["id"])


# --------------------------------------------------------------------------------------------
# /controller and /controller_epoch


def controller_json(broker_id: int, timestamp_ms: int, kraft_controller_epoch: int | None = None) -> bytes:
    """/controller data: v1 (Kafka 2.8–3.3) or, with ``kraft_controller_epoch``, v2 (3.4+).

    v1 is read by every Kafka version, so it is the default.
    """
    if kraft_controller_epoch is None:
        return _dump({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)})
    return _dump(
        {
            "version": 2,
            "brokerid": broker_id,
            "timestamp": str(timestamp_ms),
            "kraftControllerEpoch": kraft_controller_epoch,
        }
    )


def parse_controller(data: bytes | None) -> int:
    """The controller's broker id from /controller (readers use only ``brokerid``)."""
    return int(_load(data, CONTROLLER_PATH)["brokerid"])


def controller_epoch_bytes(epoch: int) -> bytes:
    """/controller_epoch data: the ASCII decimal epoch (not JSON)."""
    return str(int(epoch)).encode("ascii")


def parse_controller_epoch(data: bytes | None) -> int:
    """The epoch stored in /controller_epoch."""
    if data is None:
        raise ValueError("/controller_epoch has null data")
    return int(bytes(data).decode("ascii").strip())


# --------------------------------------------------------------------------------------------
# /brokers/ids/<id>


@dataclass(frozen=True, slots=True)
class EndPoint:
    """A listener: name, host (None for all interfaces), port and security protocol."""

    listener: str
    host: str | None
    port: int
    security_protocol: str = "PLAINTEXT"

    def connection_string(self) -> str:
        """``LISTENER://host:port`` as registered (IPv6 hosts bracketed, empty host allowed)."""
        host = self.host or ""
        if ":" in host:
            host = f"[{host}]"
        return f"{self.listener}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """The content of a broker registration (/brokers/ids/<id>)."""

    id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    timestamp_ms: int = 0
    features: dict[str, dict[str, int]] = field(default_factory=dict)
    version: int = 5

    def endpoint(self, listener: str) -> EndPoint | None:
        """The endpoint of the named listener, if registered."""
        for ep in self.endpoints:
            if ep.listener == listener:
                return ep
        return None


def broker_json(info: BrokerInfo) -> bytes:
    """The v5 registration JSON of a broker (Kafka 2.8+ with IBP >= 2.7)."""
    plaintext = next((ep for ep in info.endpoints if ep.security_protocol == "PLAINTEXT"), None)
    obj: dict[str, Any] = {
        "features": info.features,
        "listener_security_protocol_map": {ep.listener: ep.security_protocol for ep in info.endpoints},
        "endpoints": [ep.connection_string() for ep in info.endpoints],
    }
    if info.rack is not None:
        obj["rack"] = info.rack
    obj["jmx_port"] = info.jmx_port
    obj["port"] = plaintext.port if plaintext else -1
    obj["host"] = plaintext.host if plaintext else None
    obj["version"] = 5
    obj["timestamp"] = str(info.timestamp_ms)
    return _dump(obj)


_ENDPOINT_RE = re.compile(r"^(?P<listener>[^:/]+)://(?:\[(?P<v6>[^\]]*)\]|(?P<host>[^:]*)):(?P<port>-?\d+)$")


def parse_endpoint(text: str, protocol_map: dict[str, str] | None) -> EndPoint:
    """Parse ``LISTENER://host:port`` using the listener → security protocol map."""
    m = _ENDPOINT_RE.match(text)
    if m is None:
        raise ValueError(f"unable to parse {text!r} to a broker endpoint")
    listener = m.group("listener")
    host = m.group("v6") if m.group("v6") is not None else m.group("host")
    # Without a protocol map the listener name is the protocol name (Kafka's rule).
    proto = (protocol_map or {}).get(listener, listener)
    return EndPoint(listener, host or None, int(m.group("port")), proto)


def parse_broker(broker_id: int, data: bytes | None) -> BrokerInfo:
    """Read any registration version Kafka reads (v1 has no endpoints: PLAINTEXT is assumed)."""
    obj = _load(data, broker_path(broker_id))
    version = int(obj.get("version", 1))
    pmap = obj.get("listener_security_protocol_map")
    if version >= 2 and obj.get("endpoints") is not None:
        endpoints = tuple(parse_endpoint(e, pmap) for e in obj["endpoints"])
    else:
        endpoints = (EndPoint("PLAINTEXT", obj.get("host"), int(obj.get("port", -1)), "PLAINTEXT"),)
    ts = obj.get("timestamp")
    return BrokerInfo(
        id=broker_id,
        endpoints=endpoints,
        rack=obj.get("rack"),
        jmx_port=int(obj.get("jmx_port", -1)),
        timestamp_ms=int(ts) if ts not in (None, "") else 0,
        features=dict(obj.get("features") or {}),
        version=version,
    )


# --------------------------------------------------------------------------------------------
# /brokers/topics/<topic>


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """The content of /brokers/topics/<topic>."""

    partitions: dict[int, list[int]]
    topic_id: str | None = None
    adding_replicas: dict[int, list[int]] = field(default_factory=dict)
    removing_replicas: dict[int, list[int]] = field(default_factory=dict)


def _replica_map(m: dict[int, list[int]]) -> dict[str, list[int]]:
    return {str(p): [int(r) for r in m[p]] for p in sorted(m)}


def topic_json(
    partitions: dict[int, list[int]],
    topic_id: str | None,
    adding_replicas: dict[int, list[int]] | None = None,
    removing_replicas: dict[int, list[int]] | None = None,
) -> bytes:
    """The v3 topic assignment JSON; both reassignment maps are always written."""
    obj: dict[str, Any] = {
        "version": 3,
        "partitions": _replica_map(partitions),
        "adding_replicas": _replica_map(adding_replicas or {}),
        "removing_replicas": _replica_map(removing_replicas or {}),
    }
    if topic_id is not None:
        obj["topic_id"] = topic_id
    return _dump(obj)


def parse_topic(topic: str, data: bytes | None) -> TopicAssignment:
    """Read v1, v2 or v3 topic JSON; missing maps/topic id read as empty/None."""
    obj = _load(data, topic_path(topic))

    def rmap(key: str) -> dict[int, list[int]]:
        raw = obj.get(key) or {}
        return {int(p): [int(r) for r in reps] for p, reps in raw.items()}

    tid = obj.get("topic_id")
    return TopicAssignment(
        partitions=rmap("partitions"),
        topic_id=str(tid) if tid is not None else None,
        adding_replicas=rmap("adding_replicas"),
        removing_replicas=rmap("removing_replicas"),
    )


# --------------------------------------------------------------------------------------------
# /brokers/topics/<t>/partitions/<p>/state

LEADER_RECOVERY_RECOVERED = 0
LEADER_RECOVERY_RECOVERING = 1
NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """A partition's state node content. ``zk_version`` (the node's version, the "partition
    epoch") is filled in by readers that have the Stat; it is not part of the JSON."""

    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int
    leader_recovery_state: int = LEADER_RECOVERY_RECOVERED
    zk_version: int = -1


def partition_state_json(state: LeaderAndIsr) -> bytes:
    """Version-1 partition state JSON (leader_recovery_state only when RECOVERING)."""
    obj: dict[str, Any] = {
        "controller_epoch": state.controller_epoch,
        "leader": state.leader,
        "version": 1,
        "leader_epoch": state.leader_epoch,
        "isr": list(state.isr),
    }
    if state.leader_recovery_state == LEADER_RECOVERY_RECOVERING:
        obj["leader_recovery_state"] = LEADER_RECOVERY_RECOVERING
    return _dump(obj)


def parse_partition_state(data: bytes | None, zk_version: int = -1) -> LeaderAndIsr:
    """Read a partition state node (pass the node's Stat.version as ``zk_version``)."""
    obj = _load(data, "partition state")
    return LeaderAndIsr(
        leader=int(obj["leader"]),
        leader_epoch=int(obj["leader_epoch"]),
        isr=[int(r) for r in obj["isr"]],
        controller_epoch=int(obj["controller_epoch"]),
        leader_recovery_state=int(obj.get("leader_recovery_state", LEADER_RECOVERY_RECOVERED)),
        zk_version=zk_version,
    )


# --------------------------------------------------------------------------------------------
# /admin/reassign_partitions (the legacy, ZooKeeper-written reassignment)


def reassign_partitions_json(reassignments: dict[tuple[str, int], list[int]]) -> bytes:
    """``{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]},...]}``."""
    return _dump({"version": 1, "partitions": [
        {"topic": t, "partition": int(p), "replicas": [int(r) for r in reassignments[(t, p)]]}
        for t, p in sorted(reassignments)]})


def parse_reassign_partitions(data: bytes | None) -> dict[tuple[str, int], list[int]]:
    """The target replicas per (topic, partition) of /admin/reassign_partitions."""
    if data is None or len(data) == 0:
        return {}
    obj = _load(data, REASSIGN_PARTITIONS_PATH)
    out: dict[tuple[str, int], list[int]] = {}
    for e in obj.get("partitions") or []:
        out[(str(e["topic"]), int(e["partition"]))] = [int(r) for r in e["replicas"]]
    return out


# --------------------------------------------------------------------------------------------
# Partition lists: /isr_change_notification/isr_change_<seq>, /admin/preferred_replica_election


def partition_list_json(partitions: Iterable[tuple[str, int]]) -> bytes:
    """``{"version":1,"partitions":[{"topic":"t","partition":0},...]}`` (ISR change notification
    and preferred replica election nodes share this shape)."""
    return _dump(
        {"version": 1, "partitions": [{"topic": t, "partition": int(p)} for t, p in partitions]}
    )


def parse_partition_list(data: bytes | None) -> set[tuple[str, int]]:
    """The (topic, partition) pairs of an ISR change notification or preferred election node."""
    if data is None or len(data) == 0:
        return set()
    obj = _load(data, "partition list")
    return {(str(e["topic"]), int(e["partition"])) for e in obj.get("partitions") or []}


def isr_change_prefix() -> str:
    """Path prefix to create a sequential ISR change notification with."""
    return f"{ISR_CHANGE_NOTIFICATION_PATH}/{ISR_CHANGE_PREFIX}"


def log_dir_event_prefix() -> str:
    """Path prefix to create a sequential log-dir event notification with."""
    return f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{LOG_DIR_EVENT_PREFIX}"


def log_dir_event_json(broker_id: int) -> bytes:
    """A log-dir failure notification: ``{"version":1,"broker":<id>,"event":1}``."""
    return _dump({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT})


def parse_log_dir_event(data: bytes | None) -> int:
    """The broker id of a log-dir event notification."""
    return int(_load(data, "log dir event notification")["broker"])


# --------------------------------------------------------------------------------------------
# /feature

FEATURE_STATUS_DISABLED = 0
FEATURE_STATUS_ENABLED = 1


def feature_json(status: int, features: dict[str, dict[str, int]] | None = None) -> bytes:
    """The v1 /feature node Kafka 2.8-3.2 controllers write (``features`` is {} for ZooKeeper
    brokers, which support no features)."""
    return _dump({"features": features or {}, "version": 1, "status": status})


def parse_feature(data: bytes | None) -> tuple[int, dict[str, dict[str, int]]]:
    """(status, finalized features) of /feature (v1 or v2)."""
    obj = _load(data, FEATURE_PATH)
    status = int(obj["status"])
    if status not in (FEATURE_STATUS_DISABLED, FEATURE_STATUS_ENABLED):
        raise ValueError(f"unknown /feature status {status}")
    features = obj.get("features") or {}
    return status, {str(k): {str(a): int(b) for a, b in v.items()} for k, v in features.items()}


# --------------------------------------------------------------------------------------------
# /config/<type>/<name> and /config/changes


def entity_config_json(configs: dict[str, str]) -> bytes:
    """``{"version":1,"config":{...}}``; every value is a string."""
    return _dump({"version": 1, "config": {str(k): str(v) for k, v in configs.items()}})


def parse_entity_config(data: bytes | None) -> dict[str, str]:
    """The config map of a /config/<type>/<name> node (null data reads as empty)."""
    if data is None or len(data) == 0:
        return {}
    obj = _load(data, "entity config")
    return {str(k): str(v) for k, v in (obj.get("config") or {}).items()}


def config_change_json(entity_path: str) -> bytes:
    """A v2 change notification, e.g. ``entity_path`` = "topics/foo" or "users/alice/clients/app"."""
    return _dump({"version": 2, "entity_path": entity_path})


def parse_config_change(data: bytes | None) -> str:
    """The ``<type>/<name>`` entity path of a notification (v1 and v2 accepted)."""
    obj = _load(data, "config change notification")
    version = int(obj.get("version", 0))
    if version == 2:
        return str(obj["entity_path"])
    if version == 1:
        return f"{obj['entity_type']}/{obj['entity_name']}"
    raise ValueError(f"unsupported config change notification version {version}")


_UNRESERVED = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize for user and client-id path segments.

    Java's URLEncoder (UTF-8) followed by ``*`` → ``%2A`` and ``+`` (an encoded space) → ``%20``.
    """
    out = []
    for b in name.encode("utf-8"):
        if b in _UNRESERVED:
            out.append(chr(b))
        elif b == 0x20:
            out.append("%20")
        else:
            out.append(f"%{b:02X}")
    return "".join(out)


def desanitize(name: str) -> str:
    """Kafka's Sanitizer.desanitize (URL decoding)."""
    return unquote_plus(name, encoding="utf-8", errors="strict")


# --------------------------------------------------------------------------------------------
# /latest_producer_id_block


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """An allocated block of producer ids (inclusive bounds)."""

    broker: int
    block_start: int
    block_end: int


def producer_id_block_json(block: ProducerIdBlock) -> bytes:
    """v1 JSON; the bounds are longs written as strings."""
    return _dump(
        {
            "version": 1,
            "broker": block.broker,
            "block_start": str(block.block_start),
            "block_end": str(block.block_end),
        }
    )


def parse_producer_id_block(data: bytes | None) -> ProducerIdBlock | None:
    """The last allocated block, or None when the node is empty (nothing allocated yet)."""
    if data is None or len(data) == 0:
        return None
    obj = _load(data, LATEST_PRODUCER_ID_BLOCK_PATH)
    return ProducerIdBlock(int(obj["broker"]), int(obj["block_start"]), int(obj["block_end"]))


def next_producer_id_block(previous: ProducerIdBlock | None, broker: int) -> ProducerIdBlock:
    """The block after ``previous`` (0..999 first), allocated to ``broker``."""
    start = 0 if previous is None else previous.block_end + 1
    return ProducerIdBlock(broker, start, start + PRODUCER_ID_BLOCK_SIZE - 1)
