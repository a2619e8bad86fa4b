"""Kafka's small metadata files: offset checkpoints, leader-epoch-checkpoint, partition.metadata,
meta.properties.  Every write goes to ``<file>.tmp``, is fsync'd, renamed over the real file, and
the directory is fsync'd, so a crash leaves either the old or the new file, never a torn one.
A log's own files (leader-epoch-checkpoint, partition.metadata) are written the same way, off
the event loop, by :mod:`kaflet.log.metadata_writer`.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import cast

CHECKPOINT_VERSION = 0
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
META_PROPERTIES = "meta.properties"

_WS = re.compile(r"\s+")


class CheckpointError(OSError):
    """A malformed checkpoint file (Kafka marks the log dir offline on this)."""


def fsync_dir(path: str) -> None:
    """fsync a directory so a rename inside it is durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _load_syncfs() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return cast("Callable[[int], int]", libc.syncfs)
    except (OSError, AttributeError):
        return None


_SYNCFS = _load_syncfs()


def has_syncfs() -> bool:
    """Whether :func:`syncfs` can be called here (Linux)."""
    return _SYNCFS is not None


def syncfs(path: str) -> None:
    """Make every write to the file system holding ``path`` durable (Linux syncfs(2)): one
    commit where an fsync per file costs one each (20,000 index files at a clean shutdown of
    10,000 partitions took seconds). Raises OSError on a write-back error (Linux 5.8+)."""
    if _SYNCFS is None:
        raise OSError(errno.ENOSYS, "syncfs is not available")
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _SYNCFS(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def read_small_file(path: str) -> bytes:
    """The whole content of a small file. Raw ``os`` calls, not ``open``: a start-up reads two
    of these a partition, and a file object's set-up cost twice the read itself."""
    fd = os.open(path, os.O_RDONLY)
    try:
        parts = []
        while chunk := os.read(fd, 65536):
            parts.append(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, fsync: bool = True) -> None:
    """Write ``data`` via ``path.tmp`` + fsync + rename (+ directory fsync)."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if fsync:
        fsync_dir(os.path.dirname(os.path.abspath(path)))


def format_checkpoint(entries: Iterable[str], version: int = CHECKPOINT_VERSION) -> bytes:
    """The common text format: version line, count line, one line per entry, all '\\n'-ended."""
    lines = list(entries)
    return ("".join(f"{x}\n" for x in [str(version), str(len(lines)), *lines])).encode()


def read_checkpoint_lines(path: str, version: int = CHECKPOINT_VERSION) -> list[list[str]]:
    """Entry lines split on whitespace; a missing or empty file has none."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return []
    return parse_checkpoint_lines(text, path, version)


def parse_checkpoint_lines(text: str, path: str, version: int = CHECKPOINT_VERSION) -> list[list[str]]:
    """``read_checkpoint_lines`` of a file's text (``path`` names it in errors)."""
    if not text:
        return []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    try:
        if int(lines[0].strip()) != version:
            raise CheckpointError(f"{path}: unrecognised version {lines[0]!r}")
        count = int(lines[1].strip())
    except (IndexError, ValueError) as exc:
        raise CheckpointError(f"{path}: malformed header") from exc
    body = [_WS.split(line.strip()) for line in lines[2:]]
    if len(body) != count:
        raise CheckpointError(f"{path}: expected {count} entries, found {len(body)}")
    return body


def write_offset_checkpoint(path: str, offsets: Mapping[tuple[str, int], int], fsync: bool = True) -> None:
    """Write ``<topic> <partition> <offset>`` lines (recovery point, log start, HW, cleaner)."""
    write_atomic(path, format_checkpoint(f"{t} {p} {o}" for (t, p), o in offsets.items()), fsync)


def read_offset_checkpoint(path: str) -> dict[tuple[str, int], int]:
    """Read an offset checkpoint; raises CheckpointError when malformed."""
    out: dict[tuple[str, int], int] = {}
    for parts in read_checkpoint_lines(path):
        if len(parts) != 3:
            raise CheckpointError(f"{path}: malformed line {' '.join(parts)!r}")
        try:
            out[(parts[0], int(parts[1]))] = int(parts[2])
        except ValueError as exc:
            raise CheckpointError(f"{path}: malformed line {' '.join(parts)!r}") from exc
    return out


def format_leader_epoch_checkpoint(entries: Iterable[tuple[int, int]]) -> bytes:
    """``leader-epoch-checkpoint`` content: ``<epoch> <startOffset>`` lines, ascending."""
    return format_checkpoint(f"{e} {o}" for e, o in entries)


def read_leader_epoch_checkpoint(path: str) -> list[tuple[int, int]]:
    """Read (epoch, start offset) entries."""
    try:
        with open(path, "rb") as f:
            return parse_leader_epoch_checkpoint(f.read(), path)
    except FileNotFoundError:
        return []


def parse_leader_epoch_checkpoint(data: bytes, path: str) -> list[tuple[int, int]]:
    """The (epoch, start offset) entries of a ``leader-epoch-checkpoint``'s content."""
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path}: not UTF-8") from exc
    out: list[tuple[int, int]] = []
    for parts in parse_checkpoint_lines(text, path):
        if len(parts) != 2:
            raise CheckpointError(f"{path}: malformed line {' '.join(parts)!r}")
        try:
            out.append((int(parts[0]), int(parts[1])))
        except ValueError as exc:
            raise CheckpointError(f"{path}: malformed line {' '.join(parts)!r}") from exc
    return out


