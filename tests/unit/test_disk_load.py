"""Disk load protection's parts: /proc/diskstats sampling, the page-cache probe, and the decision
with injected samples and a hand-moved clock."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from kaflet.log.disk_load import (
    DeviceCounters,
    DiskLoadProtector,
    DiskLoadSettings,
    DiskSample,
    cold_read_rate,
    device_of,
    in_page_cache,
    parse_diskstats,
    sample_between,
)

DISKSTATS = """\
   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
 254       0 vda 590152 55354 13081490 2903256 7971022 1038285 617744048 4708188 0 849588 7956957 1402686 603 501093904 186112 2432048 159399
   8       1 sda1 100 0 800 250 7 0 56 9 0 300 259
garbage line
   8       2 sda2 x y z 1 2 3 4 5 6 7 8
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def settings(**kw: float) -> DiskLoadSettings:
    base = {"util_threshold": 0.9, "cold_fetch_rate": 2.0, "throttle_ms": 300, "sample_interval_ms": 10}
    base.update(kw)
    return DiskLoadSettings(**base)  # type: ignore[arg-type]


def cold_file(path: Path, size: int = 1 << 20) -> int:
    """A file of ``size`` bytes dropped from the page cache; returns an open read descriptor."""
    path.write_bytes(os.urandom(size))
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)  # dirty pages cannot be dropped
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    return fd


def test_parse_diskstats_reads_reads_read_time_and_io_ticks() -> None:
    stats = parse_diskstats(DISKSTATS)
    assert stats["vda"] == DeviceCounters(590152, 2903256, 849588)
    assert stats["sda1"] == DeviceCounters(100, 250, 300)
    assert "sda2" not in stats and "garbage" not in stats


def test_sample_between_gives_utilisation_and_read_latency() -> None:
    before = DeviceCounters(reads=100, read_ms=1000, io_ticks_ms=5000)
    after = DeviceCounters(reads=150, read_ms=1500, io_ticks_ms=5080)
    assert sample_between(before, after, 100.0) == DiskSample(0.8, 10.0)
    # More busy time than elapsed (clock granularity) is 100 %; no reads: no latency.
    assert sample_between(before, before._replace(io_ticks_ms=5200), 100.0) == DiskSample(1.0, 0.0)
    assert sample_between(before, after, 0.0) == DiskSample(0.0, 0.0)


def test_cold_read_rate_falls_from_the_threshold_to_none_at_full_utilisation() -> None:
    s = settings(util_threshold=0.8, cold_fetch_rate=10.0)
    assert cold_read_rate(0.79, s) is None
    assert cold_read_rate(0.8, s) == pytest.approx(10.0)
    assert cold_read_rate(0.9, s) == pytest.approx(5.0)
    assert cold_read_rate(1.0, s) == 0.0
    # A threshold of 1: only a saturated disk is overloaded, and it admits nothing.
    assert cold_read_rate(0.99, settings(util_threshold=1.0)) is None
    assert cold_read_rate(1.0, settings(util_threshold=1.0)) == 0.0
    # A threshold of 0: always overloaded.
    assert cold_read_rate(0.0, settings(util_threshold=0.0, cold_fetch_rate=4.0)) == pytest.approx(4.0)


def test_settings_bound_the_throttle_like_the_quotas() -> None:
    values = {"diskloadprotector.util.threshold": 0.5, "diskloadprotector.cold.fetch.rate": 3.0,
              "diskloadprotector.throttle.ms": 5000, "diskloadprotector.sample.interval.ms": 50,
              "max.throttle.time.ms": None, "throttle.max.time.ms": 2000}
    assert DiskLoadSettings.from_config(values) == DiskLoadSettings(0.5, 3.0, 2000, 50)
    values["max.throttle.time.ms"] = 700
    assert DiskLoadSettings.from_config(values).throttle_ms == 700


