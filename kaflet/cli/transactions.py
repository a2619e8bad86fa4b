"""`kaflet transactions`: list and describe transactions, describe a partition's producers, find
hanging transactions and abort them (like kafka-transactions.sh).

The actions are Kafka's TransactionsCommand's, as flags: `--list`, `--describe`,
`--describe-producers`, `--find-hanging` and `--abort`, with its options and its tables
(columns padded and tab separated, as Kafka's ToolsUtils.prettyPrintTable prints them).
confluent-kafka's AdminClient has none of the requests behind them (ListTransactions,
DescribeTransactions, DescribeProducers, WriteTxnMarkers), so the metadata comes from the
AdminClient and the requests go over our own connections to the brokers that must answer them
(kaflet.network.raw_connection: TLS and SASL as `--command-config` says), each at the highest
version both sides support (ApiVersions).

A hanging transaction is one open on a partition (DescribeProducers shows a current
transaction start offset) for longer than `--max-transaction-timeout` minutes whose producer
id no coordinator lists, or whose coordinator no longer counts the partition in it; it holds
back the last stable offset, so read_committed consumers stop there. `--abort` writes an
ABORT marker for it to the partition's leader with WriteTxnMarkers, as Kafka's
Admin.abortTransaction does (the principal needs ClusterAction on the cluster).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import click

from kaflet.cli.common import (
    Admin,
    CliError,
    bootstrap_option,
    config_file_option,
    raw_connect,
    timeout_option,
)
from kaflet.network.raw_connection import RawConnection
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode, error_name

_ACTIONS = ("list", "describe", "describe-producers", "find-hanging", "abort")
#: Versions this tool can send: (lowest, highest). FindCoordinator stays below v4, whose
#: batched form is not needed for one id at a time.
_VERSIONS = {
    ApiKey.FIND_COORDINATOR: (1, 3),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 0),
    ApiKey.WRITE_TXN_MARKERS: (0, 1),
}
#: Errors the coordinator answers while it cannot answer yet (Kafka's admin retries them).
_RETRIABLE = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                        ErrorCode.NOT_COORDINATOR})
_TRANSACTION_KEY_TYPE = 1
_RETRY_BACKOFF_S = 0.2


def _table(headers: list[str], rows: list[list[str]]) -> None:
    """Kafka's ToolsUtils.prettyPrintTable: every cell padded to its column, then a tab."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    for row in [headers, *rows]:
        click.echo("".join(cell.ljust(w) + "\t" for cell, w in zip(row, widths, strict=True)))


