"""Every topic config value the config layer accepts, the log layer takes too.

The two validate separately (server/topic_config.py with Kafka's rules and messages, for the
request; log/config.py for the LogConfig the logs are built with); a value the first stores and
the second refuses leaves the topic's later changes off its logs and the broker unable to open
them at its next start, as an empty ``cleanup.policy`` once did.
"""

from __future__ import annotations

import pytest

from kaflet.log.config import LogConfig
from kaflet.server.kafka_configs import _RANGE_RE, VERSIONS
from kaflet.server.topic_config import TOPIC_CONFIGS, validate_topic_config

_LONG_MAX = str(2**63 - 1)


def _edge_values(kind: str, validator: str) -> list[str]:
    """The values at the edges of what the key's validator allows."""
    m = _RANGE_RE.match(validator)
    if m is not None:
        low, high, also = m.groups()
        values = [low, high or (_LONG_MAX if kind == "long" else str(2**31 - 1) if kind == "int" else "1e300")]
        return values + ([also] if also is not None else [])
    if validator == VERSIONS:
        return ["0.10.0", "2.8", "3.0-IV1"]
    if kind == "boolean":
        return ["true", "false", "TRUE"]
    if validator.startswith("[") and validator.endswith("]") and "partitionId" not in validator:
        choices = validator[1:-1].split(", ")
        return choices + ([",".join(choices), ""] if kind == "list" else [])
    if "partitionId" in validator:
        return ["", "*", "0:1,1:2"]
    if kind == "long":
        return ["-1", "0", _LONG_MAX]
    return []


CASES = [(name, value) for name, d in sorted(TOPIC_CONFIGS.items())
         for value in _edge_values(d.kind, d.key.validator)]


def test_every_key_has_edges() -> None:
    covered = {name for name, _ in CASES}
    assert covered == set(TOPIC_CONFIGS), set(TOPIC_CONFIGS) - covered


@pytest.mark.parametrize(("name", "value"), CASES)
def test_an_accepted_value_builds_a_log_config(name: str, value: str) -> None:
    normalised = validate_topic_config(name, value)
    LogConfig.from_props({name: normalised})
