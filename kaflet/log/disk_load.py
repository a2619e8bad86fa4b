"""Disk load protection (Logi-Kafka's DiskLoadProtector): while the disk under a log dir is
overloaded, consumers that read cold data (not in the page cache) are throttled, so producers
and consumers at the tail keep their latency.

A consumer catching up on old segments makes the disk seek and read; with sendfile those reads
happen on the event loop itself, so everyone on the broker waits for them. Data that was just
written (or recently read) is in the page cache and costs no disk time, whatever its offset.
So the protector decides per read, from two measurements:

* how busy each device holding a log dir is: its utilisation (the share of time it had I/O in
  flight, /proc/diskstats' io_ticks) sampled every ``sample.interval.ms`` on a thread of its own;
* whether the bytes a consumer's fetch would send are in the page cache: ``mincore(2)`` over a
  throw-away mapping of that file range, asked only while the device is overloaded, so a fetch
  costs one attribute check when the disks are fine. The range asked about reaches two of the
  device's read-ahead windows past the read (up to the end of the file): a consumer reading
  old data sequentially finds what the kernel's read-ahead fetched for its previous read in the
  cache (or still on its way from the disk), so its own range alone would look hot after its
  first read. Data that is hot for other reasons (just written, read by others) has its
  continuation in the cache too, and the tail of a log has none. The cache is asked before the
  broker's read finds where the bytes start (its header scan, and the read-ahead that follows,
  would bring in a small log whole), and the answer is judged from where they start.

While a device is at or above ``util.threshold``, cold reads from it are admitted at a rate
that falls from ``cold.fetch.rate`` per second at the threshold to none at 100 %; a cold read
that is not admitted is left out of the fetch response (the partition answers with no records,
as Logi-Kafka's "evade") and the response carries a throttle time, as Kafka's quotas do, for
which the broker stops reading the connection. Followers are never throttled: replication must
keep up for the ISR. Where a log dir's device cannot be found (no block device, no
/proc/diskstats), the protector says so once and leaves its reads alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

log = logging.getLogger(__name__)

DISKSTATS_PATH = "/proc/diskstats"
SYS_DEV_BLOCK = "/sys/dev/block"

#: How often a device's overload or recovery is logged at most (it may flap from sample to sample).
_TRANSITION_LOG_S = 10.0
#: The kernel's default read-ahead window, for devices whose own cannot be read.
DEFAULT_READ_AHEAD = 128 * 1024
#: Pages of a longer range the cold-data check looks at, and what is longer (see in_page_cache).
_SAMPLES = 8
_WHOLE_RANGE = 1 << 20


@dataclass(frozen=True, slots=True)
class DiskLoadSettings:
    """The protector's settings (``diskloadprotector.*``)."""

    #: Utilisation (0..1) at or above which a device counts as overloaded.
    util_threshold: float = 0.9
    #: Cold consumer reads admitted per second per device at the threshold (none at 100 %).
    cold_fetch_rate: float = 10.0
    #: Throttle time handed to a consumer whose cold read was refused.
    throttle_ms: int = 500
    #: How often the devices' statistics are read.
    sample_interval_ms: int = 100

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> DiskLoadSettings:
        """From broker config values; the throttle is bounded like the quotas' (max.throttle.time.ms,
        else throttle.max.time.ms)."""
        bound = values["max.throttle.time.ms"]
        if bound is None:
            bound = values["throttle.max.time.ms"]
        return cls(util_threshold=values["diskloadprotector.util.threshold"],
                   cold_fetch_rate=values["diskloadprotector.cold.fetch.rate"],
                   throttle_ms=min(values["diskloadprotector.throttle.ms"], bound),
                   sample_interval_ms=values["diskloadprotector.sample.interval.ms"])


# ---------------------------------------------------------------------------- device statistics


class DeviceCounters(NamedTuple):
    """The /proc/diskstats counters the protector reads, for one device."""

    reads: int  # reads completed
    read_ms: int  # time spent reading (ms, summed over requests)
    io_ticks_ms: int  # time the device had I/O in flight (ms)