def _tp(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"  # Kafka's TopicPartition.toString


@dataclass(frozen=True, slots=True)
class ProducerState:
    """One active producer of a partition, as DescribeProducers reports it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


class Cluster:
    """The cluster's brokers (from the AdminClient's metadata) and one connection to each that
    is asked something."""

    def __init__(self, admin: Admin) -> None:
        self.admin = admin
        self.meta = admin.metadata()
        self.brokers = {b.id: (str(b.host), int(b.port)) for b in self.meta.brokers.values()}
        self._conns: dict[int, tuple[RawConnection, dict[int, tuple[int, int]]]] = {}

    def close(self) -> None:
        for conn, _ in self._conns.values():
            conn.close()
        self._conns.clear()

    def _connection(self, broker_id: int) -> tuple[RawConnection, dict[int, tuple[int, int]]]:
        if broker_id in self._conns:
            return self._conns[broker_id]
        address = self.brokers.get(broker_id)
        if address is None:
            raise CliError(f"Broker {broker_id} is not in the cluster (brokers: "
                           f"{', '.join(str(b) for b in sorted(self.brokers)) or 'none'}).")
        conn = raw_connect(address[0], address[1], self.admin.conf, self.admin.timeout_s, self.admin.bootstrap)
        try:
            resp = self._call(conn, broker_id, ApiKey.API_VERSIONS, 0, codec.request_class(ApiKey.API_VERSIONS)())
        except BaseException:
            conn.close()
            raise
        versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        self._conns[broker_id] = (conn, versions)
        return conn, versions

    def _call(self, conn: RawConnection, broker_id: int, api_key: int, version: int, request: Any) -> Any:
        try:
            return conn.request(api_key, version, request)
        except (OSError, ValueError, EOFError) as exc:
            self._conns.pop(broker_id, None)
            conn.close()
            raise CliError(f"Broker {broker_id} at {self._address(broker_id)} did not answer: "
                           f"{str(exc) or type(exc).__name__}.") from exc

    def _address(self, broker_id: int) -> str:
        host, port = self.brokers.get(broker_id, ("?", 0))
        return f"{host}:{port}"

    def request(self, broker_id: int, api_key: ApiKey, build: Callable[[Any], Any]) -> Any:
        """Send the request ``build(request class)`` to the broker at the highest version both
        sides support; its decoded response."""
        conn, versions = self._connection(broker_id)
        low, high = _VERSIONS[api_key]
        theirs = versions.get(api_key)
        if theirs is None or min(high, theirs[1]) < max(low, theirs[0]):
            raise CliError(f"Broker {broker_id} does not support {_api_name(api_key)} "
                           f"(versions {low}-{high}); it needs Kafka 3.0 or later, or kaflet.")
        version = min(high, theirs[1])
        return self._call(conn, broker_id, api_key, version, build(codec.request_class(api_key)))

    def retrying(self, attempt: Callable[[], ErrorCode], what: str) -> ErrorCode:
        """Run ``attempt`` until it answers something other than a coordinator that is loading
        or moving (Kafka's admin retries those), for at most --timeout; what it answered last."""
        deadline = time.monotonic() + self.admin.timeout_s
        while True:
            code = attempt()
            if code not in _RETRIABLE:
                return code
            if time.monotonic() >= deadline:
                raise CliError(f"{what}: the coordinator is not available ({code.name}).")
            time.sleep(_RETRY_BACKOFF_S)

    # ---- what the actions ask -----------------------------------------------------------

    def partitions_of(self, topic: str) -> dict[int, Any]:
        meta = self.admin.existing_topic(topic)
        if meta is None:
            raise CliError(f"Topic '{topic}' does not exist.")
        return dict(meta.partitions)

    def leader_of(self, topic: str, partition: int) -> int:
        parts = self.partitions_of(topic)
        if partition not in parts:
            raise CliError(f"Topic '{topic}' has no partition {partition}.")
        leader = int(parts[partition].leader)
        if leader < 0:
            raise CliError(f"Partition {_tp(topic, partition)} has no leader now; try again later.")
        return leader

    def describe_producers(self, broker_id: int, partitions: list[tuple[str, int]],
                           what: str) -> dict[tuple[str, int], list[ProducerState]]:
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        resp = self.request(broker_id, ApiKey.DESCRIBE_PRODUCERS, lambda R: R(topics=[
            R.TopicRequest(name=t, partition_indexes=ix) for t, ix in by_topic.items()]))
        out: dict[tuple[str, int], list[ProducerState]] = {}
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code != ErrorCode.NONE:
                    detail = f"{p.error_message} " if p.error_message else ""
                    raise CliError(f"{what} of {_tp(t.name, p.partition_index)} on broker {broker_id}: "
                                   f"{detail}({error_name(p.error_code)}).")
                out[(t.name, p.partition_index)] = [
                    ProducerState(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
                                  s.coordinator_epoch, s.current_txn_start_offset) for s in p.active_producers]
        return out

    def list_transactions(self, producer_ids: Iterable[int] = ()) -> list[tuple[int, Any]]:
        """(coordinator id, listing) of every transactional id every broker coordinates (of
        `producer_ids` only, when given)."""
        pids = sorted(set(producer_ids))
        out: list[tuple[int, Any]] = []
        for broker_id in sorted(self.brokers):
            listing: list[Any] = []

            def attempt(broker_id: int = broker_id, listing: list[Any] = listing) -> ErrorCode:
                resp = self.request(broker_id, ApiKey.LIST_TRANSACTIONS,
                                    lambda R: R(state_filters=[], producer_id_filters=pids))
                listing[:] = resp.transaction_states
                return _code(resp.error_code)

            code = self.retrying(attempt, f"Failed to list transactions on broker {broker_id}")
            if code != ErrorCode.NONE:
                raise CliError(f"Failed to list transactions on broker {broker_id}: {code.name}.")
            out.extend((broker_id, t) for t in listing)
        return out

    def describe_transaction(self, transactional_id: str) -> tuple[int, Any]:
        """(coordinator id, state) of a transactional id; TRANSACTIONAL_ID_NOT_FOUND etc. are the
        state's error code."""
        found: list[tuple[int, Any]] = []

        def attempt() -> ErrorCode:
            coordinator = self.find_coordinator(transactional_id)
            if isinstance(coordinator, ErrorCode):
                return coordinator
            resp = self.request(coordinator, ApiKey.DESCRIBE_TRANSACTIONS,
                                lambda R: R(transactional_ids=[transactional_id]))
            (state,) = resp.transaction_states
            found[:] = [(coordinator, state)]
            return _code(state.error_code)

        what = f"Failed to describe transaction state of transactional-id `{transactional_id}`"
        code = self.retrying(attempt, what)
        if not found:  # FindCoordinator itself failed
            raise CliError(f"{what}: {code.name}.")
        return found[0]

    def find_coordinator(self, transactional_id: str) -> int | ErrorCode:
        """The broker coordinating `transactional_id` (FindCoordinator, key type transaction)."""
        anyone = min(self.brokers) if self.brokers else -1
        resp = self.request(anyone, ApiKey.FIND_COORDINATOR,
                            lambda R: R(key=transactional_id, key_type=_TRANSACTION_KEY_TYPE))
        if resp.error_code != ErrorCode.NONE:
            return _code(resp.error_code)
        # The coordinator's address may be one the metadata above did not list yet.
        self.brokers.setdefault(resp.node_id, (resp.host, resp.port))
        return int(resp.node_id)

    def write_abort_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                           coordinator_epoch: int) -> ErrorCode:
        leader = self.leader_of(topic, partition)

        def build(R: Any) -> Any:
            marker = R.WritableTxnMarker(
                producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
                coordinator_epoch=coordinator_epoch,
                topics=[R.WritableTxnMarker.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])])
            return R(markers=[marker])

        resp = self.request(leader, ApiKey.WRITE_TXN_MARKERS, build)
        for marker in resp.markers:
            for t in marker.topics:
                for p in t.partitions:
                    if t.name == topic and p.partition_index == partition:
                        return _code(p.error_code)
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _api_name(api_key: ApiKey) -> str:
    return "".join(part.title() for part in api_key.name.split("_"))


