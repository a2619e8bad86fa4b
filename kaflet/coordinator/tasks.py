"""The background tasks a coordinator owns (loads, writes, timers): kept referenced so they are
not collected mid-flight, logged when they fail, cancelled together at shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

log = logging.getLogger("kaflet.coordinator")


class BackgroundTasks:
    """A set of running tasks; ``owner`` names them in failure messages."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Awaitable[Any], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s task %s failed", self.owner, task.get_name(), exc_info=task.exception())

    def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    async def drain(self) -> None:
        """Wait until no task is left (tasks may start others)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