class DiskSample(NamedTuple):
    """A device's load over one sampling interval."""

    util: float  # share of the interval with I/O in flight, 0..1
    read_await_ms: float  # mean time of the reads completed in the interval (0: none)


def parse_diskstats(text: str) -> dict[str, DeviceCounters]:
    """Counters by device name from /proc/diskstats text (lines it cannot read are skipped)."""
    out: dict[str, DeviceCounters] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 13:
            continue
        try:
            out[parts[2]] = DeviceCounters(int(parts[3]), int(parts[6]), int(parts[12]))
        except ValueError:
            continue
    return out


def sample_between(before: DeviceCounters, after: DeviceCounters, elapsed_ms: float) -> DiskSample:
    """The load of a device between two readings ``elapsed_ms`` apart."""
    if elapsed_ms <= 0:
        return DiskSample(0.0, 0.0)
    busy = max(0, after.io_ticks_ms - before.io_ticks_ms)
    reads = after.reads - before.reads
    await_ms = (after.read_ms - before.read_ms) / reads if reads > 0 else 0.0
    return DiskSample(min(1.0, busy / elapsed_ms), max(0.0, await_ms))


def read_ahead_bytes(device: str, sys_block: str = "/sys/block") -> int:
    """The device's read-ahead window (queue/read_ahead_kb), or the kernel's default."""
    try:
        with open(os.path.join(sys_block, device, "queue", "read_ahead_kb")) as f:
            return int(f.read().strip()) * 1024
    except (OSError, ValueError):
        return DEFAULT_READ_AHEAD


def device_of(path: str, known: Iterable[str], sys_block: str = SYS_DEV_BLOCK) -> str | None:
    """The /proc/diskstats name of the disk holding ``path`` (the whole disk for a partition),
    or None when it is not on a block device diskstats knows (tmpfs, overlay, btrfs...)."""
    st_dev = os.stat(path).st_dev
    major, minor = os.major(st_dev), os.minor(st_dev)
    if major == 0:
        return None  # an anonymous device: no statistics of its own
    names = set(known)
    node = os.path.join(sys_block, f"{major}:{minor}")
    try:
        real = os.path.realpath(node)
        # A partition's sysfs directory sits inside its disk's, and utilisation is the disk's.
        name = os.path.basename(os.path.dirname(real)) if os.path.exists(os.path.join(real, "partition")) \
            else os.path.basename(real)
        if name in names:
            return name
        own = os.path.basename(real)
        if own in names:
            return own
    except OSError:
        pass
    return None


# ---------------------------------------------------------------------------- page cache


class _Libc:
    """mmap/mincore/munmap through ctypes (the mmap module gives no address for mincore)."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self.mmap = libc.mmap
        self.mmap.restype = ctypes.c_void_p
        self.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        self.munmap = libc.munmap
        self.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self.mincore = libc.mincore
        self.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        self._vec = ctypes.create_string_buffer(256)

    def vector(self, pages: int) -> ctypes.Array[ctypes.c_char]:
        """mincore's result vector, reused (the broker asks from its one event loop)."""
        if len(self._vec) < pages:
            self._vec = ctypes.create_string_buffer(pages)
        return self._vec


_libc: _Libc | None = None
_MAP_FAILED = ctypes.c_void_p(-1).value
_PAGE = mmap.PAGESIZE


def _lib() -> _Libc | None:
    global _libc
    if _libc is None:
        try:
            _libc = _Libc()
        except (OSError, AttributeError):
            return None
    return _libc


class Residency(NamedTuple):
    """Which pages of an open file were in the page cache when asked (see ``page_residency``)."""

    fd: int
    #: The first page of the range asked about, and one byte per page from there (low bit set:
    #: resident), when every page was looked at.
    first_page: int
    vector: bytes | None
    #: (page, resident) of the pages looked at, when the range was sampled.
    samples: tuple[tuple[int, bool], ...]

    def hot_from(self, position: int) -> bool | None:
        """Were all the pages looked at from ``position`` on resident? None when none of them
        lies there (the range asked about ended before it)."""
        page = position // _PAGE
        if self.vector is not None:
            rest = self.vector[max(0, page - self.first_page):]
            return (0 not in rest) if rest else None
        tail = [resident for p, resident in self.samples if p >= page]
        return all(tail) if tail else None


