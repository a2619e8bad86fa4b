"""`kaflet reassign-partitions`: move partition replicas, like kafka-reassign-partitions.sh.

The same actions (--generate, --execute, --verify, --cancel, --list), JSON files and output
lines as Kafka 2.8's ReassignPartitionsCommand with --bootstrap-server. The requests are
AlterPartitionReassignments and ListPartitionReassignments (KIP-455), sent to the controller
over kaflet's own connection (confluent-kafka's AdminClient has no call for them), secured as
--command-config says.

``--execute --throttle <bytes/s>`` throttles the moves as Kafka's tool does (KIP-73): it sets
``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate`` on every broker
a move involves, and on each topic ``leader.replication.throttled.replicas`` (the partitions'
current replicas, which the new ones copy from) and ``follower.replication.throttled.replicas``
(the new replicas). ``--verify`` (and ``--cancel``) clears them all once no reassignment of the
file is in progress, unless ``--preserve-throttles``; ``--execute --additional --throttle``
changes the rate of a reassignment in progress.

Moves between the log directories of a broker (the JSON's ``log_dirs``, one entry per replica,
"any" for no preference) are started after the reassignment, as Kafka's tool does: an
AlterReplicaLogDirs request to each broker, repeated every 100 ms while a broker answers
REPLICA_NOT_AVAILABLE (the replica is not there yet) until ``--timeout``.
``--replica-alter-log-dirs-throttle <bytes/s>`` sets
``replica.alter.log.dirs.io.max.bytes.per.second`` on the brokers of those moves; ``--verify``
reports each replica's move from DescribeLogDirs and clears that throttle with the others.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from kaflet.cli.common import (
    Admin,
    CliError,
    bootstrap_option,
    config_file_option,
    raw_connect,
    timeout_option,
)
from kaflet.metadata.assignment import BrokerMetadata, assign_replicas_to_brokers
from kaflet.metadata.errors import AdminError
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode, error_name

Partition = tuple[str, int]

_CANNOT_EXECUTE = ("Cannot execute because there is an existing partition assignment.  Use --additional to "
                   "override this and create a new partition assignment in addition to the existing one. The "
                   "--additional flag can also be used to change the throttle by resubmitting the current "
                   "reassignment.")
_ANY_LOG_DIR = "any"
_VERIFY_PERIODICALLY = ("Warning: You must run --verify periodically, until the reassignment completes, to "
                        "ensure the throttle is removed.")
#: Kafka's BROKER_LEVEL_THROTTLES and TOPIC_LEVEL_THROTTLES.
_LOG_DIR_THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"
_BROKER_THROTTLES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate", _LOG_DIR_THROTTLE)
_TOPIC_THROTTLES = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
#: How long to keep looking for the controller when the one asked says it no longer is.
_CONTROLLER_RETRIES = 5
#: Kafka's tool asks again this often while a replica is not yet where it can be moved.
_LOG_DIR_RETRY_S = 0.1
#: (topic, partition, broker): Kafka's TopicPartitionReplica.
Replica = tuple[str, int, int]


def _name(tp: Partition) -> str:
    return f"{tp[0]}-{tp[1]}"  # Kafka's TopicPartition.toString


def _names(tps: Any) -> str:
    return ",".join(_name(tp) for tp in sorted(tps))


def _load_json(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CliError(f"The input string is not a valid JSON ({source}: {exc}).") from exc


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"Cannot read {path}: {exc}.") from exc


def _load_versioned(text: str, source: str, key: str) -> dict[str, Any]:
    """A version-1 JSON object of the tool's files whose `key` is a list (CliError otherwise)."""
    data = _load_json(text, source)
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        raise CliError(f"{source} must be a JSON object with a \"{key}\" list.")
    version = data.get("version", 1)
    if version != 1:
        raise CliError(f"Not supported version field value {version}")
    return data


