"""A pseudo-terminal for CLI tests: the command sees a real tty on the fds given the slave."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import termios
import time

_ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\r")


class Terminal:
    """A pty of ``rows`` x ``cols``; ``slave`` goes to the child, the test reads ``master``."""

    def __init__(self, rows: int = 40, cols: int = 80) -> None:
        self.master, self.slave = pty.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.output = b""

    def read_until(self, *needles: bytes, timeout: float = 30.0) -> bytes:
        """Everything the child has drawn, once it holds every needle (AssertionError on timeout)."""
        deadline = time.monotonic() + timeout
        while not all(n in self.output for n in needles):
            left = deadline - time.monotonic()
            assert left > 0, f"no {needles} on the terminal within {timeout} s: {self.output[-2000:]!r}"
            self.drain(min(left, 0.5))
        return self.output

    def drain(self, timeout: float = 0.0) -> bytes:
        """Read what is there (waiting up to ``timeout`` for the first bytes)."""
        while select.select([self.master], [], [], timeout)[0]:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # the child closed its end and no process holds the slave
                break
            if not chunk:
                break
            self.output += chunk
            timeout = 0.05
        return self.output

    def close(self) -> None:
        for fd in (self.master, self.slave):
            try:
                os.close(fd)
            except OSError:
                pass


def plain_lines(output: bytes) -> list[str]:
    """The drawn text, split at line ends and at escape sequences (a redraw moves the cursor up
    and rewrites lines, so the text between two sequences is at most one screen line)."""
    return _ANSI.sub(b"\n", output).decode(errors="replace").split("\n")
