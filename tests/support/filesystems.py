"""Real file systems for disk-failure tests: a size-limited tmpfs (fills up: ENOSPC) and a
loop-mounted ext4 image mounted ``errors=remount-ro`` that the kernel can be told to fail (it
then turns read-only under the open files: EROFS on every write).

Both need root (CI runs as root). Every mount point is named ``kaflet-fs-<pid>-<n>`` after the
test process, so a run that was killed before it unmounted is cleaned up by the next one
(:func:`unmount_stale`), and each context manager unmounts (lazily, so open files cannot block
it) whatever happens in the test.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MOUNT_PREFIX = "kaflet-fs-"
_counter = itertools.count(1)


def mounts_unavailable_reason() -> str | None:
    """Why this process cannot mount file systems (None when it can)."""
    if os.geteuid() != 0:
        return "mounting test file systems needs root (CI runs as root)"
    for tool in ("mount", "umount", "mkfs.ext4"):
        if not any(os.access(os.path.join(d, tool), os.X_OK) for d in os.environ.get("PATH", "").split(":") + ["/usr/sbin", "/sbin"]):
            return f"{tool} is not installed"
    return None


def _mount_point(parent: Path) -> Path:
    point = parent / f"{MOUNT_PREFIX}{os.getpid()}-{next(_counter)}"
    point.mkdir(parents=True)
    return point


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=60)


def _loop_devices(image: Path) -> str:
    """``losetup -j``'s lines for the loop devices backed by ``image`` (empty: none)."""
    return subprocess.run(["losetup", "-j", str(image)], capture_output=True, text=True, timeout=60).stdout.strip()


def _unmount(point: Path) -> None:
    # Lazy: a broker killed a moment ago may still hold files open; the kernel detaches the
    # mount now and frees it (and a loop device's image) once they are closed.
    subprocess.run(["umount", "-l", str(point)], capture_output=True, timeout=60)


def unmount_stale() -> int:
    """Unmount test file systems left by test processes that are gone; how many."""
    count = 0
    with open("/proc/mounts") as f:
        points = [line.split()[1] for line in f]
    for point in points:
        name = os.path.basename(point)
        if not name.startswith(MOUNT_PREFIX):
            continue
        pid = name[len(MOUNT_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            _unmount(Path(point))
            count += 1
    return count


@contextlib.contextmanager
def tmpfs(parent: Path, size_bytes: int) -> Iterator[Path]:
    """A tmpfs of ``size_bytes`` mounted in a new directory under ``parent``."""
    point = _mount_point(parent)
    _run("mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(point))
    try:
        yield point
    finally:
        _unmount(point)


@dataclass
class Ext4:
    """A mounted ext4 image; :meth:`fail` makes the kernel fail it (read-only from then on)."""

    point: Path
    image: Path
    size_mb: int

    @property
    def device(self) -> str:
        """The loop device's name (``loop3``)."""
        with open("/proc/mounts") as f:
            for line in f:
                dev, point = line.split()[:2]
                if point == str(self.point):
                    return os.path.basename(dev)
        raise RuntimeError(f"{self.point} is not mounted")

    def fail(self) -> None:
        """What the kernel does on a metadata I/O error: with errors=remount-ro, the file system
        turns read-only under the open files (a ``mount -o remount,ro`` is refused while a
        segment is open for writing)."""
        Path(f"/sys/fs/ext4/{self.device}/trigger_fs_error").write_text("1")

    def read_only(self) -> bool:
        with open("/proc/mounts") as f:
            for line in f:
                fields = line.split()
                if fields[1] == str(self.point):
                    return "ro" in fields[3].split(",") or "emergency_ro" in fields[3]
        return False


@contextlib.contextmanager
def ext4(parent: Path, size_mb: int = 64) -> Iterator[Ext4]:
    """A fresh ext4 image of ``size_mb`` MiB, loop-mounted errors=remount-ro under ``parent``."""
    point = _mount_point(parent)
    image = point.with_name(point.name + ".img")
    with open(image, "wb") as f:
        f.truncate(size_mb << 20)
    _run("mkfs.ext4", "-q", "-F", str(image))
    _run("mount", "-o", "loop,errors=remount-ro", str(image), str(point))
    try:
        yield Ext4(point, image, size_mb)
    finally:
        _unmount(point)
        with contextlib.suppress(OSError):
            image.unlink()


def replace_disk(fs: Ext4) -> None:
    """Swap in a new, empty disk at the same mount point (after the broker stopped)."""
    _unmount(fs.point)
    fs.image.unlink()
    with open(fs.image, "wb") as f:
        f.truncate(fs.size_mb << 20)
    _run("mkfs.ext4", "-q", "-F", str(fs.image))
    _run("mount", "-o", "loop,errors=remount-ro", str(fs.image), str(fs.point))


def fill(directory: Path, leave_bytes: int) -> Path:
    """Fill the file system holding ``directory`` up to ``leave_bytes`` of free space with one
    file (returned: delete it to free the space again)."""
    filler = directory / "filler"
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    with open(filler, "wb") as f:
        chunk = b"\0" * (1 << 20)
        remaining = max(0, free - leave_bytes)
        while remaining > 0:
            remaining -= f.write(chunk[: min(len(chunk), remaining)])
    return filler


def remount(fs: Ext4) -> None:
    """Mount the same disk again (after the broker stopped): a failed file system comes back
    read-write with its journal replayed."""
    _unmount(fs.point)
    # The lazy unmount frees the old file system only once nothing holds it; mounting the image
    # again before that would put a second ext4 on the same blocks. Wait until its loop device
    # is gone.
    deadline = time.monotonic() + 30
    while _loop_devices(fs.image) and time.monotonic() < deadline:
        time.sleep(0.1)
    _run("mount", "-o", "loop,errors=remount-ro", str(fs.image), str(fs.point))