def _replica_name(r: Replica) -> str:
    return f"{r[0]}-{r[1]}-{r[2]}"  # Kafka's TopicPartitionReplica.toString


def parse_reassignment_json(text: str, source: str) -> dict[Partition, list[int]]:
    """The target replicas of a reassignment JSON file, with Kafka's checks (CliError)."""
    return parse_reassignment(text, source)[0]


def parse_reassignment(text: str, source: str) -> tuple[dict[Partition, list[int]], dict[Replica, str]]:
    """The target replicas of a reassignment JSON file and the log dirs asked for (those other
    than "any"), with Kafka's checks (CliError)."""
    data = _load_versioned(text, source, "partitions")
    out: dict[Partition, list[int]] = {}
    dirs: dict[Replica, str] = {}
    duplicates: set[Partition] = set()
    for entry in data["partitions"]:
        topic = entry.get("topic") if isinstance(entry, dict) else None
        partition = entry.get("partition") if isinstance(entry, dict) else None
        replicas = entry.get("replicas") if isinstance(entry, dict) else None
        if (not isinstance(topic, str) or not topic or isinstance(partition, bool) or not isinstance(partition, int)
                or not isinstance(replicas, list)
                or not all(isinstance(r, int) and not isinstance(r, bool) for r in replicas)):
            raise CliError(f"Invalid entry in {source}: {json.dumps(entry)} "
                           "(expected {\"topic\": string, \"partition\": int, \"replicas\": [int, ...]}).")
        log_dirs = entry.get("log_dirs")
        if log_dirs is not None:
            if not isinstance(log_dirs, list) or len(log_dirs) != len(replicas):
                raise CliError(f"Size of replicas list {replicas} is different from size of log dirs list "
                               f"{log_dirs} for partition {topic}-{partition}")
            if not all(isinstance(d, str) and d for d in log_dirs):
                raise CliError(f"Invalid log_dirs {json.dumps(log_dirs)} for partition {topic}-{partition} in "
                               f"{source} (expected a directory path or \"any\" for each replica).")
            dirs.update(((topic, partition, r), d) for r, d in zip(replicas, log_dirs, strict=True)
                        if d != _ANY_LOG_DIR)
        tp = (topic, partition)
        if tp in out:
            duplicates.add(tp)
        out[tp] = list(replicas)
    if not out:
        raise CliError("Partition reassignment list cannot be empty")
    if any(not r for r in out.values()):
        raise CliError("Partition replica list cannot be empty")
    if duplicates:
        raise CliError(f"Partition reassignment contains duplicate topic partitions: {_names(duplicates)}")
    repeated = {tp: sorted({r for r in reps if reps.count(r) > 1}) for tp, reps in out.items()}
    repeated = {tp: r for tp, r in repeated.items() if r}
    if repeated:
        detail = ", ".join(f"{_name(tp)} contains multiple entries for {','.join(map(str, r))}"
                           for tp, r in sorted(repeated.items()))
        raise CliError(f"Partition replica lists may not contain duplicate entries: {detail}")
    return out, dirs


def parse_topics_json(text: str, source: str) -> list[str]:
    """The topics of a --topics-to-move-json-file (``{"topics": [{"topic": "foo"}], "version": 1}``)."""
    data = _load_versioned(text, source, "topics")
    topics = []
    for entry in data["topics"]:
        topic = entry.get("topic") if isinstance(entry, dict) else None
        if not isinstance(topic, str) or not topic:
            raise CliError(f"Invalid entry in {source}: {json.dumps(entry)} (expected {{\"topic\": string}}).")
        topics.append(topic)
    repeated = sorted({t for t in topics if topics.count(t) > 1})
    if repeated:
        raise CliError(f"List of topics to reassign contains duplicate entries: {','.join(repeated)}")
    return topics


