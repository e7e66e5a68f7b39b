"""Per-topic log configuration with Kafka's property names, defaults and validation.

Kafka's topic configs (`TopicConfig` / `LogConfig`) are strings like `segment.bytes=1073741824`.
LogConfig holds them typed, one field per property (the name with dots turned into
underscores); `from_properties` / `to_properties` convert from and to Kafka's names, so the
broker's CreateTopics/DescribeConfigs/AlterConfigs and the topic JSON files speak the same
language. Unknown names and bad values raise InvalidConfigError naming the property.

Every Kafka 4.x topic config is accepted. Each spec also names the broker-level property that
sets the config's cluster-wide default (Kafka's ServerTopicConfigSynonyms, e.g. retention.ms <-
log.retention.ms) and documents it; a config that changes nothing here (no replicas, no tiered
storage, no recompression) says so in its documentation.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .errors import InvalidConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
CLEANUP_DELETE = "delete"
CLEANUP_COMPACT = "compact"
COMPRESSION_TYPES = ("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd")

_MIB = 1024 * 1024
_DAY_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1024 * _MIB
    segment_ms: int = 7 * _DAY_MS
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * _MIB
    index_interval_bytes: int = 4096
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    retention_ms: int = 7 * _DAY_MS
    retention_bytes: int = -1
    cleanup_policy: tuple[str, ...] = (CLEANUP_DELETE,)
    max_message_bytes: int = _MIB + 12  # 1048588: 1 MiB + the batch LOG_OVERHEAD
    message_timestamp_type: str = CREATE_TIME
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = _DAY_MS
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60_000
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    preallocate: bool = False
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 60 * 60 * 1000  # Kafka 4.0's default: one hour
    leader_replication_throttled_replicas: tuple[str, ...] = ()
    follower_replication_throttled_replicas: tuple[str, ...] = ()
    remote_storage_enable: bool = False
    local_retention_ms: int = -2  # -2: follow retention.ms
    local_retention_bytes: int = -2  # -2: follow retention.bytes
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _SPECS[f.name].check(getattr(self, f.name))
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfigError(
                f"min.compaction.lag.ms ({self.min_compaction_lag_ms}) must not exceed "
                f"max.compaction.lag.ms ({self.max_compaction_lag_ms})")
        if self.remote_storage_enable:
            self._check_remote_storage()

    def _check_remote_storage(self) -> None:
        """Kafka's checks of a tiered topic (LogConfig.validateRemoteStorage*): delete policy only,
        and the local copy keeps no more than the whole log does."""
        if self.compact:
            raise InvalidConfigError("remote.storage.enable=true needs cleanup.policy=delete: the topic's table "
                                     "holds every record, a compacted topic's log does not (as Kafka refuses it)")
        for local, total, name in ((self.local_retention_ms, self.retention_ms, "ms"),
                                   (self.local_retention_bytes, self.retention_bytes, "bytes")):
            unbounded_local = local == -1 and total != -1
            if unbounded_local or (local >= 0 and total != -1 and local > total):
                raise InvalidConfigError(f"local.retention.{name} ({local}) must not exceed retention.{name} ({total})")

    # -- derived values the log uses
    @property
    def max_index_entries(self) -> int:
        return self.segment_index_bytes // 8

    @property
    def compact(self) -> bool:
        return CLEANUP_COMPACT in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return CLEANUP_DELETE in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    @property
    def local_retention(self) -> "LogConfig":
        """The config segment retention applies: with remote storage on (the topic's table is the
        remote tier), local.retention.* (-2: retention.*) bound the log; else the log is everything."""
        if not self.remote_storage_enable:
            return self
        return dataclasses.replace(
            self, retention_ms=self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms,
            retention_bytes=self.retention_bytes if self.local_retention_bytes == -2 else self.local_retention_bytes)

    # -- Kafka property names
    @classmethod
    def from_properties(cls, props: Mapping[str, Any] | None = None, *,
                        base: "LogConfig | None" = None) -> "LogConfig":
        """Typed config from Kafka property names (values as strings or already typed);
        properties that are absent keep the value of `base` (default: Kafka's defaults)."""
        values = {}
        for name, raw in (props or {}).items():
            spec = _BY_PROPERTY.get(name)
            if spec is None:
                raise InvalidConfigError(f"unknown topic config {name!r}")
            values[spec.field] = spec.parse(raw)
        return dataclasses.replace(base or cls(), **values)

    def to_properties(self, *, only_overrides: bool = False) -> dict[str, str]:
        """Kafka names -> strings; with only_overrides, just the values that differ from defaults."""
        default = LogConfig()
        out = {}
        for spec in _SPECS.values():
            value = getattr(self, spec.field)
            if only_overrides and value == getattr(default, spec.field):
                continue
            out[spec.name] = spec.format(value)
        return out

    def with_overrides(self, props: Mapping[str, Any]) -> "LogConfig":
        return LogConfig.from_properties(props, base=self)

    @staticmethod
    def property_names() -> tuple[str, ...]:
        return tuple(_BY_PROPERTY)

    @staticmethod
    def property_spec(name: str) -> "PropertySpec | None":
        """A property's type (`kind`), broker-level synonym (`server`) and documentation (`doc`)."""
        return _BY_PROPERTY.get(name)

    @staticmethod
    def server_synonym(name: str) -> str | None:
        """The broker property that sets `name`'s cluster-wide default (None: the topic config has none)."""
        spec = _BY_PROPERTY.get(name)
        return spec.server if spec is not None else None

    @staticmethod
    def topic_config_of(server_name: str) -> str | None:
        """The topic config a broker property is the cluster-wide default of (None: it is none's)."""
        return _BY_SERVER.get(server_name)


# ---------------------------------------------------------------------------------------------
# One spec per property: its Kafka name, how to parse, format and check a value.

@dataclass(frozen=True, slots=True)
class PropertySpec:
    field: str
    kind: str  # "int", "float", "bool", "str", "list"
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] | None = None
    server: str | None = None  # the broker property that sets the cluster-wide default
    doc: str = ""
    allowed: tuple[Any, ...] = ()  # values allowed outside [low, high] (gzip's -1)
    item: Callable[[str], bool] | None = None  # a list item's check
    empty_ok: bool = False  # a list that may be empty

    @property
    def name(self) -> str:
        return self.field.replace("_", ".")

    def parse(self, raw: Any) -> Any:
        try:
            return _PARSERS[self.kind](raw)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"invalid value {raw!r} for {self.name}: expected {self.kind}") from None

    def format(self, value: Any) -> str:
        if self.kind == "list":
            return ",".join(value)
        if self.kind == "bool":
            return "true" if value else "false"
        return str(value)

    def check(self, value: Any) -> None:
        if self.kind in ("int", "float"):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidConfigError(f"{self.name} must be a number, got {value!r}")
            if value in self.allowed:
                return
            if self.low is not None and value < self.low:
                raise InvalidConfigError(f"{self.name}={value} is below the minimum {self.low:g}")
            if self.high is not None and value > self.high:
                raise InvalidConfigError(f"{self.name}={value} is above the maximum {self.high:g}")
        values = value if self.kind == "list" else (value,) if self.kind == "str" else (
            (self.format(value),) if self.kind == "bool" else ())
        if self.choices is not None:
            for item in values:
                if item not in self.choices:
                    raise InvalidConfigError(
                        f"invalid value {item!r} for {self.name}: use one of {', '.join(self.choices)}")
        if self.kind == "list" and not value and not self.empty_ok:
            raise InvalidConfigError(f"{self.name} must not be empty")
        valid = self.item
        if valid is not None:
            for item in values:
                if not valid(item):
                    raise InvalidConfigError(f"invalid value {item!r} in {self.name}")


