"""The files this test process holds open, for tests of descriptor use."""

from __future__ import annotations

import os


def open_paths(under: str) -> list[str]:
    """Paths under ``under`` this process holds open."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(under):
            out.append(target)
    return out


def exhaust_descriptors(pid: int, settle: float = 10.0) -> int:
    """Leave process ``pid`` no descriptor to open: once its open descriptors stay the same for
    half a second (a broker that just started still opens and closes some; at most ``settle``
    seconds), its soft RLIMIT_NOFILE becomes its lowest free descriptor number (the limit bounds
    the numbers, not the count, so a gap below the highest open one would leave room).
    Returns the hard limit, to restore with."""
    import resource
    import time

    _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    deadline = time.monotonic() + settle
    previous: dict[int, str] | None = None
    while True:
        current = {}
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                current[int(fd)] = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
        if current == previous or time.monotonic() > deadline:
            break
        previous = current
        time.sleep(0.5)
    lowest_free = next(n for n in range(len(current) + 1) if n not in current)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (lowest_free, hard))
    return hard
