"""Long background work on the event loop, handed back to it in short slices.

A scrape of a large broker reads and writes ~100,000 rows on the loop. Handing the loop back
every N rows makes steps as long as N rows happen to take, which on a loaded two-core machine
was 3-9 ms at N = 200, while a produce request waits behind each step. Checking the clock every
few rows and handing back only after `SCRAPE_SLICE_S` makes the steps the same length whatever
the machine's speed, and costs a clock read (~50 ns) per check.
"""

from __future__ import annotations

import asyncio
import time

#: Longest a scrape runs on the loop before it lets the requests waiting meanwhile be served.
#: Shorter than a connection's slice (network/connection.py): a scrape is nobody's request.
SCRAPE_SLICE_S = 0.001


class LoopSlice:
    """Call `pause` often (every few rows); it hands the loop back once ``slice_s`` has passed
    since the last time it did."""

    __slots__ = ("slice_s", "_began")

    def __init__(self, slice_s: float = SCRAPE_SLICE_S) -> None:
        self.slice_s = slice_s
        self._began = time.perf_counter()

    async def pause(self) -> None:
        """Hand the loop back if this slice is used up; otherwise return at once."""
        if time.perf_counter() - self._began >= self.slice_s:
            await asyncio.sleep(0)
            self._began = time.perf_counter()