def test_in_page_cache_tells_written_from_dropped_pages(tmp_path: Path) -> None:
    page = os.sysconf("SC_PAGE_SIZE")
    hot = tmp_path / "hot"
    hot.write_bytes(os.urandom(64 * page))
    fd = os.open(hot, os.O_RDONLY)
    try:
        assert in_page_cache(fd, 123, 10 * page) is True
    finally:
        os.close(fd)
    fd = cold_file(tmp_path / "cold", 64 * page)
    try:
        assert in_page_cache(fd, 0, 64 * page) is False
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no read-ahead around what we read
        os.pread(fd, 4 * page, 8 * page)  # reading brings those pages back
        assert in_page_cache(fd, 8 * page + 10, 2 * page) is True
        assert in_page_cache(fd, 0, 64 * page) is False  # the rest is still out
        assert in_page_cache(fd, 0, 0) is True
    finally:
        os.close(fd)


def test_nothing_is_checked_while_no_disk_is_overloaded(tmp_path: Path) -> None:
    p = DiskLoadProtector([str(tmp_path)], settings(), devices={str(tmp_path): "vdx"})
    assert p.cold_reads() is None
    p.observe({"vdx": DiskSample(0.5, 1.0)})
    assert p.cold_reads() is None and not p.disks["vdx"].overloaded


def test_overloaded_disk_refuses_cold_reads_beyond_its_rate_and_admits_hot_ones(tmp_path: Path) -> None:
    clock = Clock()
    log_dir = tmp_path / "logs"
    part = log_dir / "orders-0"
    part.mkdir(parents=True)
    p = DiskLoadProtector([str(log_dir)], settings(cold_fetch_rate=2.0), clock=clock,
                          devices={str(log_dir): "vdx"})
    p.observe({"vdx": DiskSample(0.9, 25.0)})  # at the threshold: 2 cold reads per second
    gate = p.cold_reads()
    assert gate is not None
    cold = cold_file(part / "00000000000000000000.log")
    hot_path = part / "00000000000000001000.log"
    hot_path.write_bytes(os.urandom(1 << 16))
    hot = os.open(hot_path, os.O_RDONLY)
    try:
        # The bucket starts empty when the disk becomes overloaded.
        assert not gate.admit(str(part), cold, 0, 1 << 16)
        assert gate.refused == 1 and gate.throttle_ms == 300
        # Data in the page cache is never refused, whatever the bucket holds.
        assert gate.admit(str(part), hot, 0, 1 << 16)
        clock.now += 0.5  # one token at 2/s
        assert gate.admit(str(part), cold, 0, 1 << 16)
        assert not gate.admit(str(part), cold, 1 << 16, 1 << 16)
        clock.now += 10  # the bucket holds one second's worth at most
        assert [gate.admit(str(part), cold, 0, 4096) for _ in range(3)] == [True, True, False]
        state = p.disks["vdx"]
        assert (state.admitted, state.refused) == (3, 3)
        # Busier: the rate falls, at 100 % nothing cold goes through.
        p.observe({"vdx": DiskSample(1.0, 80.0)})
        clock.now += 100
        assert not p.admit(str(part), cold, 0, 4096)
        # The disk recovers: nothing is checked any more, cold reads go through.
        p.observe({"vdx": DiskSample(0.2, 2.0)})
        assert p.cold_reads() is None and not p.overloaded
        assert p.admit(str(part), cold, 0, 4096)
    finally:
        os.close(cold)
        os.close(hot)


def test_a_gate_that_refused_nothing_asks_no_throttle(tmp_path: Path) -> None:
    p = DiskLoadProtector([str(tmp_path)], settings(util_threshold=0.0), devices={str(tmp_path): "vdx"})
    p.observe({"vdx": DiskSample(0.0, 0.0)})
    gate = p.cold_reads()
    assert gate is not None and gate.throttle_ms == 0


