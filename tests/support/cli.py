"""Running the `kaflet` command line as a subprocess, and its output contracts."""

from __future__ import annotations

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


def free_port_range(n: int) -> int:
    """A base port with ``n`` consecutive free ports on 127.0.0.1."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
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
