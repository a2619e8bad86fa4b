"""`kaflet leader-election`: elect preferred or unclean leaders, like kafka-leader-election.sh.

Same flags, JSON file (``{"partitions": [{"topic": "t", "partition": 0}, ...]}``) and output
lines as Kafka's LeaderElectionCommand; the request is ElectLeaders (KIP-460), sent by
confluent-kafka's AdminClient.elect_leaders.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition

from kaflet.cli.common import (
    Admin,
    CliError,
    bootstrap_option,
    config_file_option,
    describe_kafka_error,
    timeout_option,
    unreachable_message,
)

_ELECTION_TYPES = {"preferred": ElectionType.PREFERRED, "unclean": ElectionType.UNCLEAN}


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"  # Kafka's TopicPartition.toString


def parse_election_json(text: str, source: str) -> list[TopicPartition]:
    """The partitions of a kafka-leader-election JSON file, with Kafka's checks (CliError)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CliError(f"Replica election data in {source} is not valid JSON: {exc}.") from exc
    if not isinstance(data, dict):
        raise CliError(f"Replica election data in {source} must be a JSON object with a \"partitions\" list.")
    if "partitions" not in data:
        raise CliError(f"Replica election data in {source} is missing \"partitions\" field.")
    entries = data["partitions"]
    if not isinstance(entries, list):
        raise CliError(f"\"partitions\" in {source} must be a list of {{\"topic\": ..., \"partition\": ...}}.")
    partitions: list[TopicPartition] = []
    for entry in entries:
        topic = entry.get("topic") if isinstance(entry, dict) else None
        partition = entry.get("partition") if isinstance(entry, dict) else None
        if not isinstance(topic, str) or not topic or isinstance(partition, bool) or not isinstance(partition, int):
            raise CliError(f"Invalid entry in {source}: {json.dumps(entry)} "
                           "(expected {\"topic\": string, \"partition\": int}).")
        if partition < 0:
            raise CliError(f"Invalid partition {partition} for topic {topic} in {source}.")
        partitions.append(TopicPartition(topic, partition))
    seen: set[tuple[str, int]] = set()
    duplicates = []
    for tp in partitions:
        key = (tp.topic, tp.partition)
        if key in seen:
            duplicates.append(_name(tp))
        seen.add(key)
    if duplicates:
        raise CliError(f"Replica election data contains duplicate partitions: {','.join(sorted(set(duplicates)))}")
    return partitions


@click.command("leader-election")
@bootstrap_option()
@click.option("--election-type", required=True, type=click.Choice(sorted(_ELECTION_TYPES), case_sensitive=False),
              help="preferred: elect the preferred replica where it is not the leader; "
                   "unclean: elect any live replica where there is no leader.")
@click.option("--all-topic-partitions", is_flag=True, help="Elect on every eligible partition of the cluster.")
@click.option("--topic", metavar="NAME", help="The topic of the one partition to elect (needs --partition).")
@click.option("--partition", type=click.IntRange(min=0), help="The partition to elect (needs --topic).")
@click.option("--path-to-json-file", "json_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help='Partitions to elect: {"partitions": [{"topic": "foo", "partition": 1}, ...]}.')
@config_file_option("--admin.config", "--command-config")
@timeout_option()
def leader_election(bootstrap: str, election_type: str, all_topic_partitions: bool, topic: str | None,
                    partition: int | None, json_file: Path | None, config_file: str | None,
                    timeout_s: float) -> None:
    """Elect partition leaders (preferred or unclean), like kafka-leader-election.sh."""
    chosen = sum((all_topic_partitions, topic is not None, json_file is not None))
    if chosen != 1:
        raise click.UsageError("One and only one of the following options is required: "
                               "--topic, --all-topic-partitions, --path-to-json-file")
    if topic is not None and partition is None:
        raise click.UsageError("Missing required option(s): --partition")
    if partition is not None and topic is None:
        raise click.UsageError("Option --partition is only allowed if --topic is used")
    partitions: list[TopicPartition] | None = None
    if json_file is not None:
        try:
            text = json_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"Cannot read {json_file}: {exc}.") from exc
        partitions = parse_election_json(text, str(json_file))
    elif topic is not None and partition is not None:
        partitions = [TopicPartition(topic, partition)]

    kind = _ELECTION_TYPES[election_type.lower()]
    label = kind.name  # PREFERRED or UNCLEAN, as Kafka prints ElectionType
    admin = Admin(bootstrap, config_file, timeout_s)
    results = _elect(admin, kind, partitions)

    succeeded: list[TopicPartition] = []
    noop: list[TopicPartition] = []
    failed: list[tuple[TopicPartition, Any]] = []
    for tp, error in results.items():
        if error is None:
            succeeded.append(tp)
        elif _code(error) == KafkaError.ELECTION_NOT_NEEDED:
            noop.append(tp)
        else:
            failed.append((tp, error))
    order = lambda tp: (tp.topic, tp.partition)  # noqa: E731
    if succeeded:
        names = ", ".join(_name(tp) for tp in sorted(succeeded, key=order))
        click.echo(f"Successfully completed leader election ({label}) for partitions {names}")
    if noop:
        names = ", ".join(_name(tp) for tp in sorted(noop, key=order))
        click.echo(f"Valid replica already elected for partitions {names}")
    if failed:
        for tp, error in sorted(failed, key=lambda f: order(f[0])):
            click.echo(f"Error completing leader election ({label}) for partition: {_name(tp)}: "
                       f"{describe_kafka_error(error, bootstrap=bootstrap, timeout_s=timeout_s)}")
        raise CliError(f"{len(failed)} replica(s) could not be elected")


def _code(error: Any) -> int | None:
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        return int(error.args[0].code())
    if isinstance(error, KafkaError):
        return int(error.code())
    return None


def _elect(admin: Admin, kind: ElectionType, partitions: list[TopicPartition] | None) -> dict[TopicPartition, Any]:
    admin.metadata()  # no broker answering is reported as such, before the request
    try:
        # No timeout kwargs: confluent-kafka 2.16's elect_leaders fails (SystemError) with any;
        # the request is bounded by socket.timeout.ms, which --timeout sets.
        future = admin.client.elect_leaders(kind, partitions)
    except (KafkaException, TypeError, ValueError) as exc:
        raise CliError(f"Leader election failed: {describe_kafka_error(exc)}") from exc
    try:
        result: dict[TopicPartition, Any] = future.result(timeout=admin.timeout_s + 5)
    except KafkaException as exc:
        code = _code(exc)
        if code in (KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION):
            name = exc.args[0].name()
            raise CliError(f"Leader election failed: the broker does not support ElectLeaders (KIP-460) ({name}).") \
                from exc
        if code == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            raise CliError("Not authorized to perform leader election") from exc
        if code in (KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT):
            raise CliError("Timeout waiting for election results") from exc
        raise admin.fail(exc, what="Leader election failed") from exc
    except TimeoutError as exc:
        raise CliError(unreachable_message(admin.bootstrap, admin.timeout_s)) from exc
    return result
