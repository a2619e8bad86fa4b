"""The settings the controller honours, with Kafka's names and defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ControllerConfig", "parse_config_bool"]


@dataclass(slots=True)
class ControllerConfig:
    """Controller settings (Kafka broker configs unless noted).

    ``unclean_leader_election_enable`` may be changed at run time (a dynamic broker config);
    call :meth:`KafkaController.enable_unclean_leader_election` after turning it on so that
    offline partitions are retried, as Kafka does.
    """

    #: inter.broker.listener.name (resolved by the broker): LeaderAndIsr's live leaders use it.
    inter_broker_listener_name: str = "PLAINTEXT"
    #: controller.socket.timeout.ms: handed to the channel factory (request timeout).
    controller_socket_timeout_ms: int = 30000
    #: auto.leader.rebalance.enable
    auto_leader_rebalance_enable: bool = True
    #: leader.imbalance.check.interval.seconds
    leader_imbalance_check_interval_seconds: float = 300.0
    #: leader.imbalance.per.broker.percentage
    leader_imbalance_per_broker_percentage: int = 10
    #: unclean.leader.election.enable (the broker default; topics may override it)
    unclean_leader_election_enable: bool = False
    #: delete.topic.enable
    delete_topic_enable: bool = True
    #: Logi-Kafka: how long a broker that is not a preferred candidate waits before competing
    #: for the controllership while a candidate is alive (3 s there; not a Kafka config key).
    candidate_wait_seconds: float = 3.0
    #: Delay of the first auto leader rebalance after becoming controller (Kafka: fixed 5 s).
    auto_leader_rebalance_initial_delay_seconds: float = 5.0

    @classmethod
    def from_broker_config(cls, config: Mapping[str, Any], inter_broker_listener_name: str) -> ControllerConfig:
        """Take the controller's settings from a broker config mapping (Kafka's key names);
        missing keys keep Kafka's defaults."""
        d = cls(inter_broker_listener_name=inter_broker_listener_name)

        def get(key: str, default: Any) -> Any:
            try:
                value = config[key]
            except KeyError:
                return default
            return default if value is None else value

        d.controller_socket_timeout_ms = int(get("controller.socket.timeout.ms", d.controller_socket_timeout_ms))
        d.auto_leader_rebalance_enable = parse_config_bool(get("auto.leader.rebalance.enable", d.auto_leader_rebalance_enable))
        d.leader_imbalance_check_interval_seconds = float(
            get("leader.imbalance.check.interval.seconds", d.leader_imbalance_check_interval_seconds))
        d.leader_imbalance_per_broker_percentage = int(
            get("leader.imbalance.per.broker.percentage", d.leader_imbalance_per_broker_percentage))
        d.unclean_leader_election_enable = parse_config_bool(
            get("unclean.leader.election.enable", d.unclean_leader_election_enable))
        d.delete_topic_enable = parse_config_bool(get("delete.topic.enable", d.delete_topic_enable))
        return d


def parse_config_bool(value: Any) -> bool:
    """Kafka's BOOLEAN config parsing: true/false in any case, surrounding spaces allowed."""
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise ValueError(f"Expected value to be either true or false, got {value!r}")
