"""The Logi-Kafka gateway inside the broker: users, topic permissions, disabled partitions,
quotas and connection reports driven by a management service (../docs/gateway.md)."""
