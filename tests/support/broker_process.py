"""A kaflet broker as a real child process, for integration and fault tests.

:class:`BrokerProcess` lives in the package (``kaflet dev-cluster`` runs brokers the same way);
this module adds the context manager the tests use.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

from kaflet.cli.broker_process import BrokerProcess

__all__ = ["BrokerProcess", "running_broker"]


@contextlib.contextmanager
def running_broker(data_dir: Path, overrides: dict[str, str] | None = None, *,
                   python: str = sys.executable) -> Iterator[BrokerProcess]:
    """A started broker that is stopped (then killed if it hangs, by PID) on exit.

    ``python`` runs it: another environment's interpreter runs that environment's kaflet.
    """
    broker = BrokerProcess(data_dir, overrides, python=python)
    broker.start()
    try:
        yield broker
    finally:
        try:
            broker.stop(timeout=20)
        finally:
            broker.kill()
