"""The broker process pauses the garbage collector while it starts and always resumes it."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from kaflet.server import main as server_main


class _Broker:
    """Stands in for the Broker: records whether the collector ran during its start."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.collecting_during_start: bool | None = None
        self.stopped = False
        self.halted = asyncio.Event()
        self.halt_reason: str | None = None

    async def start(self) -> None:
        self.collecting_during_start = gc.isenabled()
        if self.fail:
            raise RuntimeError("cannot start")
        self.halt_reason = "every log directory has failed"
        self.halted.set()

    async def stop(self) -> None:
        self.stopped = True


@pytest.fixture(autouse=True)
def _restore_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
    gc.enable()


@pytest.mark.parametrize("fail", [False, True])
def test_the_collector_is_paused_while_the_broker_starts_and_runs_again_after(
        monkeypatch: pytest.MonkeyPatch, fail: bool) -> None:
    made: list[_Broker] = []

    def make(config: object) -> _Broker:
        made.append(_Broker(fail))
        return made[-1]

    monkeypatch.setattr(server_main, "Broker", make)
    assert gc.isenabled()
    if fail:
        with pytest.raises(RuntimeError):
            asyncio.run(server_main.serve(None))  # type: ignore[arg-type]
    else:
        assert asyncio.run(server_main.serve(None)) == 1  # type: ignore[arg-type]
    broker = made[0]
    assert broker.collecting_during_start is False
    assert broker.stopped
    assert gc.isenabled()
    if not fail:
        assert gc.get_freeze_count() > 0  # what start-up built is kept out of later collections
