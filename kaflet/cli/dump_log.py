"""`kaflet dump-log`: print and check segment files, as kafka-dump-log.sh does.

Reads ``.log`` (batches, and with ``--deep-iteration``/``--print-data-log`` their records),
``.index`` and ``.timeindex`` (entries, checked against the ``.log`` beside them),
``.snapshot`` (producer state) and ``.txnindex`` (aborted transactions).  The output lines
have Kafka's wording so that scripts written for kafka-dump-log.sh keep working; problems
found in indexes are summarised on stderr at the end, as Kafka does.  The files are only
read, so dumping a live broker's segments is safe.
"""

from __future__ import annotations

import os
import struct
import sys
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import click
import crc32c

from kaflet.cli.progress import progress
from kaflet.protocol.records import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    DELETE_HORIZON_FLAG_MASK,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    NO_SEQUENCE,
    TIMESTAMP_LOG_APPEND_TIME,
    BatchHeader,
    RecordError,
    decode_records,
    increment_sequence,
    parse_batch_header,
)

INT32_MAX = 2**31 - 1
_CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_CONTROL_TYPES = {0: "ABORT", 1: "COMMIT"}
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_TXN_ENTRY = struct.Struct(">hqqqq")
_BATCH_START = struct.Struct(">qiib")  # base offset, length, leader epoch, magic


class DumpError(Exception):
    """A file that cannot be dumped at all; reported as one ``Error:`` line."""


@dataclass
class DumpOptions:
    """The command's flags."""

    print_data_log: bool = False
    deep_iteration: bool = False
    index_sanity_check: bool = False
    verify_index_only: bool = False
    skip_record_metadata: bool = False
    max_message_size: int = 5 * 1024 * 1024
    max_bytes: int = INT32_MAX


def _base_offset_of(path: str) -> int:
    stem = os.path.basename(path).split(".")[0]
    if not stem.isdigit():
        raise DumpError(f"{path} is not a segment file: its name must be the base offset (20 digits) plus a suffix")
    return int(stem)


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise DumpError(f"cannot read {path}: {exc.strerror or exc}") from None


class _Segment:
    """A ``.log`` file read batch by batch with ``pread`` (never wholly loaded)."""

    def __init__(self, path: str, limit: int = INT32_MAX) -> None:
        try:
            self._fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise DumpError(f"cannot read {path}: {exc.strerror or exc}") from None
        self.path = path
        self.size = min(os.fstat(self._fd).st_size, limit)

    def close(self) -> None:
        os.close(self._fd)

    def batches(self, start: int = 0) -> Iterator[tuple[int, BatchHeader, bytes]]:
        """(position, header, whole batch bytes) until the end or the first incomplete batch.

        Raises DumpError for a batch that cannot be a v2 batch (bad length or magic).
        """
        pos = start
        while self.size - pos >= LOG_OVERHEAD:
            head = os.pread(self._fd, BATCH_HEADER_SIZE, pos)
            _, length = struct.unpack_from(">qi", head)
            if pos + LOG_OVERHEAD + length > self.size or len(head) < BATCH_HEADER_SIZE:
                return  # a torn tail: counted as invalid bytes
            if length < MIN_BATCH_LENGTH:
                raise DumpError(f"{self.path}: corrupt batch at position {pos}: size {length + LOG_OVERHEAD} "
                                f"is below the minimum batch size {BATCH_HEADER_SIZE}")
            h = parse_batch_header(head)
            if h.magic != MAGIC_V2:
                raise DumpError(f"{self.path}: batch at position {pos} has magic {h.magic}; only message format v2 "
                                "(magic 2) is supported")
            yield pos, h, os.pread(self._fd, length + LOG_OVERHEAD, pos)
            pos += length + LOG_OVERHEAD

    def first_batch_from(self, position: int) -> BatchHeader | None:
        for _, h, _ in self.batches(position):
            return h
        return None


def _timestamp_type(h: BatchHeader) -> str:
    return "LogAppendTime" if h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME else "CreateTime"


def _text(b: bytes) -> str:
    # Kafka's default StringDecoder: UTF-8, undecodable bytes replaced.
    return b.decode("utf-8", errors="replace")


