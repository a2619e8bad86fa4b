"""kaflet: a Kafka-compatible streaming broker in Python."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["embedded", "embedded_async", "__version__"]


def __getattr__(name: str) -> Any:
    # Importing the broker is deferred so `import kaflet` stays cheap for CLI start-up.
    if name in ("embedded", "embedded_async"):
        from kaflet import embedded_broker as module

        return getattr(module, name)
    raise AttributeError(name)
