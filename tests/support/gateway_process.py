"""`kaflet gateway` as a child process on a free port, stopped (then killed) by its PID."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.processes import stop_child

_LISTENING = re.compile(r"listening on [^:\s]+:(\d+);")


class GatewayProcess:
    """One gateway process; ``args`` are the command's options, ``props`` its --config file."""

    def __init__(self, workdir: Path, args: list[str], props: dict[str, str] | None = None) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "gateway.log"
        self.args = list(args)
        if props:
            config = workdir / "gateway.properties"
            config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            self.args += ["--config", str(config)]
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def launch(self) -> GatewayProcess:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "kaflet.cli", "gateway", *self.args],
                                         stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
        return self

    def wait_ready(self, timeout: float = 30.0) -> GatewayProcess:
        """Wait until it listens; RuntimeError with its log when it exits first."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = _LISTENING.search(self.log())
            if m:
                self.port = int(m.group(1))
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"kaflet gateway exited: {self.log()[-2000:]}")
            time.sleep(0.05)
        raise RuntimeError(f"kaflet gateway did not start: {self.log()[-2000:]}")

    def wait_exit(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None:
            stop_child(self.proc)


@contextmanager
def running_gateway(workdir: Path, args: list[str], props: dict[str, str] | None = None) -> Iterator[GatewayProcess]:
    """A started gateway, stopped on exit."""
    gateway = GatewayProcess(workdir, args, props)
    try:
        yield gateway.launch().wait_ready()
    finally:
        gateway.stop()