@click.command("transactions")
@bootstrap_option()
@click.option("--list", "list_", is_flag=True, help="List the transactional ids of every coordinator.")
@click.option("--describe", is_flag=True, help="Describe the state of a transactional id (--transactional-id).")
@click.option("--describe-producers", is_flag=True,
              help="Describe the active producers of a partition (--topic, --partition).")
@click.option("--find-hanging", is_flag=True,
              help="Find hanging transactions (--broker-id, or --topic and optionally --partition).")
@click.option("--abort", is_flag=True,
              help="Abort a hanging transaction (--topic, --partition, and --start-offset or --producer-id, "
                   "--producer-epoch, --coordinator-epoch); needs ClusterAction.")
@click.option("--transactional-id", metavar="ID", help="With --describe: the transactional id.")
@click.option("--topic", metavar="TOPIC", help="The topic (--describe-producers, --find-hanging, --abort).")
@click.option("--partition", type=click.IntRange(min=0), help="The partition (--describe-producers, "
              "--find-hanging, --abort).")
@click.option("--broker-id", type=int, help="--describe-producers: ask this replica instead of the leader; "
              "--find-hanging: search the partitions this broker holds a replica of.")
@click.option("--max-transaction-timeout", type=click.IntRange(min=0), default=15, show_default=True,
              metavar="MINUTES", help="With --find-hanging: only transactions open longer than this.")
