"""One module per Kafka API. Each exposes API_KEY, MIN_VERSION, MAX_VERSION and `handle`.

`handle(ctx, body)` returns the response unencoded, or None when the request gets no response
(Produce with acks=0): a message of the generic codec (`codec.response_class(API_KEY)(...)`),
or on the hot paths an object of our own encoders with `encode(throttle_time_ms)` (Produce,
Fetch, ApiVersions). Handlers leave throttle_time_ms alone: the dispatcher encodes the response
once, with the throttle time the quotas gave the request (protocol/response.py). ApiVersions is
built from this registry, so what is advertised is exactly what has a handler.
"""

from __future__ import annotations

from types import ModuleType

from kaflet.server.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_client_quotas,
    alter_configs,
    alter_partition_reassignments,
    alter_replica_log_dirs,
    alter_user_scram_credentials,
    api_versions,
    consumer_group_describe,
    consumer_group_heartbeat,
    controlled_shutdown,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_topic_partitions,
    describe_transactions,
    describe_user_scram_credentials,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leader_and_isr,
    leave_group,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    stop_replica,
    sync_group,
    txn_offset_commit,
    update_metadata,
    write_txn_markers,
)

HANDLER_MODULES: list[ModuleType] = [
    produce,
    fetch,
    list_offsets,
    list_transactions,
    metadata,
    describe_topic_partitions,
    api_versions,
    create_topics,
    delete_topics,
    init_producer_id,
    create_partitions,
    describe_cluster,
    delete_records,
    describe_log_dirs,
    alter_replica_log_dirs,
    describe_configs,
    alter_configs,
    incremental_alter_configs,
    # consumer groups and committed offsets
    find_coordinator,
    join_group,
    sync_group,
    heartbeat,
    leave_group,
    describe_groups,
    list_groups,
    delete_groups,
    offset_commit,
    offset_fetch,
    offset_delete,
    # KIP-848's consumer groups
    consumer_group_heartbeat,
    consumer_group_describe,
    # authentication and SCRAM credentials
    sasl_handshake,
    sasl_authenticate,
    describe_user_scram_credentials,
    alter_user_scram_credentials,
    # ACLs (kaflet/security/authorizer.py)
    describe_acls,
    create_acls,
    delete_acls,
    # client quotas
    describe_client_quotas,
    alter_client_quotas,
    # replication: the controller's requests, and where a leader epoch ends
    leader_and_isr,
    stop_replica,
    update_metadata,
    offset_for_leader_epoch,
    controlled_shutdown,
    elect_leaders,
    # transactions: the coordinator's APIs, the markers it writes, what it and the logs know
    add_partitions_to_txn,
    add_offsets_to_txn,
    end_txn,
    txn_offset_commit,
    write_txn_markers,
    describe_producers,
    describe_transactions,
    list_transactions,
    alter_partition_reassignments,
    list_partition_reassignments,
]

HANDLERS: dict[int, ModuleType] = {m.API_KEY: m for m in HANDLER_MODULES}


def supported_versions() -> list[tuple[int, int, int]]:
    """(api_key, min_version, max_version) for every API with a handler, by key."""
    return sorted((m.API_KEY, m.MIN_VERSION, m.MAX_VERSION) for m in HANDLER_MODULES)