def reassignment_json(parts: dict[Partition, list[int]]) -> str:
    """Kafka's formatAsReassignmentJson (every log dir "any")."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": parts[(t, p)], "log_dirs": [_ANY_LOG_DIR] * len(parts[(t, p)])}
        for t, p in sorted(parts)]}, separators=(",", ":"))


class _Reassigner(Admin):
    """The admin helper plus the two KIP-455 requests, sent to the controller."""

    def _to_controller(self, api_key: ApiKey, request: Any) -> Any:
        for _ in range(_CONTROLLER_RETRIES):
            md = self.metadata()
            broker = md.brokers.get(md.controller_id)
            if broker is None or broker.host is None:
                time.sleep(0.5)  # an election is under way
                continue
            with raw_connect(broker.host, broker.port, self.conf, self.timeout_s, self.bootstrap) as conn:
                try:
                    resp = conn.request(api_key, 0, request)
                except (OSError, ValueError) as exc:
                    raise CliError(f"The controller (broker {broker.id} at {broker.host}:{broker.port}) did not "
                                   f"answer: {exc}.") from exc
            if resp.error_code == ErrorCode.NOT_CONTROLLER:
                time.sleep(0.5)  # the controller moved since the metadata was read
                continue
            if resp.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
                raise CliError("Not authorized to alter or list partition reassignments (Alter/Describe on the "
                               "cluster).")
            if resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
                raise CliError("The controller does not support partition reassignment (KIP-455).")
            if resp.error_code:
                raise CliError(f"{resp.error_message or 'Request failed'} ({error_name(resp.error_code)}).")
            return resp
        raise CliError("Could not find the active controller (it kept moving).")

    def alter(self, parts: dict[Partition, list[int] | None]) -> dict[Partition, tuple[int, str | None]]:
        R = codec.request_class(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
        by_topic: dict[str, list[Any]] = {}
        for (topic, index), replicas in sorted(parts.items()):
            by_topic.setdefault(topic, []).append(
                R.ReassignableTopic.ReassignablePartition(partition_index=index, replicas=replicas))
        resp = self._to_controller(ApiKey.ALTER_PARTITION_REASSIGNMENTS, R(
            timeout_ms=int(self.timeout_s * 1000),
            topics=[R.ReassignableTopic(name=t, partitions=ps) for t, ps in by_topic.items()]))
        return {(t.name, p.partition_index): (p.error_code, p.error_message)
                for t in resp.responses for p in t.partitions}

    def ongoing(self, parts: list[Partition] | None = None) -> dict[Partition, tuple[list[int], list[int], list[int]]]:
        """(replicas, adding, removing) of the reassignments in progress (of ``parts``)."""
        R = codec.request_class(ApiKey.LIST_PARTITION_REASSIGNMENTS)
        topics = None
        if parts is not None:
            by_topic: dict[str, list[int]] = {}
            for t, p in sorted(parts):
                by_topic.setdefault(t, []).append(p)
            topics = [R.ListPartitionReassignmentsTopics(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
        resp = self._to_controller(ApiKey.LIST_PARTITION_REASSIGNMENTS, R(
            timeout_ms=int(self.timeout_s * 1000), topics=topics))
        return {(t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
                for t in resp.topics for p in t.partitions}

    def alter_configs(self, changes: dict[tuple[ResourceType, str], dict[str, str | None]]) -> None:
        """IncrementalAlterConfigs: SET each value, DELETE each None. One resource per call: a
        broker's own configs go to that broker, and librdkafka takes one such resource a call."""
        for (rtype, name), ops in changes.items():
            res = ConfigResource(rtype, name, incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.DELETE if v is None else AlterConfigOpType.SET)
                for k, v in ops.items()])
            futures = self.client.incremental_alter_configs([res], request_timeout=self.timeout_s)
            self.result(futures[res], what=f"Altering the configs of {rtype.name.lower()} {name} failed")

    def alter_replica_log_dirs(self, broker: int, dirs: dict[Replica, str]) -> dict[Replica, int]:
        """AlterReplicaLogDirs to ``broker`` for its replicas in ``dirs``: each one's error code."""
        R = codec.request_class(ApiKey.ALTER_REPLICA_LOG_DIRS)
        by_dir: dict[str, dict[str, list[int]]] = {}
        for (topic, partition, _), d in sorted(dirs.items()):
            by_dir.setdefault(d, {}).setdefault(topic, []).append(partition)
        request = R(dirs=[R.AlterReplicaLogDir(path=d, topics=[
            R.AlterReplicaLogDir.AlterReplicaLogDirTopic(name=t, partitions=ps) for t, ps in topics.items()])
            for d, topics in by_dir.items()])
        meta = self.metadata().brokers.get(broker)
        if meta is None or meta.host is None:
            raise CliError(f"Broker {broker} is not in the cluster.")
        with raw_connect(meta.host, meta.port, self.conf, self.timeout_s, self.bootstrap) as conn:
            try:
                resp = conn.request(ApiKey.ALTER_REPLICA_LOG_DIRS, 1, request)
            except (OSError, ValueError) as exc:
                raise CliError(f"Broker {broker} at {meta.host}:{meta.port} did not answer AlterReplicaLogDirs: "
                               f"{exc}.") from exc
        return {(t.topic_name, p.partition_index, broker): p.error_code for t in resp.results for p in t.partitions}

    def current_replicas(self, topics: set[str]) -> dict[Partition, list[int]]:
        out: dict[Partition, list[int]] = {}
        md = self.metadata()
        for topic in sorted(topics):
            meta = md.topics.get(topic)
            if meta is None or not meta.partitions:
                continue  # no such topic
            for index, pm in meta.partitions.items():
                out[(topic, index)] = list(pm.replicas)
        return out