@click.option("--start-offset", type=click.IntRange(min=0), help="With --abort: the offset where the "
              "transaction to abort starts.")
@click.option("--producer-id", type=click.IntRange(min=0), help="With --abort: the producer id (with "
              "--producer-epoch and --coordinator-epoch, instead of --start-offset).")
@click.option("--producer-epoch", type=click.IntRange(min=0, max=32767), help="With --abort: the producer epoch.")
@click.option("--coordinator-epoch", type=int, help="With --abort: the coordinator epoch (-1 is taken as 0).")
@config_file_option()
@timeout_option()
def transactions(bootstrap: str, list_: bool, describe: bool, describe_producers: bool, find_hanging: bool,
                 abort: bool, transactional_id: str | None, topic: str | None, partition: int | None,
                 broker_id: int | None, max_transaction_timeout: int, start_offset: int | None,
                 producer_id: int | None, producer_epoch: int | None, coordinator_epoch: int | None,
                 config_file: str | None, timeout_s: float) -> None:
    """Analyze the transactional state of producers and recover from hanging transactions."""
    chosen = [n for n, on in zip(_ACTIONS, (list_, describe, describe_producers, find_hanging, abort), strict=True)
              if on]
    if len(chosen) != 1:
        raise click.UsageError("Exactly one of --list, --describe, --describe-producers, --find-hanging or --abort "
                               "is required.")
    action = chosen[0]
    _check_options(action, transactional_id, topic, partition, broker_id, start_offset, producer_id, producer_epoch,
                   coordinator_epoch)
    cluster = Cluster(Admin(bootstrap, config_file, timeout_s))
    try:
        if action == "list":
            _list(cluster)
        elif action == "describe":
            assert transactional_id is not None
            _describe(cluster, transactional_id)
        elif action == "describe-producers":
            assert topic is not None and partition is not None
            _describe_producers(cluster, topic, partition, broker_id)
        elif action == "find-hanging":
            _find_hanging(cluster, topic, partition, broker_id, max_transaction_timeout)
        else:
            assert topic is not None and partition is not None
            _abort(cluster, topic, partition, start_offset, producer_id, producer_epoch, coordinator_epoch)
    finally:
        cluster.close()


def _check_options(action: str, transactional_id: str | None, topic: str | None, partition: int | None,
                   broker_id: int | None, start_offset: int | None, producer_id: int | None,
                   producer_epoch: int | None, coordinator_epoch: int | None) -> None:
    """Kafka's argument checks, as one-sentence usage errors."""
    given = {"--transactional-id": transactional_id, "--topic": topic, "--partition": partition,
             "--broker-id": broker_id, "--start-offset": start_offset, "--producer-id": producer_id,
             "--producer-epoch": producer_epoch, "--coordinator-epoch": coordinator_epoch}
    allowed = {
        "list": set(),
        "describe": {"--transactional-id"},
        "describe-producers": {"--topic", "--partition", "--broker-id"},
        "find-hanging": {"--topic", "--partition", "--broker-id"},
        "abort": {"--topic", "--partition", "--start-offset", "--producer-id", "--producer-epoch",
                  "--coordinator-epoch"},
    }[action]
    extra = [name for name, value in given.items() if value is not None and name not in allowed]
    if extra:
        raise click.UsageError(f"{', '.join(extra)} cannot be used with --{action}.")
    if action == "describe" and not transactional_id:
        raise click.UsageError("--describe needs --transactional-id.")
    if action in ("describe-producers", "abort") and (topic is None or partition is None):
        raise click.UsageError(f"--{action} needs --topic and --partition.")
    if action == "find-hanging":
        if topic is None and broker_id is None:
            raise click.UsageError("--find-hanging needs --topic or --broker-id to limit the scope of the search.")
        if partition is not None and topic is None:
            raise click.UsageError("--partition needs --topic.")
    if action == "abort":
        if start_offset is None and producer_id is None:
            raise click.UsageError("The transaction to abort must be identified either with --start-offset or with "
                                   "--producer-id, --producer-epoch and --coordinator-epoch.")
        if start_offset is not None and (producer_id, producer_epoch, coordinator_epoch) != (None, None, None):
            raise click.UsageError("Give either --start-offset or --producer-id, --producer-epoch and "
                                   "--coordinator-epoch, not both.")
        if start_offset is None and producer_epoch is None:
            raise click.UsageError("--producer-id needs --producer-epoch.")
        if start_offset is None and coordinator_epoch is None:
            raise click.UsageError("--producer-id needs --coordinator-epoch.")


