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
