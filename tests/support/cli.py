"""Running the `kaflet` command line as a subprocess, and its output contracts."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
from collections.abc import Sequence

CLI = [sys.executable, "-m", "kaflet.cli"]


def run(*args: str, stdin: str | bytes | None = None, timeout: float = 60,
        cli: Sequence[str] = CLI) -> subprocess.CompletedProcess[str]:
    """Run the CLI (``cli``: another installation's); returns the finished process with text stdout/stderr."""
    data = stdin.encode() if isinstance(stdin, str) else stdin
    proc = subprocess.run([*cli, *args], input=data, capture_output=True, timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """Failure contract: non-zero exit, exactly one stderr line `Error: ...`, no traceback."""
    assert proc.returncode != 0, proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("Error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment.lower() in lines[0].lower(), lines[0]


def assert_usage_error(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 2, proc
    assert "Usage:" in proc.stderr
    assert "Traceback" not in proc.stderr


def _ephemeral_ports() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port_range(n: int) -> int:
    """A base port with ``n`` consecutive free ports on 127.0.0.1, below the kernel's ephemeral
    range: a process that binds them later (a gateway binds a broker's port on first use) would
    otherwise race other tests' outgoing connections, which take ephemeral ports."""
    low, _ = _ephemeral_ports()
    for _ in range(50):
        base = random.randrange(10240, max(10241, low - n))
        try:
            socks = []
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range")