def _list(r: _Reassigner) -> None:
    ongoing = r.ongoing()
    if not ongoing:
        click.echo("No partition reassignments found.")
        return
    click.echo("Current partition reassignments:")
    for tp in sorted(ongoing):
        replicas, adding, removing = ongoing[tp]
        line = f"{_name(tp)}: replicas: {','.join(map(str, replicas))}."
        if adding:
            line += f" adding: {','.join(map(str, adding))}."
        if removing:
            line += f" removing: {','.join(map(str, removing))}."
        click.echo(line)


def move_map(ongoing: dict[Partition, tuple[list[int], list[int], list[int]]], proposed: dict[Partition, list[int]],
             current: dict[Partition, list[int]]) -> dict[Partition, tuple[set[int], set[int]]]:
    """(sources, destinations) of every partition moving: those in progress and those proposed
    (Kafka's calculateProposedMoveMap). A proposed partition already moving keeps its sources."""
    moves = {tp: (set(replicas) - set(adding), set(adding)) for tp, (replicas, adding, _r) in ongoing.items()}
    for tp, replicas in proposed.items():
        sources = moves[tp][0] if tp in moves else set(current[tp])
        moves[tp] = (sources, set(replicas) - sources)
    return moves


def throttle_configs(moves: dict[Partition, tuple[set[int], set[int]]]) -> dict[str, tuple[str, str]]:
    """Each topic's (leader, follower) throttled-replicas values: the sources of its moving
    partitions, and the destinations (Kafka's calculateLeaderThrottles / calculateFollowerThrottles)."""
    leader: dict[str, set[tuple[int, int]]] = {}
    follower: dict[str, set[tuple[int, int]]] = {}
    for (topic, p), (sources, destinations) in moves.items():
        leader.setdefault(topic, set()).update((p, b) for b in sources)
        follower.setdefault(topic, set()).update((p, b) for b in destinations - sources)

    def fmt(pairs: set[tuple[int, int]]) -> str:
        # Kafka sorts the "p:b" strings (a TreeSet of strings).
        return ",".join(sorted(f"{p}:{b}" for p, b in pairs))

    return {t: (fmt(leader[t]), fmt(follower.get(t, set()))) for t in leader}


