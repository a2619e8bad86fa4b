"""LoopSlice hands the event loop back only once its slice is used up."""

from __future__ import annotations

import asyncio

from kaflet.util.loop_slice import LoopSlice


async def _count_turns_of_other_task(slice_s: float, pauses: int) -> int:
    turns = 0
    stop = False

    async def other() -> None:
        nonlocal turns
        while not stop:
            turns += 1
            await asyncio.sleep(0)

    task = asyncio.ensure_future(other())
    await asyncio.sleep(0)  # let it start
    started = turns
    loop_slice = LoopSlice(slice_s)
    for _ in range(pauses):
        await loop_slice.pause()
    stop = True
    ran = turns - started
    await task
    return ran


async def test_a_pause_within_the_slice_keeps_the_loop() -> None:
    assert await _count_turns_of_other_task(3600.0, 1000) == 0


async def test_a_pause_after_the_slice_hands_the_loop_back_each_time() -> None:
    assert await _count_turns_of_other_task(0.0, 50) >= 50