def test_log_dirs_without_a_device_are_left_alone(tmp_path: Path) -> None:
    clock = Clock()
    known, unknown = tmp_path / "a", tmp_path / "b"
    (known / "t-0").mkdir(parents=True)
    (unknown / "t-0").mkdir(parents=True)
    p = DiskLoadProtector([str(known), str(unknown)], settings(cold_fetch_rate=0.0), clock=clock,
                          devices={str(known): "vdx", str(unknown): None})
    p.observe({"vdx": DiskSample(0.95, 0.0), "other": DiskSample(1.0, 0.0)})
    fd = cold_file(tmp_path / "seg.log", 1 << 16)
    try:
        assert not p.admit(str(known / "t-0"), fd, 0, 4096)
        assert p.admit(str(unknown / "t-0"), fd, 0, 4096)
    finally:
        os.close(fd)


def test_device_of_finds_the_disk_of_a_partition_through_sysfs(tmp_path: Path) -> None:
    st = os.stat(tmp_path).st_dev
    major, minor = os.major(st), os.minor(st)
    sys_block = tmp_path / "sys" / "dev" / "block"
    sys_block.mkdir(parents=True)
    disk = tmp_path / "sys" / "devices" / "sdz"
    (disk / "sdz3").mkdir(parents=True)
    (disk / "sdz3" / "partition").write_text("3\n")
    (sys_block / f"{major}:{minor}").symlink_to(disk / "sdz3")
    found = device_of(str(tmp_path), ["sdz", "sdz3"], str(sys_block))
    # An anonymous device (tmpfs, overlay) has no statistics: None.
    assert found == (None if major == 0 else "sdz")
    assert device_of(str(tmp_path), ["other"], str(sys_block)) is None
    (sys_block / f"{major}:{minor}").unlink()
    (sys_block / f"{major}:{minor}").symlink_to(disk)
    assert device_of(str(tmp_path), ["sdz"], str(sys_block)) == (None if major == 0 else "sdz")


def test_the_sampler_thread_reads_diskstats_and_hands_over_samples(tmp_path: Path) -> None:
    stats = tmp_path / "diskstats"
    line = "   8  0 sdz {reads} 0 0 {read_ms} 0 0 0 0 0 {ticks} 0\n"
    stats.write_text(line.format(reads=10, read_ms=100, ticks=0))
    p = DiskLoadProtector([str(tmp_path)], settings(sample_interval_ms=20), diskstats_path=str(stats),
                          devices={str(tmp_path): "sdz"})
    got: list[dict[str, DiskSample]] = []
    saturated, sampled = threading.Event(), threading.Event()

    def on_loop(fn: object, samples: dict[str, DiskSample]) -> None:
        got.append(samples)
        sampled.set()
        if samples.get("sdz", DiskSample(0, 0)).util == 1.0:
            saturated.set()

    p.start(on_loop)
    try:
        assert sampled.wait(10)
        # A jump of io_ticks far beyond any interval: the disk was busy all the time.
        stats.write_text(line.format(reads=20, read_ms=600, ticks=10_000_000))
        assert saturated.wait(10)
    finally:
        p.stop()
    assert all(set(s) == {"sdz"} for s in got)
    busy = next(s["sdz"] for s in got if s["sdz"].util == 1.0)
    assert busy.read_await_ms == pytest.approx(50.0)


