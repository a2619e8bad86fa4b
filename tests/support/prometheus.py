"""A real Prometheus (Debian's ``prometheus`` package) for tests, stopped by PID.

``PrometheusServer(work_dir, config_text).start()`` runs ``prometheus`` on a free 127.0.0.1 port
with its own TSDB directory; ``query`` evaluates PromQL at the current time through the HTTP API
and ``label_values`` answers as Grafana's ``label_values(selector, label)`` does. ``stop`` (also
on ``with`` exit) terminates the process by its PID, then kills it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from kaflet.metadata.zk_testing import free_ports

#: A Prometheus sample vector entry: {"metric": {labels}, "value": [time, "value"]}.
Series = dict[str, Any]


class PrometheusServer:
    """One Prometheus process scraping what ``config_text`` says."""

    def __init__(self, work_dir: Path, config_text: str) -> None:
        self.work_dir = Path(work_dir)
        self.config_text = config_text
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> PrometheusServer:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("prometheus is not installed (Debian: apt-get install prometheus; "
                               "scripts/system-packages --ensure installs it)")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config = self.work_dir / "prometheus.yml"
        config.write_text(self.config_text)
        [self.port] = free_ports(1)
        log = open(self.work_dir / "prometheus.log", "wb")  # noqa: SIM115 (the process writes it)
        try:
            self.proc = subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={self.work_dir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"prometheus did not become ready: {self.log_tail()}")
            time.sleep(0.2)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 20) -> str:
        path = self.work_dir / "prometheus.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def _get(self, path: str, params: list[tuple[str, str]]) -> Any:
        with urllib.request.urlopen(f"{self.url}{path}?{urllib.parse.urlencode(params)}", timeout=10) as resp:
            answer = json.load(resp)
        if answer.get("status") != "success":
            raise AssertionError(f"prometheus answered {answer}")
        return answer["data"]

    def query(self, expr: str) -> list[Series]:
        """The instant vector of `expr` now (a scalar comes back as one series without labels)."""
        data = self._get("/api/v1/query", [("query", expr)])
        if data["resultType"] == "vector":
            return list(data["result"])
        return [{"metric": {}, "value": data["result"]}]

    def label_values(self, selector: str, label: str) -> list[str]:
        """The values of `label` among the series `selector` matches (Grafana's label_values)."""
        found = self._get("/api/v1/series", [("match[]", selector), ("start", str(time.time() - 300))])
        return sorted({s[label] for s in found if label in s})

    def targets_up(self) -> dict[str, float]:
        """``up`` of every target, by instance."""
        return {s["metric"]["instance"]: float(s["value"][1]) for s in self.query("up")}

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def __enter__(self) -> PrometheusServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