def page_residency(fd: int, position: int, size: int, samples: int = 0) -> Residency | None:
    """Which pages of ``size`` bytes at ``position`` of the open file are in the page cache;
    None when that cannot be told (no mincore, or the mapping failed).

    Every page is looked at, unless ``samples`` is given and the range is longer than 1 MiB: then
    that many pages spread evenly over it, and its last one (mincore's cost grows with the
    length it is asked about: a few µs a page asked singly against ~150 µs for 4 MiB at once,
    measured here; a range that went out of the cache went out in bulk). The mapping is never
    touched, so asking reads nothing from the disk. Linux answers for a file mapping from the
    page cache when the caller may write the file (the broker owns its segments).
    """
    first = position // _PAGE
    if size <= 0:
        return Residency(fd, first, b"", ())
    lib = _lib()
    if lib is None:
        return None
    start = first * _PAGE
    length = position + size - start
    addr = lib.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
    if addr is None or addr == _MAP_FAILED:
        return None
    try:
        pages = (length + _PAGE - 1) // _PAGE
        vec = lib.vector(pages)
        if not samples or length <= _WHOLE_RANGE:
            if lib.mincore(addr, length, vec) != 0:
                return None
            # The low bit of each byte says "resident"; the others are reserved and zero.
            return Residency(fd, first, ctypes.string_at(vec, pages), ())
        mincore = lib.mincore
        step = pages / samples
        found = []
        for page in sorted({*(int(i * step) for i in range(samples)), pages - 1}):
            if mincore(addr + page * _PAGE, _PAGE, vec) != 0:
                return None
            found.append((first + page, bool(vec[0][0] & 1)))
        return Residency(fd, first, None, tuple(found))
    finally:
        lib.munmap(addr, length)


def in_page_cache(fd: int, position: int, size: int, samples: int = 0) -> bool | None:
    """Whether the pages of ``size`` bytes at ``position`` of the open file are in the page
    cache now; None when that cannot be told (see ``page_residency``)."""
    found = page_residency(fd, position, size, samples)
    if found is None:
        return None
    hot = found.hot_from(position)
    return True if hot is None else hot


# ---------------------------------------------------------------------------- the decision


def cold_read_rate(util: float, settings: DiskLoadSettings) -> float | None:
    """Cold consumer reads per second a device at ``util`` admits; None: not overloaded, so
    reads are not even checked."""
    threshold = settings.util_threshold
    if util < threshold:
        return None
    if threshold >= 1.0:
        return 0.0
    headroom = (1.0 - util) / (1.0 - threshold)
    return settings.cold_fetch_rate * min(1.0, max(0.0, headroom))


class DiskState:
    """One device: its last sample, the cold-read rate it admits now, and its token bucket."""

    __slots__ = ("admitted", "device", "last_log", "lookahead", "rate", "read_await_ms", "refused", "stamp",
                 "tokens", "util")

    def __init__(self, device: str, read_ahead: int = DEFAULT_READ_AHEAD) -> None:
        self.device = device
        #: Bytes past a read that must be in the cache too for the read to count as hot.
        self.lookahead = 2 * read_ahead
        self.util = 0.0
        self.read_await_ms = 0.0
        self.rate: float | None = None  # None: not overloaded
        self.tokens = 0.0
        self.stamp = 0.0
        self.admitted = 0  # cold consumer reads let through while overloaded
        self.refused = 0  # cold consumer reads refused (throttled)
        self.last_log = float("-inf")

    @property
    def overloaded(self) -> bool:
        return self.rate is not None

    def refill(self, now: float) -> None:
        """Bring the token bucket up to ``now`` at the current rate (it holds one second's worth)."""
        rate = self.rate
        if rate is not None:
            self.tokens = min(max(1.0, rate), self.tokens + (now - self.stamp) * rate)
        self.stamp = now

    def take(self, now: float) -> bool:
        """Admit one cold read now?"""
        if self.rate is None:
            return True
        self.refill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            self.admitted += 1
            return True
        self.refused += 1
        return False


