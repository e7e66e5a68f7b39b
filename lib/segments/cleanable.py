"""Which part of a log the cleaner may clean, and which log to clean first (LogCleanerManager).

- `cleanable_offsets`: firstDirtyOffset (the cleaner checkpoint, reset to the log start offset when
  it is missing, below the log start offset or above the log end offset) and the first
  uncleanable offset = min(last stable offset, active segment base, base of the first dirty
  non-active segment younger than min.compaction.lag.ms).
- `log_to_clean`: Kafka's LogToClean: the uncleanable offset rounded down to its segment's base
  (only whole segments are cleaned), clean/dirty bytes in segment sizes, the dirty ratio and
  whether max.compaction.lag.ms forces a cleaning now.
- `rank_cleanable` / `filthiest`: grabFilthiestCompactedLog's filter and order: compacted,
  non-empty, and (ratio > min.cleanable.dirty.ratio, strictly, or compaction overdue with dirty
  bytes); the highest ratio first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .config import LogConfig
from .log_summary import LogSummary


@dataclass(frozen=True, slots=True)
class OffsetsToClean:
    first_dirty_offset: int
    first_uncleanable_dirty_offset: int  # not yet rounded to a segment boundary
    force_update_checkpoint: bool  # the checkpoint was invalid and was reset


def cleanable_offsets(log: LogSummary, checkpoint: int | None, config: LogConfig, now_ms: int) -> OffsetsToClean:
    start = log.log_start_offset
    dirty = start if checkpoint is None else checkpoint
    force = False
    # An invalid checkpoint (truncated or corrupt log) means the whole log is treated as dirty.
    if dirty < start or dirty > log.log_end_offset:
        dirty, force = start, True
    bounds = [log.last_stable_offset, log.active.base_offset]
    lag = max(config.min_compaction_lag_ms, 0)
    if lag > 0:
        for segment in log.non_active_from(dirty):
            # Too young to compact: this segment and everything after it wait.
            if segment.largest_timestamp > now_ms - lag:
                bounds.append(segment.base_offset)
                break
    return OffsetsToClean(dirty, max(dirty, min(bounds)), force)


def max_compaction_delay(log: LogSummary, first_dirty_offset: int, config: LogConfig, now_ms: int) -> int:
    """How long past max.compaction.lag.ms the oldest dirty segment is (0 when not overdue).
    Segments' first batch timestamps <= 0 (none, or unknown) do not count."""
    timestamps = [s.first_batch_timestamp for s in log.non_active_from(first_dirty_offset)
                  if s.first_batch_timestamp > 0]
    if not timestamps:
        return 0
    clean_until = now_ms - max(config.max_compaction_lag_ms, 0)
    earliest = min(timestamps)
    return clean_until - earliest if earliest < clean_until else 0


def calculate_cleanable_bytes(log: LogSummary, first_dirty_offset: int, uncleanable_offset: int) -> tuple[int, int]:
    """(first uncleanable offset rounded down to its segment's base, dirty bytes before it)."""
    candidates = log.non_active_from(uncleanable_offset)
    first_uncleanable = (candidates[0] if candidates else log.active).base_offset
    dirty = log.segments_in(min(first_dirty_offset, first_uncleanable), first_uncleanable)
    return first_uncleanable, sum(s.size for s in dirty)


@dataclass(frozen=True, slots=True)
class LogToClean:
    """One partition's cleaning candidate (Kafka's LogToClean plus the config values it is judged by)."""

    topic: str
    partition: int
    first_dirty_offset: int
    first_uncleanable_offset: int  # rounded down to a segment base: the round's upper bound
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool
    compaction_delay_ms: int
    force_update_checkpoint: bool
    compact: bool
    min_cleanable_dirty_ratio: float

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def eligible(self) -> bool:
        if not self.compact or self.total_bytes <= 0:
            return False
        return ((self.need_compaction_now and self.cleanable_bytes > 0)
                or self.cleanable_ratio > self.min_cleanable_dirty_ratio)


def log_to_clean(log: LogSummary, checkpoint: int | None, config: LogConfig, now_ms: int) -> LogToClean:
    offsets = cleanable_offsets(log, checkpoint, config, now_ms)
    delay = max_compaction_delay(log, offsets.first_dirty_offset, config, now_ms)
    first_uncleanable, cleanable = calculate_cleanable_bytes(
        log, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset)
    # logSegments(-1, firstDirty): everything before the dirty part (a segment holding the
    # checkpoint mid-way counts as both clean and dirty, as in Kafka).
    clean = sum(s.size for s in log.segments_in(-1, offsets.first_dirty_offset))
    return LogToClean(
        topic=log.topic, partition=log.partition, first_dirty_offset=offsets.first_dirty_offset,
        first_uncleanable_offset=first_uncleanable, clean_bytes=clean, cleanable_bytes=cleanable,
        need_compaction_now=delay > 0, compaction_delay_ms=delay,
        force_update_checkpoint=offsets.force_update_checkpoint, compact=config.compact,
        min_cleanable_dirty_ratio=config.min_cleanable_dirty_ratio)


def rank_cleanable(candidates: Iterable[LogToClean]) -> list[LogToClean]:
    """The eligible candidates, filthiest (highest dirty ratio) first; ties keep input order."""
    return sorted((c for c in candidates if c.eligible), key=lambda c: -c.cleanable_ratio)


def filthiest(candidates: Iterable[LogToClean]) -> LogToClean | None:
    ranked = rank_cleanable(candidates)
    return ranked[0] if ranked else None