def test_a_read_in_the_read_ahead_shadow_of_cold_data_counts_as_cold(tmp_path: Path) -> None:
    """A sequential reader of old data finds its next bytes cached by the kernel's read-ahead; the
    check reaches two read-ahead windows (2 x 128 KiB for an unknown device) past the read."""
    page = os.sysconf("SC_PAGE_SIZE")
    lookahead = 256 * 1024
    log_dir = tmp_path / "logs"
    part = log_dir / "t-0"
    part.mkdir(parents=True)
    seg = part / "00000000000000000000.log"
    # Large enough that the halves are whole folios (the page cache may hold up to 2 MiB in one).
    size = 16 << 20
    seg.write_bytes(os.urandom(size))
    fd = os.open(seg, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, size // 2, 0, os.POSIX_FADV_DONTNEED)  # the second half is cold
        assert in_page_cache(fd, 0, size // 2) is True
        p = DiskLoadProtector([str(log_dir)], settings(util_threshold=0.0, cold_fetch_rate=0.0),
                              devices={str(log_dir): "vdx"})
        assert p.disks["vdx"].lookahead == lookahead
        p.observe({"vdx": DiskSample(0.5, 0.0)})
        # Far from the cold half: hot.
        assert p.admit(str(part), fd, 0, 4 * page)
        # Cached itself, but the cold half starts within the look-ahead: cold.
        assert not p.admit(str(part), fd, size // 2 - lookahead, 4 * page)
        # The look-ahead stops at the end of the file: the cached end of a file is hot.
        os.pread(fd, size // 2, size // 2)
        assert p.admit(str(part), fd, size - 4 * page, 4 * page)
    finally:
        os.close(fd)


def test_settings_are_validated() -> None:
    from kaflet.server.config import BrokerConfig, ConfigError

    cfg = BrokerConfig({"diskloadprotector.util.threshold": "0.75", "diskloadprotector.cold.fetch.rate": "2.5"})
    assert DiskLoadSettings.from_config(cfg.values) == DiskLoadSettings(0.75, 2.5, 500, 100)
    for key, value in (("diskloadprotector.util.threshold", "1.5"), ("diskloadprotector.util.threshold", "x"),
                       ("diskloadprotector.cold.fetch.rate", "-1"), ("diskloadprotector.throttle.ms", "-5"),
                       ("diskloadprotector.sample.interval.ms", "0")):
        with pytest.raises(ConfigError):
            BrokerConfig({key: value})


def test_in_page_cache_samples_long_ranges(tmp_path: Path) -> None:
    size = 16 << 20
    path = tmp_path / "seg"
    path.write_bytes(os.urandom(size))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert in_page_cache(fd, 100, size - 100, samples=16) is True
        os.fsync(fd)
        os.posix_fadvise(fd, size // 2, 0, os.POSIX_FADV_DONTNEED)
        assert in_page_cache(fd, 0, size // 2, samples=16) is True
        assert in_page_cache(fd, 0, size, samples=16) is False
        # Only the far end is out: the range's last page is always looked at.
        assert in_page_cache(fd, size // 2 - (4 << 20), (4 << 20) + 4096, samples=16) is False
    finally:
        os.close(fd)


def test_a_read_that_fills_the_cache_is_judged_by_the_cache_before_it(tmp_path: Path) -> None:
    """The fetch asks before its read (whose header scan and read-ahead bring the pages in) and
    judges the bytes it then sends by that answer, from where they start."""
    page = os.sysconf("SC_PAGE_SIZE")
    log_dir = tmp_path / "logs"
    part = log_dir / "orders-0"
    part.mkdir(parents=True)
    p = DiskLoadProtector([str(log_dir)], settings(cold_fetch_rate=0.0), clock=Clock(),
                          devices={str(log_dir): "vdx"})
    p.observe({"vdx": DiskSample(0.95, 25.0)})
    gate = p.cold_reads()
    assert gate is not None
    fd = cold_file(part / "00000000000000000000.log", 32 * page)
    try:
        # The first 4 pages were read before (old data); the rest is cold.
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        os.pread(fd, 4 * page, 0)
        before = gate.before_read(str(part), fd, 0, 32 * page)
        assert before is not None
        os.pread(fd, 32 * page, 0)  # the read itself
        assert gate.admit(str(part), fd, 0, 32 * page)  # asked now, everything looks hot
        assert not gate.admit(str(part), fd, 8 * page, 24 * page, before)
        # The bytes sent start in the part that was resident before the read.
        assert gate.admit(str(part), fd, 0, 2 * page, before) is False  # the look-ahead reaches cold pages
        assert before.hot_from(0) is False and before.hot_from(40 * page) is None
        # Another file than the one asked about before: asked afresh.
        other = os.open(part / "00000000000000000000.log", os.O_RDONLY)
        try:
            assert gate.admit(str(part), other, 8 * page, 24 * page, before)
        finally:
            os.close(other)
        assert gate.refused == 2
    finally:
        os.close(fd)
    # Nothing to ask while the device is fine.
    p.observe({"vdx": DiskSample(0.1, 1.0)})
    assert p.snapshot(str(part), 0, 0, page) is None
