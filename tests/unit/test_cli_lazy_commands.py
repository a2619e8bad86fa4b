"""The lazily imported `kaflet` subcommands: listed without being imported, each as it describes itself."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from kaflet.cli.main import _LAZY_COMMANDS


@pytest.mark.parametrize("name", sorted(_LAZY_COMMANDS))
def test_summary_is_the_commands_own(name: str) -> None:
    spec = _LAZY_COMMANDS[name]
    command = getattr(importlib.import_module(spec.module), spec.attr)
    assert command.name == name
    assert command.get_short_help_str(limit=1000) == spec.summary


def test_help_imports_no_lazy_command() -> None:
    code = (
        "import sys\n"
        "from kaflet.cli.main import kaflet\n"
        "try:\n"
        "    kaflet.main(['--help'], prog_name='kaflet')\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    *help_lines, modules = proc.stdout.splitlines()
    for name in _LAZY_COMMANDS:
        assert any(line.startswith(f"  {name} ") for line in help_lines), proc.stdout
    loaded = set(modules.split())
    assert not {spec.module for spec in _LAZY_COMMANDS.values()} & loaded
    assert "kaflet.server" not in loaded
