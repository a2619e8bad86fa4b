"""Per-topic log configuration with Kafka's names and defaults."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

LONG_MAX = 2**63 - 1

_CODECS = {"producer": -1, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _to_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "1"):
        return True
    if s in ("false", "0"):
        return False
    raise ValueError(f"not a boolean: {v!r}")


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Topic configs (Kafka topic-level names with '.' -> '_') and their Kafka defaults.

    Only the fields the storage layer acts on are typed; any other config is kept in ``extra``.
    """

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_difference_max_ms: int = LONG_MAX
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    compression_type: str = "producer"
    #: KIP-390: the level a batch recompressed to compression.type is written with.
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    retention_ms: int = 604800000
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 86400000
    file_delete_delay_ms: int = 60000
    min_insync_replicas: int = 1
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    preallocate: bool = False
    unclean_leader_election_enable: bool = False
    message_downconversion_enable: bool = True
    extra: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_props(cls, props: Mapping[str, Any], base: LogConfig | None = None) -> LogConfig:
        """Build from Kafka topic config names (string or typed values) on top of ``base``.

        Raises ValueError for a value of the wrong type or out of range (INVALID_CONFIG).
        """
        base = base or cls()
        kinds = {f.name: f.type for f in dataclasses.fields(cls)}
        changes: dict[str, Any] = {}
        extra = dict(base.extra)
        for name, raw in props.items():
            attr = name.replace(".", "_")
            if attr == "extra" or attr not in kinds:
                extra[name] = str(raw)
                continue
            kind = kinds[attr]
            if kind in ("int", int):
                changes[attr] = int(raw)
            elif kind in ("float", float):
                changes[attr] = float(raw)
            elif kind in ("bool", bool):
                changes[attr] = _to_bool(raw)
            else:
                changes[attr] = str(raw).strip()
        cfg = dataclasses.replace(base, extra=extra, **changes)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Reject values Kafka would reject."""
        if self.compression_type not in _CODECS:
            raise ValueError(f"invalid compression.type {self.compression_type!r}")
        if self.compression_gzip_level != -1 and not 1 <= self.compression_gzip_level <= 9:
            raise ValueError("compression.gzip.level must be between 1 and 9 or equal to -1")
        if not 1 <= self.compression_lz4_level <= 17:
            raise ValueError("compression.lz4.level must be between 1 and 17")
        if not -131072 <= self.compression_zstd_level <= 22:
            raise ValueError("compression.zstd.level must be between -131072 and 22")
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ValueError(f"invalid message.timestamp.type {self.message_timestamp_type!r}")
        if self.segment_bytes < 14:
            raise ValueError("segment.bytes must be at least 14")
        if self.segment_ms < 1:
            raise ValueError("segment.ms must be at least 1")
        if self.segment_index_bytes < 4:
            raise ValueError("segment.index.bytes must be at least 4")
        if self.index_interval_bytes < 0 or self.max_message_bytes < 0:
            raise ValueError("index.interval.bytes and max.message.bytes must be >= 0")
        if self.flush_messages < 1 or self.flush_ms < 0:
            raise ValueError("flush.messages must be >= 1 and flush.ms >= 0")
        # An empty list is Kafka's too: neither deleted by retention nor compacted.
        if self.cleanup_policy.strip():
            for p in self.cleanup_policy.split(","):
                if p.strip() not in ("delete", "compact"):
                    raise ValueError(f"invalid cleanup.policy {self.cleanup_policy!r}")

    @property
    def target_codec(self) -> int:
        """Codec id the broker must store batches with, or -1 to keep the producer's."""
        return _CODECS[self.compression_type]

    @property
    def target_level(self) -> int | None:
        """The compression level of ``target_codec`` (None: it has none, or keeps the producer's)."""
        return {"gzip": self.compression_gzip_level, "lz4": self.compression_lz4_level,
                "zstd": self.compression_zstd_level}.get(self.compression_type)

    @property
    def timestamp_before_max_ms(self) -> int:
        """How far a CreateTime timestamp may be behind the broker's clock (KIP-937): the
        before.max.ms config, or message.timestamp.difference.max.ms while it is left at its
        default (Kafka 3.6+'s LogConfig keeps the deprecated key working that way)."""
        before = self.message_timestamp_before_max_ms
        return before if before != LONG_MAX else self.message_timestamp_difference_max_ms

    @property
    def timestamp_after_max_ms(self) -> int:
        """How far a CreateTime timestamp may be ahead of the broker's clock (as above)."""
        after = self.message_timestamp_after_max_ms
        return after if after != LONG_MAX else self.message_timestamp_difference_max_ms

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """cleanup.policy includes ``delete``: retention.ms/bytes apply and DeleteRecords is allowed."""
        return "delete" in self.cleanup_policy

    def to_props(self) -> dict[str, str]:
        """Kafka names -> string values (booleans lowercase), ``extra`` included."""
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            if f.name == "extra":
                continue
            v = getattr(self, f.name)
            out[f.name.replace("_", ".")] = str(v).lower() if isinstance(v, bool) else str(v)
        out.update(self.extra)
        return out
