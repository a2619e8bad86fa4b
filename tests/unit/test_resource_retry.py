"""ResourceRetry: one attempt at a time, only once the resource is back, waits that grow."""

from __future__ import annotations

import asyncio
import os
import resource

from kaflet.server.resource_retry import ResourceRetry, descriptors_available


async def test_asks_once_the_resource_is_back_and_waits_longer_each_time() -> None:
    asked: list[float] = []
    checks: list[bool] = [False, False, True]
    loop = asyncio.get_running_loop()

    async def ask() -> None:
        asked.append(loop.time())

    retry = ResourceRetry(ask, available=lambda: checks.pop(0), first_delay_s=0.01, max_delay_s=0.04)
    start = loop.time()
    retry.refused(3)
    retry.refused(1)  # while one attempt waits, no second one starts
    for _ in range(200):
        if asked:
            break
        await asyncio.sleep(0.01)
    assert len(asked) == 1 and not checks
    # Three waits: 0.01, 0.02, then 0.04 (capped), the resource back at the third check.
    assert asked[0] - start >= 0.07
    await asyncio.sleep(0.1)
    assert len(asked) == 1
    retry.refused(1)  # refused again: the next wait starts at the cap
    await asyncio.sleep(0.02)
    assert len(asked) == 1
    checks.append(True)
    for _ in range(200):
        if len(asked) == 2:
            break
        await asyncio.sleep(0.01)
    assert len(asked) == 2 and asked[1] - asked[0] >= 0.04
    await retry.stop()


async def test_stop_cancels_a_waiting_attempt() -> None:
    asked: list[int] = []

    async def ask() -> None:
        asked.append(1)

    retry = ResourceRetry(ask, available=lambda: True, first_delay_s=10)
    retry.refused(1)
    await retry.stop()
    assert not asked


def test_descriptors_available_follows_the_open_file_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 2, hard))
        assert not descriptors_available(8)
        assert descriptors_available(1)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert descriptors_available(8)