def _parse_int(raw: Any) -> int:
    if isinstance(raw, bool) or isinstance(raw, float):
        raise ValueError(raw)
    return int(str(raw).strip())


def _parse_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(raw)
    return text == "true"


def _parse_list(raw: Any) -> tuple[str, ...]:
    items = raw if isinstance(raw, (list, tuple)) else str(raw).split(",")
    return tuple(dict.fromkeys(str(i).strip() for i in items if str(i).strip()))


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "int": _parse_int, "float": lambda raw: float(str(raw).strip()), "bool": _parse_bool,
    "str": lambda raw: str(raw).strip(), "list": _parse_list,
}

def _throttled_replica(item: str) -> bool:
    """"*" alone, or partition:broker pairs (Kafka's ThrottledReplicaListValidator)."""
    partition, _, broker = item.partition(":")
    return item == "*" or (partition.isdigit() and broker.isdigit())


_NO_REPLICAS = " No effect here: each partition has one replica, on its one broker."
_TIERED = (" The remote tier is the topic's Delta table (docs/ARCHIVE.md): segment retention deletes only what the"
            " table holds, and a fetch below the log's start is answered from the table.")
_NO_TIERED = " No effect here: the table is written by the ingest job, never copied from segments."
_NO_RECOMPRESSION = (" Stored and described; the broker keeps each producer batch as written (it does not"
                     " recompress), so this has no effect here.")