def _set_throttles(r: _Reassigner, moves: dict[Partition, tuple[set[int], set[int]]], rate: int) -> None:
    """Kafka's modifyReassignmentThrottle: the topics' throttled replicas, then the brokers' rates."""
    changes: dict[tuple[ResourceType, str], dict[str, str | None]] = {
        (ResourceType.TOPIC, topic): {_TOPIC_THROTTLES[0]: lead, _TOPIC_THROTTLES[1]: follow}
        for topic, (lead, follow) in sorted(throttle_configs(moves).items())}
    r.alter_configs(changes)
    brokers = sorted({b for sources, destinations in moves.values() for b in sources | destinations})
    r.alter_configs({(ResourceType.BROKER, str(b)): dict.fromkeys(_BROKER_THROTTLES, str(rate))
                     for b in brokers})
    click.echo(f"The inter-broker throttle limit was set to {rate} B/s")


def _clear_throttles(r: _Reassigner, targets: dict[Partition, list[int]]) -> None:
    """Kafka's clearAllThrottles: the rates of every broker (the sources of earlier moves are
    not known), and the throttled replicas of the file's topics."""
    brokers = sorted(set(r.metadata().brokers) | {b for reps in targets.values() for b in reps})
    click.echo(f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} "
               f"{','.join(map(str, brokers))}")
    r.alter_configs({(ResourceType.BROKER, str(b)): dict.fromkeys(_BROKER_THROTTLES) for b in brokers})
    topics = sorted({t for t, _ in targets})
    click.echo(f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} {','.join(topics)}")
    r.alter_configs({(ResourceType.TOPIC, t): dict.fromkeys(_TOPIC_THROTTLES) for t in topics})


def _set_log_dir_throttle(r: _Reassigner, moves: dict[Replica, str], rate: int) -> None:
    """Kafka's modifyLogDirThrottle: the bound on every broker with a replica to move."""
    brokers = sorted({b for _, _, b in moves})
    r.alter_configs({(ResourceType.BROKER, str(b)): {_LOG_DIR_THROTTLE: str(rate)} for b in brokers})
    click.echo(f"The replica-alter-dir throttle limit was set to {rate} B/s")


def _execute_moves(r: _Reassigner, moves: dict[Replica, str]) -> None:
    """Kafka's executeMoves: AlterReplicaLogDirs to each broker until every replica's move has
    started; a replica not on its broker yet (REPLICA_NOT_AVAILABLE) is asked again."""
    deadline = time.monotonic() + r.timeout_s
    pending = dict(moves)
    while True:
        for broker in sorted({b for _, _, b in pending}):
            answers = r.alter_replica_log_dirs(broker, {k: d for k, d in pending.items() if k[2] == broker})
            for replica, code in sorted(answers.items()):
                if replica not in pending or code == ErrorCode.REPLICA_NOT_AVAILABLE:
                    continue
                if code != ErrorCode.NONE:
                    raise CliError(f"Failed to alter dir for {_replica_name(replica)}: {error_name(code)} "
                                   f"(log dir {pending[replica]}).")
                click.echo(f"Successfully started moving log directory to {pending.pop(replica)} for replica "
                           f"{replica[0]}-{replica[1]} with broker {replica[2]} ")
        if not pending:
            return
        if time.monotonic() >= deadline:
            plural = "" if len(pending) == 1 else "s"
            raise CliError(f"Timed out before log directory move{plural} could be started for: "
                           f"{','.join(_replica_name(p) for p in sorted(pending))}")
        time.sleep(_LOG_DIR_RETRY_S)


