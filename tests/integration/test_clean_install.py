"""`pip install kaflet` without extras: the built wheel in a fresh virtualenv.

The suite's own environment has every extra installed, so an import of a test or manager
package from the broker or the client commands would pass everywhere else; here nothing but
the base dependencies is present. The wheel is built from a copy of the sources (a build in the
working tree would leave build/ and *.egg-info there), then installed with pip as a user would,
its dependencies resolved from the package index.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from kaflet.cli.main import kaflet
from tests.support.broker_process import running_broker
from tests.support.cli import assert_one_line_error, run

REPO = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT = 300  # pip may fetch the base dependencies from the package index


def succeed(args: list[str]) -> None:
    """Run a set-up step; a failure shows its output."""
    proc = subprocess.run(args, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
    assert proc.returncode == 0, f"{args}:\n{proc.stdout}{proc.stderr}"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh virtualenv (no system site-packages) with the kaflet wheel and no extras."""
    root = tmp_path_factory.mktemp("clean-install")
    source = root / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "kaflet", source / "kaflet", ignore=shutil.ignore_patterns("__pycache__"))
    wheels = root / "wheels"
    succeed([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(source)])
    venv = root / "venv"
    # Without pip of its own (ensurepip takes many seconds): the suite's pip installs into it.
    succeed([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    [wheel] = wheels.glob("kaflet-*.whl")
    succeed([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
             "--no-compile", str(wheel)])
    yield venv
    shutil.rmtree(root, ignore_errors=True)


def kaflet_in(venv: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The venv's `kaflet` console script."""
    return run(*args, stdin=stdin, cli=[str(venv / "bin" / "kaflet")])


def test_no_extra_is_installed(venv: Path) -> None:
    # Guards the other tests' meaning: the manager's packages must really be absent.
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", "import fastapi"], capture_output=True, text=True)
    assert proc.returncode != 0 and "No module named 'fastapi'" in proc.stderr, proc


def test_help_and_every_command_help(venv: Path) -> None:
    names = kaflet.list_commands(click.Context(kaflet))
    proc = kaflet_in(venv, "--help")
    assert proc.returncode == 0, proc
    for name in names:
        assert f"\n  {name} " in proc.stdout, proc.stdout
    for name in names:
        if name == "manager":
            continue
        proc = kaflet_in(venv, name, "--help")
        assert proc.returncode == 0, proc
        assert proc.stdout.startswith(f"Usage: kaflet {name} "), proc.stdout


@pytest.mark.parametrize("args", [[], ["--help"], ["--port", "0"]])
def test_manager_names_its_extra(venv: Path, args: list[str]) -> None:
    proc = kaflet_in(venv, "manager", *args)
    assert_one_line_error(proc, "pip install 'kaflet[manager]'")
    assert proc.returncode == 2


def test_broker_produce_consume(venv: Path, tmp_path: Path) -> None:
    with running_broker(tmp_path / "data", python=str(venv / "bin" / "python")) as broker:
        topic = f"clean-{uuid.uuid4().hex[:8]}"
        proc = kaflet_in(venv, "produce", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                         stdin="hello from a clean install\n")
        assert proc.returncode == 0, proc
        proc = kaflet_in(venv, "consume", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                         "--from-beginning", "--max-messages", "1")
        assert proc.returncode == 0, proc
        assert proc.stdout == "hello from a clean install\n"