@dataclass
class Dumper:
    """Dumps files one by one; collects index/offset problems for ``report``."""

    opts: DumpOptions
    out: Callable[[str], None]
    err: Callable[[str], None]
    index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def dump(self, path: str) -> None:
        """Dump one file, chosen by its suffix."""
        self.out(f"Dumping {path}")
        suffix = os.path.splitext(path)[1]
        if suffix == ".log":
            self.dump_log(path)
        elif suffix == ".index":
            self.dump_index(path)
        elif suffix == ".timeindex":
            self.dump_time_index(path)
        elif suffix == ".snapshot":
            self.dump_snapshot(path)
        elif suffix == ".txnindex":
            self.dump_txn_index(path)
        else:
            self.err(f"Ignoring unknown file {path}")

    # ---- .log ----

    def dump_log(self, path: str) -> None:
        base = _base_offset_of(path)
        seg = _Segment(path, self.opts.max_bytes)
        try:
            if seg.size > 0 and not self._starts_with_batch(seg):
                raise DumpError(f"{path} is not a Kafka log segment: no record batch at position 0")
            self.out(f"Log starting offset: {base}")
            deep = self.opts.deep_iteration or self.opts.print_data_log
            valid = 0
            last_offset = -1
            with progress(os.path.basename(path), seg.size, each="batches") as advance:
                for pos, h, data in seg.batches():
                    self.out(self._batch_line(pos, h, data))
                    if deep:
                        last_offset = self._print_records(path, h, data, last_offset)
                    advance(pos + len(data) - valid)
                    valid = pos + len(data)
            trailing = seg.size - valid
            if trailing > 0 and self.opts.max_bytes == INT32_MAX:
                self.out(f"Found {trailing} invalid bytes at the end of {os.path.basename(path)}")
        finally:
            seg.close()

    @staticmethod
    def _starts_with_batch(seg: _Segment) -> bool:
        head = os.pread(seg._fd, BATCH_HEADER_SIZE, 0)
        if len(head) < BATCH_HEADER_SIZE:
            return False
        _, length, _, magic = _BATCH_START.unpack_from(head)
        return magic == MAGIC_V2 and MIN_BATCH_LENGTH <= length <= seg.size - LOG_OVERHEAD

    @staticmethod
    def _batch_line(pos: int, h: BatchHeader, data: bytes) -> str:
        valid = crc32c.crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]) == h.crc
        horizon = (f"OptionalLong[{h.base_timestamp}]" if h.attributes & DELETE_HORIZON_FLAG_MASK
                   else "OptionalLong.empty")
        return (
            f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} producerId: {h.producer_id} "
            f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
            f"deleteHorizonMs: {horizon} position: {pos} {_timestamp_type(h)}: {h.max_timestamp} "
            f"size: {h.size} magic: {h.magic} compresscodec: {_CODEC_NAMES.get(h.compression, h.compression)} "
            f"crc: {h.crc} isvalid: {str(valid).lower()}"
        )

    def _print_records(self, path: str, h: BatchHeader, data: bytes, last_offset: int) -> int:
        try:
            records = decode_records(data)
        except RecordError as exc:
            raise DumpError(f"{path}: cannot read the records of the batch at offset {h.base_offset}: {exc}") from None
        for r in records:
            offset = h.base_offset + r.offset_delta
            if last_offset != -1 and offset != last_offset + 1:
                self.non_consecutive.setdefault(os.path.abspath(path), []).append((last_offset, offset))
            last_offset = offset
            ts = h.max_timestamp if h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME else h.base_timestamp + r.timestamp_delta
            parts: list[str] = []
            if not self.opts.skip_record_metadata:
                seq = NO_SEQUENCE if h.base_sequence < 0 else increment_sequence(h.base_sequence, r.offset_delta)
                parts.append(
                    f"offset: {offset} {_timestamp_type(h)}: {ts} keySize: {-1 if r.key is None else len(r.key)} "
                    f"valueSize: {-1 if r.value is None else len(r.value)} sequence: {seq} "
                    f"headerKeys: [{','.join(k for k, _ in r.headers)}]"
                )
                if h.is_control:
                    parts.append(self._control_text(r.key, r.value))
            if self.opts.print_data_log and not h.is_control:
                if r.key is not None:
                    parts.append(f"key: {_text(r.key)}")
                if r.value is not None:
                    parts.append(f"payload: {_text(r.value)}")
            self.out("| " + " ".join(parts))
        return last_offset

    @staticmethod
    def _control_text(key: bytes | None, value: bytes | None) -> str:
        if key is None or len(key) < 4:
            return "controlType: UNKNOWN(-1)"
        ctype = struct.unpack_from(">h", key, 2)[0]
        if ctype in _CONTROL_TYPES and value is not None and len(value) >= 6:
            return f"endTxnMarker: {_CONTROL_TYPES[ctype]} coordinatorEpoch: {struct.unpack_from('>i', value, 2)[0]}"
        return f"controlType: UNKNOWN({ctype})"

    # ---- indexes ----

    def _paired_log(self, path: str) -> _Segment:
        log_path = os.path.join(os.path.dirname(path), os.path.basename(path).split(".")[0] + ".log")
        if not os.path.exists(log_path):
            raise DumpError(f"{path}: the segment's log file {log_path} does not exist")
        return _Segment(log_path)

    @staticmethod
    def _offset_entries(path: str, data: bytes, base: int) -> list[tuple[int, int]]:
        if len(data) % _OFFSET_ENTRY.size:
            raise DumpError(f"Index file {path} is corrupt, found {len(data)} bytes which is neither positive "
                            f"nor a multiple of {_OFFSET_ENTRY.size}")
        out = []
        for i, (rel, pos) in enumerate(_OFFSET_ENTRY.iter_unpack(data)):
            # Zeros are preallocated slots (an active segment's index, or one left by a crash):
            # no real entry points at position 0, since the first batch is never indexed.
            if rel == 0 and (i > 0 or pos == 0):
                break
            out.append((base + rel, pos))
        return out

    def dump_index(self, path: str) -> None:
        base = _base_offset_of(path)
        data = _read_file(path)
        entries = self._offset_entries(path, data, base)
        if not entries:
            self.out(f"{path} is empty.")
            return
        if self.opts.index_sanity_check:
            for (o1, p1), (o2, p2) in zip(entries, entries[1:], strict=False):
                if o2 <= o1 or p2 <= p1:
                    raise DumpError(f"Corrupt index found, index file ({path}): entry ({o2}, {p2}) does not follow "
                                    f"({o1}, {p1})")
            if entries[-1][0] < base or entries[0][1] < 0:
                raise DumpError(f"Corrupt index found, index file ({path}) has non-zero size but the last offset "
                                f"is {entries[-1][0]} which is less than the base offset {base}")
            self.out(f"{path} passed sanity check.")
            return
        seg = self._paired_log(path)
        try:
            for offset, position in entries:
                h = seg.first_batch_from(position)
                found = h.last_offset if h is not None else -1
                if found != offset:
                    self.index_mismatches.setdefault(os.path.abspath(path), []).append((offset, found))
                if not self.opts.verify_index_only:
                    self.out(f"offset: {offset} position: {position}")
        finally:
            seg.close()

    def dump_time_index(self, path: str) -> None:
        base = _base_offset_of(path)
        data = _read_file(path)
        if len(data) % _TIME_ENTRY.size:
            raise DumpError(f"Time index file {path} is corrupt, found {len(data)} bytes which is neither positive "
                            f"nor a multiple of {_TIME_ENTRY.size}")
        raw = list(_TIME_ENTRY.iter_unpack(data))
        while raw and raw[-1] == (0, 0):
            raw.pop()  # preallocated slots of an active segment
        if not raw:
            self.out(f"{path} is empty.")
            return
        if self.opts.index_sanity_check:
            if raw and raw[-1][0] < raw[0][0]:
                raise DumpError(f"Corrupt time index found, time index file ({path}) has non-zero size but the last "
                                f"timestamp is {raw[-1][0]} which is less than the first timestamp {raw[0][0]}")
            if raw and raw[-1][1] < 0:
                raise DumpError(f"Corrupt time index found, time index file ({path}) has non-zero size but the last "
                                f"offset is {base + raw[-1][1]} which is less than the base offset {base}")
            self.out(f"{path} passed sanity check.")
            return
        index_path = os.path.join(os.path.dirname(path), os.path.basename(path).split(".")[0] + ".index")
        index = self._offset_entries(index_path, _read_file(index_path), base) if os.path.exists(index_path) else []
        index_offsets = [o for o, _ in index]
        seg = self._paired_log(path)
        key = os.path.abspath(path)
        prev_ts = -1
        try:
            for i, (ts, rel) in enumerate(raw):
                offset = base + rel
                if rel == 0 and i > 0:
                    break
                j = bisect_right(index_offsets, offset) - 1
                position = index[j][1] if j >= 0 else 0
                batch = None
                for _, h, batch_data in seg.batches(position):
                    if h.last_offset >= offset:
                        batch = (h, batch_data)
                        break
                if batch is None:
                    self.time_not_found.setdefault(key, []).append((offset, -1))
                elif batch[0].last_offset != offset:
                    self.time_not_found.setdefault(key, []).append((offset, batch[0].last_offset))
                else:
                    max_ts = self._max_record_timestamp(*batch)
                    if max_ts != ts:
                        self.time_mismatches.setdefault(key, []).append((ts, max_ts))
                    if prev_ts >= ts:
                        self.time_out_of_order.setdefault(key, []).append((ts, prev_ts))
                if not self.opts.verify_index_only:
                    self.out(f"timestamp: {ts} offset: {offset}")
                prev_ts = ts
        finally:
            seg.close()

    @staticmethod
    def _max_record_timestamp(h: BatchHeader, data: bytes) -> int:
        if h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
            return h.max_timestamp
        try:
            return max((h.base_timestamp + r.timestamp_delta for r in decode_records(data)), default=-1)
        except RecordError:
            return -1

    # ---- producer snapshots and transaction indexes ----

    def dump_snapshot(self, path: str) -> None:
        from kaflet.log.producer_state import ProducerStateManager

        try:
            producers = ProducerStateManager.decode_snapshot(_read_file(path))
        except ValueError as exc:
            raise DumpError(f"{path} is not a valid producer snapshot: {exc}") from None
        for e in producers.values():
            line = (f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} "
                    f"coordinatorEpoch: {e.coordinator_epoch} currentTxnFirstOffset: {e.current_txn_first_offset} "
                    f"lastTimestamp: {e.last_timestamp} ")
            if e.batches:
                b = e.batches[-1]
                line += (f"firstSequence: {b.first_seq} lastSequence: {b.last_seq} lastOffset: {b.last_offset} "
                         f"offsetDelta: {b.offset_delta} timestamp: {b.timestamp}")
            self.out(line)

    def dump_txn_index(self, path: str) -> None:
        data = _read_file(path)
        if len(data) % _TXN_ENTRY.size:
            raise DumpError(f"Transaction index file {path} is corrupt: {len(data)} bytes is not a multiple of "
                            f"{_TXN_ENTRY.size}")
        for version, pid, first, last, lso in _TXN_ENTRY.iter_unpack(data):
            self.out(f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} "
                     f"lastStableOffset: {lso}")

    # ---- summary ----

    def report(self) -> bool:
        """Print the collected problems to stderr (Kafka's wording); True if there were any."""
        for name, pairs in self.index_mismatches.items():
            self.err(f"Mismatches in :{name}")
            for idx, found in pairs:
                self.err(f"  Index offset: {idx}, log offset: {found}")
        for name, pairs in self.time_mismatches.items():
            self.err(f"Found timestamp mismatch in :{name}")
            for idx, found in pairs:
                self.err(f"  Index timestamp: {idx}, log timestamp: {found}")
        for name, pairs in self.time_out_of_order.items():
            self.err(f"Found out of order timestamp in :{name}")
            for idx, prev in pairs:
                self.err(f"  Index timestamp: {idx}, Previously indexed timestamp: {prev}")
        for pairs in self.time_not_found.values():
            self.err("The following indexed offsets are not found in the log.")
            for idx, found in pairs:
                self.err(f"Indexed offset: {idx}, found log offset: {found}")
        for name, pairs in self.non_consecutive.items():
            self.err(f"Non-consecutive offsets in {name}")
            for first, second in pairs:
                self.err(f"  {first} is followed by {second}")
        return bool(self.index_mismatches or self.time_mismatches or self.time_out_of_order or self.time_not_found)