def _verify_moves(r: _Reassigner, moves: dict[Replica, str]) -> bool:
    """Kafka's verifyReplicaMoves from DescribeLogDirs: a line per replica; whether every move
    is over (done, or no longer asked of the broker)."""
    from kaflet.cli.log_dirs import describe_log_dirs

    dirs = describe_log_dirs(r, sorted({b for _, _, b in moves}), {t for t, _, _ in moves})
    current: dict[Replica, str] = {}
    future: dict[Replica, str] = {}
    for d in dirs:
        for rep in d.replicas:
            (future if rep.is_future else current)[(rep.topic, rep.partition, d.broker)] = d.path
    done = True
    for replica in sorted(moves):
        topic, partition, broker = replica
        target = moves[replica]
        if replica not in current:
            done = False
            click.echo(f"Partition {topic}-{partition} cannot be found in any live log directory on broker "
                       f"{broker}.")
        elif replica in future:
            done = False
            if future[replica] == target:
                click.echo(f"Reassignment of replica {_replica_name(replica)} is still in progress.")
            else:
                click.echo(f"Partition {topic}-{partition} on broker {broker} is being moved to log dir "
                           f"{future[replica]} instead of {target}.")
        elif current[replica] == target:
            click.echo(f"Reassignment of replica {_replica_name(replica)} completed successfully.")
        else:
            click.echo(f"Partition {topic}-{partition} on broker {broker} is not being moved from log dir "
                       f"{current[replica]} to {target}.")
    return done


def _execute(r: _Reassigner, proposed: dict[Partition, list[int]], additional: bool, throttle: int = -1,
             moves: dict[Replica, str] | None = None, log_dir_throttle: int = -1) -> None:
    ongoing = r.ongoing()
    if not additional and ongoing:
        raise CliError(_CANNOT_EXECUTE)
    known = set(r.metadata().brokers)
    for b in sorted({b for reps in proposed.values() for b in reps}):
        if b not in known:
            raise CliError(f"Unknown broker id {b}")
    current = r.current_replicas({t for t, _ in proposed})
    missing = [tp for tp in sorted(proposed) if tp not in current]
    if missing:
        raise CliError(f"Unable to find partition: {_names(missing)}")
    click.echo("Current partition replica assignment\n")
    click.echo(reassignment_json({tp: current[tp] for tp in proposed}))
    click.echo("\nSave this to use as the --reassignment-json-file option during rollback")
    if throttle >= 0 or log_dir_throttle >= 0:
        click.echo(_VERIFY_PERIODICALLY)
    if throttle >= 0:
        _set_throttles(r, move_map(ongoing, proposed, current), throttle)
    if log_dir_throttle >= 0 and moves:
        _set_log_dir_throttle(r, moves, log_dir_throttle)
    results = r.alter(dict(proposed))
    errors = {tp: res for tp, res in results.items() if res[0] != ErrorCode.NONE}
    if errors:
        lines = [f"{_name(tp)}: {msg or error_name(code)}" for tp, (code, msg) in sorted(errors.items())]
        raise CliError("Error reassigning partition(s): " + "; ".join(lines))
    plural = "" if len(proposed) == 1 else "s"
    click.echo(f"Successfully started partition reassignment{plural} for {_names(proposed)}")
    if moves:
        _execute_moves(r, moves)


def _verify(r: _Reassigner, targets: dict[Partition, list[int]], preserve_throttles: bool = False,
            moves: dict[Replica, str] | None = None) -> bool:
    """Print each partition's status, and clear the throttles once none of them is in progress
    (unless ``preserve_throttles``); returns whether every reassignment is complete."""
    ongoing = r.ongoing(list(targets))
    current = r.current_replicas({t for t, _ in targets})
    click.echo("Status of partition reassignment:")
    done = True
    for tp in sorted(targets):
        if tp in ongoing:
            done = False
            click.echo(f"Reassignment of partition {_name(tp)} is still in progress.")
        elif current.get(tp) == targets[tp]:
            click.echo(f"Reassignment of partition {_name(tp)} is complete.")
        else:
            now = current.get(tp)
            shown = "(the partition does not exist)" if now is None else ",".join(map(str, now))
            click.echo(f"There is no active reassignment of partition {_name(tp)}, but replica set is {shown} "
                       f"rather than {','.join(map(str, targets[tp]))}.")
    moves_done = _verify_moves(r, moves) if moves else True
    if not any(tp in ongoing for tp in targets) and moves_done and not preserve_throttles:
        _clear_throttles(r, targets)
    return done and moves_done


