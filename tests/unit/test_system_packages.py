"""scripts/system-packages: what `make test` checks (and installs as root) before the suite runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "system-packages"


def run(*args: str, path: str) -> subprocess.CompletedProcess[str]:
    # bash by its absolute path: the PATH given is what the script searches for the tools.
    return subprocess.run(["/bin/bash", str(SCRIPT), *args], env={"PATH": path}, capture_output=True,
                          text=True, timeout=30)


def test_nothing_is_missing_where_the_suite_runs() -> None:
    proc = run("--check", path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_missing_tools_are_named_in_one_line(tmp_path: Path) -> None:
    # No command on the PATH: every tool found by command is missing (the others are files).
    for mode in ("--check", "--ensure"):  # --ensure cannot install without apt-get: it says so too
        proc = run(mode, path=str(tmp_path))
        assert proc.returncode == 1 and proc.stdout == ""
        [line] = proc.stderr.splitlines()
        wanted = "kcat default-jdk-headless iptables e2fsprogs prometheus nodejs npm"
        assert f"which are missing: {wanted} (as root: apt-get install {wanted})" in line, line


def test_a_bad_argument_gets_the_usage() -> None:
    proc = run("--install", path="/usr/bin:/bin")
    assert proc.returncode == 2 and proc.stderr.startswith("usage: scripts/system-packages")
