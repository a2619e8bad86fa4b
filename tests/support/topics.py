"""Topic set-up for tests, through the confluent-kafka admin client."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    """Create a topic and wait for the broker to confirm it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                            config=config or {})])
    futures[name].result(30)  # `admin` must stay alive until the future resolves
