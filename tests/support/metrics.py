"""Reading a broker's Prometheus endpoint (metrics.listener) in tests."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from kaflet.server.broker import Broker

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(broker: Broker | int) -> Samples:
    """Every sample of /metrics of an in-process broker, or on a port of 127.0.0.1, by (name, labels)."""
    if isinstance(broker, int):
        port = broker
    else:
        assert broker.metrics_exporter is not None
        port = broker.metrics_exporter.port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}
