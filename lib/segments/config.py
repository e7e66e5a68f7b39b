"""Per-topic log configuration with Kafka's property names, defaults and validation.

Kafka's topic configs (`TopicConfig` / `LogConfig`) are strings like `segment.bytes=1073741824`.
LogConfig holds them typed, one field per property (the name with dots turned into
underscores); `from_properties` / `to_properties` convert from and to Kafka's names, so the
broker's CreateTopics/DescribeConfigs/AlterConfigs and the topic JSON files speak the same
language. Unknown names and bad values raise InvalidConfigError naming the property.
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
    preallocate: bool = False
    min_insync_replicas: int = 1

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _SPECS[f.name].check(getattr(self, f.name))
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfigError(
                f"min.compaction.lag.ms ({self.min_compaction_lag_ms}) must not exceed "
                f"max.compaction.lag.ms ({self.max_compaction_lag_ms})")

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


# ---------------------------------------------------------------------------------------------
# One spec per property: its Kafka name, how to parse, format and check a value.

@dataclass(frozen=True, slots=True)
class _Spec:
    field: str
    kind: str  # "int", "float", "bool", "str", "list"
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] | None = None

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
            if self.low is not None and value < self.low:
                raise InvalidConfigError(f"{self.name}={value} is below the minimum {self.low:g}")
            if self.high is not None and value > self.high:
                raise InvalidConfigError(f"{self.name}={value} is above the maximum {self.high:g}")
        values = value if self.kind == "list" else (value,) if self.kind == "str" else ()
        if self.choices is not None:
            for item in values:
                if item not in self.choices:
                    raise InvalidConfigError(
                        f"invalid value {item!r} for {self.name}: use one of {', '.join(self.choices)}")
        if self.kind == "list" and not value:
            raise InvalidConfigError(f"{self.name} must not be empty")


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

# Bounds are Kafka's ConfigDef validators (TopicConfig / LogConfig.configDef).
_SPECS: dict[str, _Spec] = {s.field: s for s in (
    _Spec("segment_bytes", "int", 14, INT_MAX),  # at least a legacy v0 record overhead
    _Spec("segment_ms", "int", 1, LONG_MAX),
    _Spec("segment_jitter_ms", "int", 0, LONG_MAX),
    _Spec("segment_index_bytes", "int", 4, INT_MAX),
    _Spec("index_interval_bytes", "int", 0, INT_MAX),
    _Spec("flush_messages", "int", 1, LONG_MAX),
    _Spec("flush_ms", "int", 0, LONG_MAX),
    _Spec("retention_ms", "int", -1, LONG_MAX),
    _Spec("retention_bytes", "int", None, LONG_MAX),
    _Spec("cleanup_policy", "list", choices=(CLEANUP_DELETE, CLEANUP_COMPACT)),
    _Spec("max_message_bytes", "int", 0, INT_MAX),
    _Spec("message_timestamp_type", "str", choices=(CREATE_TIME, LOG_APPEND_TIME)),
    _Spec("min_cleanable_dirty_ratio", "float", 0, 1),
    _Spec("delete_retention_ms", "int", 0, LONG_MAX),
    _Spec("min_compaction_lag_ms", "int", 0, LONG_MAX),
    _Spec("max_compaction_lag_ms", "int", 1, LONG_MAX),
    _Spec("file_delete_delay_ms", "int", 0, LONG_MAX),
    _Spec("compression_type", "str", choices=COMPRESSION_TYPES),
    _Spec("preallocate", "bool"),
    _Spec("min_insync_replicas", "int", 1, INT_MAX),
)}
_BY_PROPERTY: dict[str, _Spec] = {s.name: s for s in _SPECS.values()}
assert set(_SPECS) == {f.name for f in dataclasses.fields(LogConfig)}, "every LogConfig field needs a spec"