def _list(cluster: Cluster) -> None:
    rows = [[t.transactional_id, str(coordinator), str(t.producer_id), t.transaction_state]
            for coordinator, t in cluster.list_transactions()]
    _table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows)


def _describe(cluster: Cluster, transactional_id: str) -> None:
    coordinator, state = cluster.describe_transaction(transactional_id)
    if state.error_code != ErrorCode.NONE:
        reason = ("no such transactional id" if state.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
                  else "not authorized" if state.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                  else "the coordinator answered")
        raise CliError(f"Failed to describe transaction state of transactional-id `{transactional_id}`: {reason} "
                       f"({error_name(state.error_code)}).")
    started = state.transaction_start_time_ms
    start_text, duration = ("None", "None") if started < 0 else (str(started), str(int(time.time() * 1000) - started))
    partitions = ",".join(_tp(t.topic, p) for t in state.topics for p in t.partitions)
    _table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
            "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
           [[str(coordinator), transactional_id, str(state.producer_id), str(state.producer_epoch),
             state.transaction_state, str(state.transaction_timeout_ms), start_text, duration, partitions]])


def _describe_producers(cluster: Cluster, topic: str, partition: int, broker_id: int | None) -> None:
    target = cluster.leader_of(topic, partition) if broker_id is None else broker_id
    where = "leader" if broker_id is None else f"broker {broker_id}"
    states = cluster.describe_producers(target, [(topic, partition)],
                                       f"Failed to describe producers on {where}")[(topic, partition)]
    _table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
            "CurrentTransactionStartOffset"],
           [[str(s.producer_id), str(s.producer_epoch), str(s.coordinator_epoch), str(s.last_sequence),
             str(s.last_timestamp), str(s.current_txn_start_offset) if s.current_txn_start_offset >= 0 else "None"]
            for s in sorted(states, key=lambda s: s.producer_id)])


def _search_scope(cluster: Cluster, topic: str | None, partition: int | None,
                  broker_id: int | None) -> dict[int, list[tuple[str, int]]]:
    """The partitions to search, by the broker to ask: `broker_id`'s replicas, or each leader."""
    if topic is not None:
        parts = cluster.partitions_of(topic)
        if partition is not None and partition not in parts:
            raise CliError(f"Topic '{topic}' has no partition {partition}.")
        metas = {(topic, i): p for i, p in parts.items() if partition is None or i == partition}
    else:
        metas = {(t, i): p for t, tm in cluster.meta.topics.items() for i, p in tm.partitions.items()}
    if broker_id is not None and broker_id not in cluster.brokers:
        raise CliError(f"Broker {broker_id} is not in the cluster.")
    by_broker: dict[int, list[tuple[str, int]]] = {}
    for tp, meta in sorted(metas.items()):
        if broker_id is not None:
            if broker_id in meta.replicas:
                by_broker.setdefault(broker_id, []).append(tp)
        elif meta.leader < 0:
            raise CliError(f"Partition {_tp(*tp)} has no leader now; try again later.")
        else:
            by_broker.setdefault(int(meta.leader), []).append(tp)
    return by_broker


