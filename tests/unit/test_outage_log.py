"""OutageLog: one warning when a target starts failing, a summary at most once per period while
it goes on, one line when it recovers; the attempts in between at DEBUG."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kaflet.util.outage_log import OutageLog, OutageLogs


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def at(self, level: int) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno == level]


@pytest.fixture
def lines() -> Lines:
    return Lines()


def _outage(lines: Lines, clock: Clock, name: str = "test.outage", every: float = 60.0) -> OutageLog:
    logger = logging.getLogger(name)
    logger.handlers[:] = [lines]
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return OutageLog(logger, "session report to the management service", summary_every_s=every, clock=clock)


def test_a_twenty_second_outage_at_a_three_second_interval_is_two_lines(lines: Lines) -> None:
    clock = Clock()
    outage = _outage(lines, clock)
    outage.succeeded()  # nothing to end
    for _ in range(7):
        outage.failed("POST http://127.0.0.1:1/x: connection refused", "kept for the next one")
        clock.now += 3
    assert outage.failing and outage.attempts == 7
    outage.succeeded()
    assert not outage.failing and outage.attempts == 0
    assert lines.at(logging.WARNING) == [
        "session report to the management service failed: POST http://127.0.0.1:1/x: connection refused; "
        "kept for the next one"]
    assert lines.at(logging.INFO) == ["session report to the management service recovered after 7 failed attempts "
                                      "in 21 s"]
    assert lines.at(logging.DEBUG)[0] == ("session report to the management service failed again (attempt 2): "
                                          "POST http://127.0.0.1:1/x: connection refused")
    assert len(lines.at(logging.DEBUG)) == 6


def test_a_long_outage_is_summed_up_once_per_period(lines: Lines) -> None:
    clock = Clock()
    outage = _outage(lines, clock, every=60)
    for i in range(41):  # 0 s .. 120 s, every 3 s
        outage.failed(f"error {i}")
        clock.now += 3
    warnings = lines.at(logging.WARNING)
    assert warnings == [
        "session report to the management service failed: error 0",
        "session report to the management service still failing: 20 attempts in the last 60 s (last error: error 20)",
        "session report to the management service still failing: 20 attempts in the last 60 s (last error: error 40)",
    ]
    outage.succeeded()
    assert lines.at(logging.INFO) == ["session report to the management service recovered after 41 failed attempts "
                                      "in 123 s"]


def test_a_second_outage_starts_over(lines: Lines) -> None:
    clock = Clock()
    outage = _outage(lines, clock)
    outage.failed("first")
    clock.now += 0.5
    outage.succeeded()
    clock.now += 100
    outage.failed("second")
    outage.succeeded()
    assert lines.at(logging.WARNING) == ["session report to the management service failed: first",
                                         "session report to the management service failed: second"]
    assert lines.at(logging.INFO) == [
        "session report to the management service recovered after 1 failed attempt in 0.5 s",
        "session report to the management service recovered after 1 failed attempt in 0.0 s"]


@given(gaps=st.lists(st.floats(min_value=0, max_value=200, allow_nan=False), min_size=1, max_size=200),
       every=st.floats(min_value=1, max_value=120))
def test_warnings_are_bounded_by_the_period_and_every_attempt_is_counted(gaps: list[float], every: float) -> None:
    lines, clock = Lines(), Clock()
    outage = _outage(lines, clock, name="test.outage.property", every=every)
    start = clock.now
    for gap in gaps:
        outage.failed("down")
        clock.now += gap
    last_failure = clock.now - gaps[-1]
    warnings = lines.at(logging.WARNING)
    # The first line, then at most one per period of the outage.
    assert 1 <= len(warnings) <= 1 + (last_failure - start) / every + 1e-9
    # Each attempt writes exactly one line, and a summary counts its own attempt and the DEBUG
    # lines since the previous warning.
    assert len(warnings) + len(lines.at(logging.DEBUG)) == len(gaps)
    quiet = 0
    for record in lines.records[1:]:
        if record.levelno == logging.DEBUG:
            quiet += 1
        else:
            assert f"still failing: {quiet + 1} attempt" in record.getMessage()
            quiet = 0
    outage.succeeded()
    [recovered] = lines.at(logging.INFO)
    assert recovered.startswith(f"session report to the management service recovered after {len(gaps)} failed "
                                f"attempt{'' if len(gaps) == 1 else 's'} in ")


def test_one_outage_log_per_broker(caplog: pytest.LogCaptureFixture) -> None:
    logs = OutageLogs(logging.getLogger("test.outages"), lambda b: f"talking to broker {b}")
    assert logs[2] is logs[2] and logs[2] is not logs[3]
    with caplog.at_level(logging.INFO, "test.outages"):
        logs[2].failed("refused")
        logs[3].succeeded()
        logs[2].succeeded()
    assert [r.getMessage().split(" after")[0] for r in caplog.records] == [
        "talking to broker 2 failed: refused", "talking to broker 2 recovered"]
