"""Stopping a child process the tests started: by its PID, SIGTERM first, then SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_child(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``timeout`` s; nothing if it has exited."""
    if proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
