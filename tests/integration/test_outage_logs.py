"""Logs during an outage stay readable: a broker process whose management service is down, then
answers errors, then works again, logs one warning per thing it reaches (the session report and
each of the gateway's caches) and one recovery line each, however many attempts failed.

The broker is a real child process with its own log file; the service is the scripted
management service (real HTTP), first with its port closed (connection refused), then
answering HTTP 500, which lets the test count the attempts the broker made.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.broker_process import running_broker
from tests.support.management_service import HEARTBEAT, scripted_management_service

TARGETS = ("session report to the management service", "DataCache kafka_user",
           "DataCache kafka_authorizer", "DataCache kafka_partition")


def _wait(what: str, done: Callable[[], bool], log: Callable[[], str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; the broker's log:\n{log()}")
        time.sleep(0.1)


def _lines(log: str, level: str, target: str) -> list[str]:
    return [line for line in log.splitlines() if f" {level} " in line and target in line]


def _recovered_after(log: str, target: str) -> int:
    """The failed attempts the target's one recovery line counts."""
    [line] = [line for line in _lines(log, "INFO", target) if "recovered after" in line]
    found = re.search(r"recovered after (\d+) failed attempt", line)
    assert found is not None, line
    return int(found.group(1))


def test_an_outage_of_the_management_service_is_one_warning_and_one_recovery(tmp_path: Path) -> None:
    with scripted_management_service() as service:
        service.down()
        overrides = {"gateway.url": service.url, "cluster.id": "7", "session.report.ms": "100",
                     "gateway.sync.interval.ms": "200"}
        with running_broker(tmp_path / "data", overrides) as broker:
            log = broker.new_log
            _wait("the session report's first warning",
                  lambda: bool(_lines(log(), "WARNING", "session report to the management service failed")), log)
            # Up again but broken: every report is an attempt the service sees and refuses.
            service.set_mode("http-500")
            service.up()
            _wait("ten refused reports", lambda: len(service.recorded(HEARTBEAT)) >= 10, log)
            refused = len(service.recorded(HEARTBEAT))
            service.set_mode("ok")
            _wait("every target's recovery line",
                  lambda: all(any("recovered after" in line for line in _lines(log(), "INFO", t)) for t in TARGETS),
                  log)
            text = log()
    for target in TARGETS:
        assert len(_lines(text, "WARNING", target)) == 1, (target, text)
        assert _recovered_after(text, target) >= 2, text
    [warning] = _lines(text, "WARNING", "session report")
    assert "Cannot connect" in warning or "Connect call failed" in warning or "refused" in warning, warning
    assert "the connections are kept for the next report" in warning
    # The refused reports were all attempts of the one outage, as were those before the port opened.
    assert _recovered_after(text, TARGETS[0]) > refused
