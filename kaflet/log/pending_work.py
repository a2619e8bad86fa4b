"""``PendingWork``: the logs the log manager's periodic jobs have something to do for.

The background loop wakes every second (``flush.ms`` checks) and unlinks ``.deleted`` files
when their ``file.delete.delay.ms`` has passed.  Asking every log each time costs a broker with
20,000 idle partitions a tenth of a core for nothing, so each log registers itself here when it
gets such work, and the loop visits only the logs registered:

- ``timed_flush``: logs that may have data older than a finite ``flush.ms`` to flush (an
  append, a config change or a recovery left unflushed data while ``flush.ms`` is finite);
- ``file_deletes``: logs with ``.deleted`` files waiting for their delay.

The loop drops a log once it has nothing left (flushed, or no file left to unlink) or is closed;
a log that gets work again registers again.  Only the loop thread touches the sets.
"""

from __future__ import annotations

from typing import Generic, TypeVar

L = TypeVar("L")


class PendingWork(Generic[L]):
    """The logs with a timed flush or ``.deleted`` files pending (see the module docstring)."""

    def __init__(self) -> None:
        self.timed_flush: set[L] = set()
        self.file_deletes: set[L] = set()