def _find_hanging(cluster: Cluster, topic: str | None, partition: int | None, broker_id: int | None,
                  max_timeout_min: int) -> None:
    now = int(time.time() * 1000)
    max_ms = max_timeout_min * 60_000
    candidates: list[tuple[tuple[str, int], ProducerState]] = []
    for broker, tps in _search_scope(cluster, topic, partition, broker_id).items():
        states = cluster.describe_producers(broker, tps, "Failed to describe producers")
        candidates += [(tp, s) for tp, ss in states.items() for s in ss
                       if s.current_txn_start_offset >= 0 and now - s.last_timestamp > max_ms]
    hanging: list[tuple[tuple[str, int], ProducerState]] = []
    if candidates:
        # Whose open transactions the coordinators know, and which partitions those still cover.
        ids = {t.producer_id: t.transactional_id
               for _, t in cluster.list_transactions({s.producer_id for _, s in candidates})}
        covered: dict[str, set[tuple[str, int]] | None] = {}
        for txn_id in set(ids.values()):
            _, state = cluster.describe_transaction(txn_id)
            if state.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                covered[txn_id] = None
            elif state.error_code != ErrorCode.NONE:
                raise CliError(f"Failed to describe transaction state of transactional-id `{txn_id}`: "
                               f"{error_name(state.error_code)}.")
            else:
                covered[txn_id] = {(t.topic, p) for t in state.topics for p in t.partitions}
        for tp, s in candidates:
            txn_id = ids.get(s.producer_id)
            partitions = covered.get(txn_id) if txn_id is not None else None
            if partitions is None or tp not in partitions:
                hanging.append((tp, s))
    _table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset", "LastTimestamp",
            "Duration(min)"],
           [[tp[0], str(tp[1]), str(s.producer_id), str(s.producer_epoch), str(s.coordinator_epoch),
             str(s.current_txn_start_offset), str(s.last_timestamp), str((now - s.last_timestamp) // 60_000)]
            for tp, s in hanging])


def _abort(cluster: Cluster, topic: str, partition: int, start_offset: int | None, producer_id: int | None,
           producer_epoch: int | None, coordinator_epoch: int | None) -> None:
    name = _tp(topic, partition)
    if start_offset is not None:
        leader = cluster.leader_of(topic, partition)
        states = cluster.describe_producers(leader, [(topic, partition)],
                                            "Failed to validate producer state")[(topic, partition)]
        found = [s for s in states if s.current_txn_start_offset == start_offset]
        if not found:
            raise CliError(f"Could not find any open transactions starting at offset {start_offset} on partition "
                           f"{name}.")
        producer_id, producer_epoch = found[0].producer_id, found[0].producer_epoch
        coordinator_epoch = found[0].coordinator_epoch
    assert producer_id is not None and producer_epoch is not None and coordinator_epoch is not None
    # A transaction that hung before its producer id's first marker has no coordinator epoch
    # (-1): 0 is no larger than any coordinator epoch there can be (Kafka's choice too).
    coordinator_epoch = max(coordinator_epoch, 0)
    code = cluster.write_abort_marker(topic, partition, producer_id, producer_epoch, coordinator_epoch)
    what = (f"the transaction of producer id {producer_id} (epoch {producer_epoch}, coordinator epoch "
            f"{coordinator_epoch}) on {name}")
    if code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        raise CliError(f"Failed to abort {what}: not authorized (ClusterAction on the cluster is needed) "
                       f"({code.name}).")
    if code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED):
        raise CliError(f"Failed to abort {what}: the partition has a newer producer or coordinator epoch "
                       f"({code.name}).")
    if code != ErrorCode.NONE:
        raise CliError(f"Failed to abort {what}: {code.name}.")
    click.echo(f"Aborted {what}.")