def _cancel(r: _Reassigner, targets: dict[Partition, list[int]], preserve_throttles: bool = False) -> None:
    ongoing = r.ongoing(list(targets))
    active = sorted(tp for tp, (_reps, adding, removing) in ongoing.items() if adding or removing)
    if not active:
        click.echo("None of the specified partition reassignments are active.")
        if not preserve_throttles:
            _clear_throttles(r, targets)
        return
    results = r.alter(dict.fromkeys(active))
    errors = {tp: res for tp, res in results.items() if res[0] != ErrorCode.NONE}
    if errors:
        plural = "" if len(errors) == 1 else "s"
        lines = [f"{_name(tp)}: {msg or error_name(code)}" for tp, (code, msg) in sorted(errors.items())]
        raise CliError(f"Error cancelling partition reassignment{plural} for: " + "; ".join(lines))
    plural = "" if len(active) == 1 else "s"
    click.echo(f"Successfully cancelled partition reassignment{plural} for: {_names(active)}")
    if not preserve_throttles:
        _clear_throttles(r, targets)


def _generate(r: _Reassigner, topics: list[str], broker_list: str, rack_aware: bool) -> None:
    try:
        brokers = [int(b) for b in broker_list.split(",")]
    except ValueError as exc:
        raise CliError(f"Invalid --broker-list {broker_list!r}: expected comma-separated broker ids.") from exc
    repeated = sorted({b for b in brokers if brokers.count(b) > 1})
    if repeated:
        raise CliError(f"Broker list contains duplicate entries: {','.join(map(str, repeated))}")
    md = r.metadata()
    metas = [BrokerMetadata(b, getattr(md.brokers[b], "rack", None) if rack_aware else None)
             for b in brokers if b in md.brokers]
    unknown = [b for b in brokers if b not in md.brokers]
    if unknown:
        raise CliError(f"Unknown broker id {unknown[0]}")
    if rack_aware and any(m.rack is None for m in metas) and any(m.rack is not None for m in metas):
        raise CliError("Not all brokers have rack information. Add --disable-rack-aware in command line to make "
                       "replica assignment without rack information.")
    current = r.current_replicas(set(topics))
    absent = [t for t in topics if not any(tp[0] == t for tp in current)]
    if absent:
        raise CliError(f"Topic {absent[0]} not found")
    proposed: dict[Partition, list[int]] = {}
    for topic in topics:
        parts = {p: reps for (t, p), reps in current.items() if t == topic}
        try:
            assignment = assign_replicas_to_brokers(metas, len(parts), len(next(iter(parts.values()))))
        except AdminError as exc:
            raise CliError(str(exc)) from exc
        for p, reps in assignment.items():
            proposed[(topic, p)] = reps
    click.echo("Current partition replica assignment")
    click.echo(reassignment_json(current))
    click.echo("\nProposed partition reassignment configuration")
    click.echo(reassignment_json(proposed))


@click.command("reassign-partitions")
@bootstrap_option()
@click.option("--generate", is_flag=True, help="Propose an assignment of --topics-to-move-json-file's topics over "
                                                "--broker-list (printed, not executed).")
@click.option("--execute", is_flag=True, help="Start the reassignment in --reassignment-json-file.")
@click.option("--verify", is_flag=True, help="Report whether the reassignment in --reassignment-json-file is done.")
@click.option("--cancel", is_flag=True, help="Cancel the reassignments of --reassignment-json-file's partitions "
                                              "(back to their original replicas).")