# Bounds are Kafka's ConfigDef validators (TopicConfig / LogConfig.configDef); `server` is the
# broker-level synonym (ServerTopicConfigSynonyms); the docs are this project's words.
_SPECS: dict[str, PropertySpec] = {s.field: s for s in (
    PropertySpec("segment_bytes", "int", 14, INT_MAX, server="log.segment.bytes",  # a legacy v0 record overhead
                 doc="Size at which the active segment file is rolled."),
    PropertySpec("segment_ms", "int", 1, LONG_MAX, server="log.roll.ms",
                 doc="Time after which the active segment is rolled even if not full."),
    PropertySpec("segment_jitter_ms", "int", 0, LONG_MAX, server="log.roll.jitter.ms",
                 doc="Random jitter subtracted from segment.ms so partitions do not roll together."),
    PropertySpec("segment_index_bytes", "int", 4, INT_MAX, server="log.index.size.max.bytes",
                 doc="Size of each segment's offset and time index files; a full index rolls the segment."),
    PropertySpec("index_interval_bytes", "int", 0, INT_MAX, server="log.index.interval.bytes",
                 doc="Bytes of batches between two offset index entries."),
    PropertySpec("flush_messages", "int", 1, LONG_MAX, server="log.flush.interval.messages",
                 doc="Records appended between two fsyncs of the log."),
    PropertySpec("flush_ms", "int", 0, LONG_MAX, server="log.flush.interval.ms",
                 doc="Longest time appended records may wait for an fsync."),
    PropertySpec("retention_ms", "int", -1, LONG_MAX, server="log.retention.ms",
                 doc="Segments whose newest record is older than this are deleted by retention (-1: no limit)."),
    PropertySpec("retention_bytes", "int", None, LONG_MAX, server="log.retention.bytes",
                 doc="Oldest segments are deleted while the partition is larger than this (-1: no limit)."),
    PropertySpec("cleanup_policy", "list", choices=(CLEANUP_DELETE, CLEANUP_COMPACT), server="log.cleanup.policy",
                 empty_ok=True, doc="delete (retention), compact (log compaction), both, or empty: keep everything "
                                    "(retention only removes what DeleteRecords moved below the log start offset)."),
    PropertySpec("max_message_bytes", "int", 0, INT_MAX, server="message.max.bytes",
                 doc="Largest record batch a producer may append."),
    PropertySpec("message_timestamp_type", "str", choices=(CREATE_TIME, LOG_APPEND_TIME),
                 server="log.message.timestamp.type",
                 doc="CreateTime keeps the producer's timestamps; LogAppendTime stamps batches with the broker's "
                     "clock."),
    PropertySpec("min_cleanable_dirty_ratio", "float", 0, 1, server="log.cleaner.min.cleanable.ratio",
                 doc="Share of uncompacted bytes above which the compaction job cleans the partition."),
    PropertySpec("delete_retention_ms", "int", 0, LONG_MAX, server="log.cleaner.delete.retention.ms",
                 doc="How long compaction keeps tombstones and transaction markers."),
    PropertySpec("min_compaction_lag_ms", "int", 0, LONG_MAX, server="log.cleaner.min.compaction.lag.ms",
                 doc="Records younger than this are never compacted."),
    PropertySpec("max_compaction_lag_ms", "int", 1, LONG_MAX, server="log.cleaner.max.compaction.lag.ms",
                 doc="Records older than this make a partition eligible for compaction whatever its dirty ratio."),
    PropertySpec("file_delete_delay_ms", "int", 0, LONG_MAX, server="log.segment.delete.delay.ms",
                 doc="How long retired segment files (.deleted) stay on disk before they are removed."),
    PropertySpec("compression_type", "str", choices=COMPRESSION_TYPES, server="compression.type",
                 doc="The codec batches should be stored with; 'producer' keeps the producer's." + _NO_RECOMPRESSION),
    PropertySpec("compression_gzip_level", "int", 1, 9, allowed=(-1,), server="compression.gzip.level",
                 doc="gzip level for compression.type=gzip (-1: the codec's default)." + _NO_RECOMPRESSION),
    PropertySpec("compression_lz4_level", "int", 1, 17, server="compression.lz4.level",
                 doc="lz4 level for compression.type=lz4." + _NO_RECOMPRESSION),
    PropertySpec("compression_zstd_level", "int", -131072, 22, server="compression.zstd.level",
                 doc="zstd level for compression.type=zstd." + _NO_RECOMPRESSION),
    PropertySpec("preallocate", "bool", server="log.preallocate",
                 doc="Preallocate new segment files. No effect here: segment files grow as they are written."),
    PropertySpec("min_insync_replicas", "int", 1, INT_MAX, server="min.insync.replicas",
                 doc="Replicas that must hold an acks=all append. Each partition has one, so a value above 1 "
                     "refuses acks=all produce requests with NOT_ENOUGH_REPLICAS, as Kafka would."),
    PropertySpec("unclean_leader_election_enable", "bool", server="unclean.leader.election.enable",
                 doc="Let an out-of-sync replica become leader." + _NO_REPLICAS),
    PropertySpec("message_timestamp_before_max_ms", "int", 0, LONG_MAX, server="log.message.timestamp.before.max.ms",
                 doc="With CreateTime, a record whose timestamp is further than this in the past is refused "
                     "(INVALID_TIMESTAMP)."),
    PropertySpec("message_timestamp_after_max_ms", "int", 0, LONG_MAX, server="log.message.timestamp.after.max.ms",
                 doc="With CreateTime, a record whose timestamp is further than this in the future is refused "
                     "(INVALID_TIMESTAMP)."),
    PropertySpec("leader_replication_throttled_replicas", "list", empty_ok=True, item=_throttled_replica,
                 doc="Replicas whose replication the leader throttles (partition:broker pairs or *)." + _NO_REPLICAS),
    PropertySpec("follower_replication_throttled_replicas", "list", empty_ok=True, item=_throttled_replica,
                 doc="Replicas whose replication followers throttle (partition:broker pairs or *)." + _NO_REPLICAS),
    PropertySpec("remote_storage_enable", "bool",
                 doc="Keep only recent segments locally, the history in the remote tier." + _TIERED),
    PropertySpec("local_retention_ms", "int", -2, LONG_MAX, server="log.local.retention.ms",
                 doc="With remote storage on: how long segments stay in the local log (-2: retention.ms)." + _TIERED),
    PropertySpec("local_retention_bytes", "int", -2, LONG_MAX, server="log.local.retention.bytes",
                 doc="With remote storage on: how large the local log may grow (-2: retention.bytes)." + _TIERED),
    PropertySpec("remote_log_copy_disable", "bool",
                 doc="Stop copying segments to remote storage, keeping what is there." + _NO_TIERED),
    PropertySpec("remote_log_delete_on_disable", "bool",
                 doc="Delete the remote copy when remote storage is turned off." + _NO_TIERED),
)}
_BY_PROPERTY: dict[str, PropertySpec] = {s.name: s for s in _SPECS.values()}
_BY_SERVER: dict[str, str] = {s.server: s.name for s in _SPECS.values() if s.server}
assert set(_SPECS) == {f.name for f in dataclasses.fields(LogConfig)}, "every LogConfig field needs a spec"