class ColdReads:
    """One consumer fetch's view of the protector: admits or refuses its cold reads."""

    __slots__ = ("_protector", "refused")

    def __init__(self, protector: DiskLoadProtector) -> None:
        self._protector = protector
        self.refused = 0

    def before_read(self, partition_dir: str, fd: int, position: int, size: int) -> Residency | None:
        """The page cache as it is before a read of about these bytes (DiskLoadProtector.snapshot)."""
        return self._protector.snapshot(partition_dir, fd, position, size)

    def admit(self, partition_dir: str, fd: int, position: int, size: int,
              before: Residency | None = None) -> bool:
        """May the fetch send these bytes of a partition's segment? False: leave them out."""
        if self._protector.admit(partition_dir, fd, position, size, before):
            return True
        self.refused += 1
        return False

    @property
    def throttle_ms(self) -> int:
        """The throttle time the response carries (0 if nothing was refused)."""
        return self._protector.settings.throttle_ms if self.refused else 0


class DiskLoadProtector:
    """Samples the log dirs' devices and decides which consumer reads of cold data wait.

    Lives on the broker's event loop: the sampler thread only reads /proc/diskstats and hands
    the samples over with ``call_soon_threadsafe``; ``observe`` (also what tests call with
    injected samples) and ``admit`` run on the loop.
    """

    def __init__(self, log_dirs: Iterable[str], settings: DiskLoadSettings,
                 diskstats_path: str = DISKSTATS_PATH, clock: Callable[[], float] = time.monotonic,
                 devices: Mapping[str, str | None] | None = None) -> None:
        """``devices`` maps log dirs to device names (tests); by default they are looked up."""
        self.settings = settings
        self._stats_path = diskstats_path
        self._clock = clock
        #: True while any device is overloaded: the one thing a fetch looks at otherwise.
        self.overloaded = False
        self.disks: dict[str, DiskState] = {}
        self._by_log_dir: dict[str, DiskState | None] = {}
        self.checks = 0  # page-cache checks made
        self.unknown = 0  # reads whose residency could not be told (admitted)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        if devices is None:
            devices = self._find_devices(log_dirs)
        for d, device in devices.items():
            state = None
            if device is not None:
                state = self.disks.get(device)
                if state is None:
                    state = self.disks[device] = DiskState(device, read_ahead_bytes(device))
            self._by_log_dir[os.path.abspath(d)] = state

    def _find_devices(self, log_dirs: Iterable[str]) -> dict[str, str | None]:
        try:
            with open(self._stats_path) as f:
                known = parse_diskstats(f.read())
        except OSError as exc:
            log.warning("disk load protection is off: cannot read %s (%s)", self._stats_path, exc)
            return dict.fromkeys(log_dirs)
        found: dict[str, str | None] = {}
        for d in log_dirs:
            try:
                found[d] = device_of(d, known)
            except OSError:
                found[d] = None
            if found[d] is None:
                log.warning("disk load protection is off for log dir %s: it is not on a block device "
                            "with statistics in %s", d, self._stats_path)
        return found

    # -- sampling ----------------------------------------------------------------------------

    def start(self, on_loop: Callable[[Callable[..., object], dict[str, DiskSample]], object]) -> None:
        """Start sampling; ``on_loop(fn, samples)`` must run ``fn(samples)`` on the broker's loop
        (``loop.call_soon_threadsafe``)."""
        if not self.disks or self._thread is not None:
            return
        log.info("disk load protection on for %s: cold consumer reads are limited while utilisation is "
                 "at least %.0f%%", ", ".join(sorted(self.disks)), self.settings.util_threshold * 100)
        self._thread = threading.Thread(target=self._sample_forever, args=(on_loop,),
                                        name="kaflet-disk-load", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5)

    def _read_counters(self) -> dict[str, DeviceCounters]:
        with open(self._stats_path) as f:
            stats = parse_diskstats(f.read())
        return {name: c for name, c in stats.items() if name in self.disks}

    def _sample_forever(self, on_loop: Callable[[Callable[..., object], dict[str, DiskSample]], object]) -> None:
        interval = self.settings.sample_interval_ms / 1000
        before: dict[str, DeviceCounters] | None = None
        then = 0.0
        failed = False
        while not self._stop.is_set():
            try:
                now, counters = time.monotonic(), self._read_counters()
            except OSError as exc:
                if not failed:
                    log.warning("disk load protection: cannot read %s (%s); retrying", self._stats_path, exc)
                failed, before = True, None
            else:
                failed = False
                if before is not None:
                    elapsed = (now - then) * 1000
                    samples = {name: sample_between(before[name], c, elapsed)
                               for name, c in counters.items() if name in before}
                    try:
                        on_loop(self.observe, samples)
                    except RuntimeError:
                        return  # the loop is closed: the broker is gone
                before, then = counters, now
            self._stop.wait(interval)

    def observe(self, samples: Mapping[str, DiskSample]) -> None:
        """Take in one sample per device (on the loop)."""
        now = self._clock()
        for name, sample in samples.items():
            state = self.disks.get(name)
            if state is None:
                continue
            state.util, state.read_await_ms = sample.util, sample.read_await_ms
            rate = cold_read_rate(sample.util, self.settings)
            if rate is not None and state.rate is None:
                # Tokens gather only while overloaded, starting from none.
                state.tokens, state.stamp = 0.0, now
                self._log_transition(state, now, "overloaded")
            elif rate is None and state.rate is not None:
                self._log_transition(state, now, "no longer overloaded")
            elif rate is not None:
                state.refill(now)  # what the old rate earned until now
            state.rate = rate
        self.overloaded = any(s.rate is not None for s in self.disks.values())

    def _log_transition(self, state: DiskState, now: float, what: str) -> None:
        if now - state.last_log < _TRANSITION_LOG_S:
            return
        state.last_log = now
        log.info("disk %s %s (utilisation %.0f%%, read latency %.1f ms); cold consumer reads admitted: %d, "
                 "throttled: %d so far", state.device, what, state.util * 100, state.read_await_ms,
                 state.admitted, state.refused)

    # -- the decision ------------------------------------------------------------------------

    def cold_reads(self) -> ColdReads | None:
        """The gate for one consumer fetch; None while no device is overloaded (nothing to check)."""
        return ColdReads(self) if self.overloaded else None

    def disk_of(self, partition_dir: str) -> DiskState | None:
        """The device state of a partition directory (the broker's are absolute paths)."""
        return self._by_log_dir.get(os.path.dirname(partition_dir))

    def _checked_range(self, state: DiskState, fd: int, position: int, size: int) -> int:
        """How many bytes from ``position`` the cold-data check looks at: the read and the
        read-ahead past it, up to the end of the file."""
        try:
            end = min(os.fstat(fd).st_size, position + size + state.lookahead)
        except OSError:
            end = position + size
        return max(size, end - position)

    def snapshot(self, partition_dir: str, fd: int, position: int, size: int) -> Residency | None:
        """Which pages about to be read are in the page cache, asked before the read: the read's
        own header scan, and the kernel's read-ahead after it, bring pages in, so a small cold
        log asked about after its read would look hot. None when the device is not overloaded
        (nothing will be checked) or the cache cannot be asked."""
        state = self.disk_of(partition_dir)
        if state is None or state.rate is None:
            return None
        return page_residency(fd, position, self._checked_range(state, fd, position, size), _SAMPLES)

    def admit(self, partition_dir: str, fd: int, position: int, size: int,
              before: Residency | None = None) -> bool:
        """May a consumer read these bytes of a segment of that partition now?

        Yes when the device is not overloaded or the bytes (and the read-ahead past them) are in
        the page cache (as ``before`` found them, if it covers them); otherwise as the device's
        token bucket allows.
        """
        state = self.disk_of(partition_dir)
        if state is None or state.rate is None:
            return True
        self.checks += 1
        cached = before.hot_from(position) if before is not None and before.fd == fd else None
        if cached is None:
            cached = in_page_cache(fd, position, self._checked_range(state, fd, position, size), _SAMPLES)
        if cached is None:
            self.unknown += 1
            return True
        return cached or state.take(self._clock())