def format_partition_metadata(topic_id: str) -> bytes:
    """``partition.metadata`` content: no trailing newline."""
    return f"version: 0\ntopic_id: {topic_id}".encode()


def read_partition_metadata(path: str) -> str | None:
    """The topic id in ``partition.metadata``, or None if the file is missing."""
    try:
        data = read_small_file(path)
    except FileNotFoundError:
        return None
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path}: not UTF-8") from exc
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = re.split(r":\s+", line, maxsplit=1)
        if len(parts) != 2:
            raise CheckpointError(f"{path}: malformed line {line!r}")
        fields[parts[0]] = parts[1].strip()
    try:
        if int(fields["version"]) < 0:
            raise CheckpointError(f"{path}: bad version")
        return fields["topic_id"]
    except (KeyError, ValueError) as exc:
        raise CheckpointError(f"{path}: malformed partition.metadata") from exc


# ---- meta.properties (java.util.Properties text format) ----

_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f",
            "=": "\\=", ":": "\\:", "#": "\\#", "!": "\\!"}
_UNESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _prop_escape(s: str, is_key: bool) -> str:
    out = "".join(_ESCAPES.get(c, c) for c in s)
    if out.startswith(" ") or (is_key and " " in out):
        out = out.replace(" ", "\\ ") if is_key else "\\" + out
    return out


def _prop_unescape(s: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            i += 1
            out.append(_UNESCAPES.get(s[i], s[i]))
        else:
            out.append(c)
        i += 1
    return "".join(out)


def format_meta_properties(props: Mapping[str, str], now: float | None = None) -> bytes:
    """``Properties.store(writer, "")``: '#', a '#<date>' line, then key=value lines."""
    date = time.strftime("%a %b %d %H:%M:%S %Z %Y", time.localtime(now))
    lines = ["#", f"#{date}"] + [f"{_prop_escape(k, True)}={_prop_escape(str(v), False)}" for k, v in props.items()]
    return ("\n".join(lines) + "\n").encode("utf-8")


def write_meta_properties(path: str, props: Mapping[str, str]) -> None:
    """Write meta.properties (keys for ZK mode: version=0, broker.id, cluster.id)."""
    write_atomic(path, format_meta_properties(props))


def read_meta_properties(path: str) -> dict[str, str] | None:
    """Parse meta.properties; None if it does not exist."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.lstrip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"((?:\\.|[^=:\s\\])*)\s*[=:\s]\s*(.*)$", line)
        if m:
            out[_prop_unescape(m.group(1))] = _prop_unescape(m.group(2))
        else:
            out[_prop_unescape(line)] = ""
    return out
