"""The log cleaner's worker process: the CPU-heavy part of each pass, off the broker's GIL.

A cleaning pass is mostly pure Python (decoding batches, the key -> offset map, rebuilding
batches); run on a thread of the broker it competes with the event loop for the GIL and a
produce stream's latency suffers.  So each cleaner thread (``cleaner_manager.LogCleaner``) owns
one long-lived worker process, started with ``subprocess`` (a fresh interpreter running this
module: nothing of the broker -- threads, sockets, locks -- is inherited, as with ``spawn``),
connected by a Unix socket pair:

* the thread sends ``("clean", CleanJob, n)`` and then the ``n`` open segment files as file
  descriptors (SCM_RIGHTS), so the worker reads exactly the files of the view's snapshot even
  if retention or truncation renames or deletes them meanwhile;
* the worker runs ``cleaner.run_pass`` and sends ``("group", CleanedGroup)`` for each group
  whose ``.cleaned`` files are complete, then waits for ``("ack", swapped)``: the swap itself
  (``Log.replace_with_cleaned``) stays on the event loop, driven by the thread;
* at the end it sends ``("done", end, stats)``, ``("aborted", reason)`` or
  ``("error", exception, traceback)``.

Robustness.  If the worker dies (killed, crashed), the thread sees end-of-file, logs one line,
removes the log's ``.cleaned`` files and abandons the pass (retried after
``log.cleaner.backoff.ms`` with a new worker).  On shutdown the thread kills a busy worker and
closes an idle one (it exits on end-of-file), each with a bounded wait.  If the broker itself
dies, the worker exits too: an idle worker reads end-of-file, a busy one notices its parent
changed (``os.getppid()``) within 256 KiB of work.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from kaflet.log.cleaner import (
    CleanedGroup,
    CleanerStats,
    CleaningAbortedError,
    CleanJob,
    Throttler,
    run_pass,
    swap_group,
)
from kaflet.log.segment import CLEANED_SUFFIX

if TYPE_CHECKING:
    from kaflet.log.log import CleanerView, Log

log = logging.getLogger(__name__)

_FDS_PER_MESSAGE = 200  # below the kernel's SCM_MAX_FD (253)
_POLL_S = 0.1
_EXIT_WAIT_S = 5.0
_NICE = 5
# ``-c`` rather than ``-m``: this module is already imported when the ``kaflet.log`` package is.
_WORKER_ENTRY = "import sys; from kaflet.log.cleaner_worker import main; main(sys.argv)"


class WorkerDiedError(CleaningAbortedError):
    """The worker process ended in the middle of a pass."""


def _send_fds(conn: Connection, fds: list[int]) -> None:
    sock = socket.socket(fileno=conn.fileno())
    try:
        for i in range(0, len(fds), _FDS_PER_MESSAGE):
            chunk = fds[i : i + _FDS_PER_MESSAGE]
            socket.send_fds(sock, [bytes([len(chunk)])], chunk)
    finally:
        sock.detach()  # the fd stays the Connection's


def _recv_fds(conn: Connection, n: int) -> list[int]:
    sock = socket.socket(fileno=conn.fileno())
    out: list[int] = []
    try:
        while len(out) < n:
            want = min(_FDS_PER_MESSAGE, n - len(out))
            msg, fds, _, _ = socket.recv_fds(sock, 1, want)
            if not msg:
                raise EOFError
            out.extend(fds)
    finally:
        sock.detach()
    if len(out) != n:
        for fd in out:
            os.close(fd)
        raise RuntimeError(f"expected {n} file descriptors, got {len(out)}")
    return out


# ---------------------------------------------------------------------- the worker process


def worker_main(conn: Connection, parent_pid: int) -> None:
    """Serve passes until the connection closes (the broker stopped or died)."""

    def parent_gone() -> bool:
        return os.getppid() != parent_pid

    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg[0] != "clean":
            continue
        job: CleanJob = msg[1]
        try:
            fds = _recv_fds(conn, msg[2])
        except (EOFError, OSError):
            return
        try:
            try:
                gen = run_pass(job, fds, Throttler(job.io_max_bytes_per_second), parent_gone)
                try:
                    group = next(gen)
                    while True:
                        conn.send(("group", group))
                        reply = conn.recv()  # EOFError if the broker died: the files go (finally)
                        group = gen.send(bool(reply[1]))
                except StopIteration as stop:
                    end, stats = stop.value
                finally:
                    gen.close()
            except CleaningAbortedError as exc:
                conn.send(("aborted", str(exc)))
            except (EOFError, BrokenPipeError, ConnectionResetError):
                return
            except Exception as exc:
                tb = traceback.format_exc()
                try:
                    conn.send(("error", exc, tb))
                except Exception:  # not picklable
                    conn.send(("error", RuntimeError(f"{type(exc).__name__}: {exc}"), tb))
            else:
                conn.send(("done", end, stats))
        except (EOFError, OSError):
            return
        finally:
            for fd in fds:
                os.close(fd)


def main(argv: list[str]) -> None:
    """Entry point of the worker process: ``argv`` = [_, connection fd, broker pid]."""
    # Ctrl-C in a terminal reaches the whole process group: the broker decides when we stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Background work: when the cores are busy, the broker's event loop goes first.
    with contextlib.suppress(OSError):
        os.nice(_NICE)
    fd, parent_pid = int(argv[1]), int(argv[2])
    worker_main(Connection(fd), parent_pid)


# ---------------------------------------------------------------------- the broker side


def _remove_cleaned(d: str) -> None:
    """Leftovers of a pass a dead worker left (only one pass at a time runs on a log)."""
    try:
        names = os.listdir(d)
    except OSError:
        return
    for n in names:
        if n.endswith(CLEANED_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(d, n))


class WorkerCleaner:
    """``Cleaner``'s interface (``clean``), with the pass run in a worker process.

    One per cleaner thread; the process is started on the first pass and reused.
    """

    def __init__(self, map_capacity: int, io_buffer_size: int = 524288,
                 io_max_bytes_per_second: float = float("inf"),
                 run_on_owner: Callable[[Callable[[], Any]], Any] | None = None,
                 stopping: Callable[[], bool] = lambda: False, *, backoff_ms: int = 15000) -> None:
        self.map_capacity = map_capacity
        self.io_buffer_size = io_buffer_size
        self.io_max_bytes_per_second = io_max_bytes_per_second
        self._run_on_owner: Callable[[Callable[[], Any]], Any] = run_on_owner or (lambda fn: fn())
        self._stopping = stopping
        self._backoff_ms = backoff_ms
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _start(self) -> tuple[subprocess.Popen[bytes], Connection]:
        if self._proc is not None and self._conn is not None and self._proc.poll() is None:
            return self._proc, self._conn
        self.close()
        ours, theirs = socket.socketpair()
        with ours, theirs:
            root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
            proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER_ENTRY, str(theirs.fileno()), str(os.getpid())],
                pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
            conn = Connection(ours.detach())
        self._proc, self._conn = proc, conn
        return proc, conn

    def close(self, timeout: float = _EXIT_WAIT_S) -> None:
        """Stop the worker: an idle one exits on end-of-file; it is killed if it does not."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            conn.close()
        if proc is not None:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
        self.close()

    def _recv(self, conn: Connection) -> Any:
        while not conn.poll(_POLL_S):
            if self._stopping():
                raise CleaningAbortedError("cleaner is shutting down")
        return conn.recv()

    def clean(self, lg: Log, view: CleanerView, first_dirty: int, first_uncleanable: int,
              now_ms: int) -> tuple[int, CleanerStats]:
        """One pass over ``lg`` (as ``Cleaner.clean``), computed by the worker process."""
        job = CleanJob.of(lg.dir, view, first_dirty, first_uncleanable, now_ms, self.map_capacity,
                          self.io_buffer_size, self.io_max_bytes_per_second)
        proc, conn = self._start()
        done = False
        try:
            conn.send(("clean", job, len(view.segments)))
            _send_fds(conn, [cs.handle.fileno() for cs in view.segments])
            while True:
                msg = self._recv(conn)
                if msg[0] == "group":
                    group: CleanedGroup = msg[1]
                    swapped = bool(self._run_on_owner(functools.partial(swap_group, lg, view, group)))
                    conn.send(("ack", swapped))
                elif msg[0] == "done":
                    done = True
                    return msg[1], msg[2]
                elif msg[0] == "aborted":
                    done = True
                    raise CleaningAbortedError(msg[1])
                else:  # "error": the pass failed in the worker
                    done = True
                    exc: BaseException = msg[1]
                    exc.add_note(f"in the log cleaner worker (pid {proc.pid}):\n{msg[2]}")
                    raise exc
        except (EOFError, OSError) as exc:
            time.sleep(0.05)  # let a dying worker be reaped, for its exit status
            log.warning("log cleaner worker (pid %d) died while cleaning %s (exit status %s, %s); pass "
                        "abandoned, retrying in %d ms", proc.pid, lg.dir, proc.poll(), type(exc).__name__,
                        self._backoff_ms)
            done = False
            raise WorkerDiedError(f"log cleaner worker died while cleaning {lg.dir}") from exc
        finally:
            if not done:
                # Shutdown, a dead worker or a failed swap in the middle of the pass: the
                # worker's state is unknown, so it goes, and with it the pass's .cleaned files.
                self._kill()
                _remove_cleaned(lg.dir)
