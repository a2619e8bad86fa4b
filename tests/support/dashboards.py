"""The PromQL of the dashboards users point at kaflet, as test data.

``KAFKA_EXPORTER_OVERVIEW`` is what the Kafka Exporter Overview dashboard (grafana.com 7589,
published by kafka_exporter's author for its series) asks Prometheus: its three template
variables and the query of each of its five graph panels, written down from its published
description (the dashboard cannot be downloaded while the tests run, and is not copied here).
``kaflet_dashboard`` reads the repository's own dashboard, monitoring/grafana/kaflet.json.
``expand`` fills in the variables as Grafana does before it sends a query.
"""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: (variable, the label_values() query Grafana fills it from), in the order Grafana resolves them.
KAFKA_EXPORTER_OVERVIEW_VARIABLES = (
    ("job", "label_values(kafka_consumergroup_current_offset, job)"),
    ("instance", 'label_values(kafka_consumergroup_current_offset{job=~"$job"}, instance)'),
    ("topic", "label_values(kafka_topic_partition_current_offset{instance='$instance',"
              "topic!='__consumer_offsets',topic!='--kafka'}, topic)"),
)

#: (panel title, its query).
KAFKA_EXPORTER_OVERVIEW = (
    ("Message in per second",
     'sum(rate(kafka_topic_partition_current_offset{instance="$instance", topic=~"$topic"}[1m])) by (topic)'),
    ("Lag by Consumer Group",
     'sum(kafka_consumergroup_lag{instance="$instance",topic=~"$topic"}) by (consumergroup, topic)'),
    ("Message in per minute",
     "sum(delta(kafka_topic_partition_current_offset{instance=~'$instance', topic=~\"$topic\"}[5m])/5) by (topic)"),
    ("Message consume per minute",
     "sum(delta(kafka_consumergroup_current_offset{instance=~'$instance',topic=~\"$topic\"}[5m])/5) "
     "by (consumergroup, topic)"),
    ("Partitions per Topic",
     'sum by(topic) (kafka_topic_partitions{instance="$instance",topic=~"$topic"})'),
)


def kaflet_dashboard() -> list[tuple[str, str]]:
    """(panel title, query) of every query of monitoring/grafana/kaflet.json."""
    board = json.loads((REPO / "monitoring" / "grafana" / "kaflet.json").read_text())
    return [(panel["title"], target["expr"]) for panel in board["panels"] for target in panel.get("targets", [])]


def kaflet_dashboard_variables() -> list[tuple[str, str]]:
    """(variable, its label_values() query) of monitoring/grafana/kaflet.json."""
    board = json.loads((REPO / "monitoring" / "grafana" / "kaflet.json").read_text())
    return [(v["name"], v["definition"]) for v in board["templating"]["list"]]


def expand(expr: str, values: dict[str, str]) -> str:
    """`expr` with ``$name`` replaced by its value (longest names first, as none is a prefix)."""
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace(f"${name}", values[name])
    return expr