def run(files: list[str], opts: DumpOptions, out: Callable[[str], None], err: Callable[[str], None]) -> int:
    """Dump ``files``; returns the exit code (1 after a one-line ``Error:``)."""
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        err(f"Error: {missing[0]} does not exist or is not a file.")
        return 1
    dumper = Dumper(opts, out, err)
    try:
        for f in files:
            dumper.dump(f)
    except DumpError as exc:
        dumper.report()
        err(f"Error: {' '.join(str(exc).split())}")
        return 1
    dumper.report()
    return 0


@click.command("dump-log")
@click.option("--files", "files", required=True,
              help="Comma-separated segment files to dump: .log, .index, .timeindex, .snapshot, .txnindex.")
@click.option("--print-data-log", is_flag=True, help="Print record keys and values (implies --deep-iteration).")
@click.option("--deep-iteration", is_flag=True, help="Print every record, not only the batch headers.")
@click.option("--index-sanity-check", is_flag=True,
              help="Only check that index files are sane (what a broker checks at start-up).")
@click.option("--verify-index-only", is_flag=True, help="Check index entries against the log without printing them.")
@click.option("--skip-record-metadata", is_flag=True, help="Print record keys and values without offsets etc.")
@click.option("--max-message-size", type=click.IntRange(min=1), default=5 * 1024 * 1024, show_default=True,
              help="Largest batch expected when reading indexed positions.")
@click.option("--max-bytes", type=click.IntRange(min=1), default=INT32_MAX, show_default=True,
              help="Read at most this many bytes of each .log file.")
def dump_log(files: str, print_data_log: bool, deep_iteration: bool, index_sanity_check: bool,
             verify_index_only: bool, skip_record_metadata: bool, max_message_size: int, max_bytes: int) -> None:
    """Print the batches, records and index entries of segment files (like kafka-dump-log.sh)."""
    names = [f.strip() for f in files.split(",") if f.strip()]
    if not names:
        raise click.BadParameter("name at least one file", param_hint="--files")
    opts = DumpOptions(print_data_log, deep_iteration, index_sanity_check, verify_index_only, skip_record_metadata,
                       max_message_size, max_bytes)
    code = run(names, opts, lambda s: click.echo(s), lambda s: click.echo(s, err=True))
    sys.stdout.flush()
    if code:
        sys.exit(code)