@click.option("--list", "list_", is_flag=True, help="List the reassignments in progress.")
@click.option("--reassignment-json-file", "json_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help='{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2]}]}')
@click.option("--topics-to-move-json-file", "topics_file",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help='For --generate: {"version":1,"topics":[{"topic":"foo"}]}')
@click.option("--broker-list", metavar="IDS", help='For --generate: the brokers to assign to, e.g. "1,2,3".')
@click.option("--disable-rack-aware", is_flag=True, help="For --generate: ignore the brokers' racks.")
@click.option("--additional", is_flag=True, help="For --execute: start even though reassignments are in progress "
                                                 "(also: change the throttle of those in progress).")
@click.option("--throttle", type=int, default=-1, metavar="BYTES/S",
              help="For --execute: throttle the replication of the moving replicas to this rate (bytes/s, at least "
                   "1 KB/s is advised); --verify removes the throttle once the reassignment is done.")
@click.option("--replica-alter-log-dirs-throttle", "log_dir_throttle", type=int, default=-1, metavar="BYTES/S",
              help="For --execute: bound the copies of replicas moving between log directories of a broker to "
                   "this rate (replica.alter.log.dirs.io.max.bytes.per.second); --verify removes it once they are "
                   "done.")
@click.option("--preserve-throttles", is_flag=True, help="For --verify and --cancel: do not remove the throttles.")
@config_file_option("--command-config")
@timeout_option()
def reassign_partitions(bootstrap: str, generate: bool, execute: bool, verify: bool, cancel: bool, list_: bool,
                        json_file: Path | None, topics_file: Path | None, broker_list: str | None,
                        disable_rack_aware: bool, additional: bool, throttle: int, log_dir_throttle: int,
                        preserve_throttles: bool,
                        config_file: str | None, timeout_s: float) -> None:
    """Move partition replicas between brokers, like kafka-reassign-partitions.sh."""
    actions = {"--generate": generate, "--execute": execute, "--verify": verify, "--cancel": cancel,
               "--list": list_}
    if sum(actions.values()) != 1:
        raise click.UsageError("Command must include exactly one action: " + ", ".join(actions))
    action = next(a for a, on in actions.items() if on)
    if action in ("--execute", "--verify", "--cancel") and json_file is None:
        raise click.UsageError(f"Missing required argument \"[reassignment-json-file]\" for {action}")
    if action == "--generate" and (topics_file is None or broker_list is None):
        raise click.UsageError("--generate needs --topics-to-move-json-file and --broker-list")
    if action != "--generate" and (topics_file is not None or broker_list is not None or disable_rack_aware):
        raise click.UsageError(f"--topics-to-move-json-file, --broker-list and --disable-rack-aware can't be used "
                               f"with action \"{action}\"")
    if additional and action != "--execute":
        raise click.UsageError(f"Option \"--additional\" can't be used with action \"{action}\"")
    if throttle != -1 and action != "--execute":
        raise click.UsageError(f"Option \"--throttle\" can't be used with action \"{action}\"")
    if log_dir_throttle != -1 and action != "--execute":
        raise click.UsageError(f"Option \"--replica-alter-log-dirs-throttle\" can't be used with action \"{action}\"")
    if preserve_throttles and action not in ("--verify", "--cancel"):
        raise click.UsageError(f"Option \"--preserve-throttles\" can't be used with action \"{action}\"")
    r = _Reassigner(bootstrap, config_file, timeout_s)
    if action == "--list":
        _list(r)
    elif action == "--generate":
        assert topics_file is not None and broker_list is not None
        _generate(r, parse_topics_json(_read(topics_file), str(topics_file)), broker_list, not disable_rack_aware)
    else:
        assert json_file is not None
        targets, moves = parse_reassignment(_read(json_file), str(json_file))
        if action == "--execute":
            _execute(r, targets, additional, throttle, moves, log_dir_throttle)
        elif action == "--verify":
            _verify(r, targets, preserve_throttles, moves)
        else:
            _cancel(r, targets, preserve_throttles)
