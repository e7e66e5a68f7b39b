"""What log maintenance (cleaner, retention) needs to know about a partition, as plain values.

The cleaner and retention are pure functions: a Spark driver or a test describes a partition
with a `LogSummary` (segment base offsets, sizes, timestamps and the log's offsets) and, for
the rewrite, hands over the segment bytes as `SegmentData`. Nothing here touches files.

Segment selection follows Kafka's `LogSegments.values(from, to)`: the segment containing `from`
(its floor; the first segment when `from` is below all of them) up to, excluding, the first
segment whose base offset is >= `to`.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Sequence

from .batch import NO_TIMESTAMP
from .errors import TopiclakeError


class InvalidLogStateError(TopiclakeError, ValueError):
    """A LogSummary / segment list that cannot describe a real log (unsorted, offsets out of order)."""


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    """One segment as the cleaner's and retention's rules see it.

    `largest_timestamp` is LogSegment.largestTimestamp (max batch timestamp, or the file's mtime
    when the segment has no timestamped batch); `first_batch_timestamp` is the first batch's
    maxTimestamp (LogSegment.getFirstBatchTimestamp), used by max.compaction.lag.ms. Index sizes
    are the trimmed .index/.timeindex file sizes, checked against segment.index.bytes when the
    cleaner groups segments (0 when unknown: then only the log size and offset span count).
    """

    base_offset: int
    size: int
    largest_timestamp: int = NO_TIMESTAMP
    first_batch_timestamp: int = NO_TIMESTAMP
    offset_index_bytes: int = 0
    time_index_bytes: int = 0
    last_modified_ms: int | None = None


@dataclass(frozen=True, slots=True)
class LogSummary:
    """A partition's segments (oldest first; the last one is the active segment) and offsets.

    `high_watermark` defaults to the log end offset (a single-replica log) and
    `last_stable_offset` to the high watermark (no open transaction).
    """

    topic: str
    partition: int
    segments: tuple[SegmentSummary, ...]
    log_start_offset: int
    log_end_offset: int
    high_watermark: int | None = None
    last_stable_offset: int | None = None
    _bases: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        segments = tuple(self.segments)
        object.__setattr__(self, "segments", segments)
        if not segments:
            raise self.error("a log has at least one segment (the active one)")
        bases = tuple(s.base_offset for s in segments)
        if any(b <= a for a, b in zip(bases, bases[1:])):
            raise self.error(f"segment base offsets are not strictly increasing: {list(bases)}")
        object.__setattr__(self, "_bases", bases)
        if self.high_watermark is None:
            object.__setattr__(self, "high_watermark", self.log_end_offset)
        if self.last_stable_offset is None:
            object.__setattr__(self, "last_stable_offset", self.high_watermark)
        if not self.last_stable_offset <= self.high_watermark <= self.log_end_offset:
            raise self.error(f"offsets out of order: last stable offset {self.last_stable_offset}, "
                             f"high watermark {self.high_watermark}, log end offset {self.log_end_offset}")
        if self.log_end_offset < bases[-1]:
            raise self.error(f"log end offset {self.log_end_offset} is below the active segment {bases[-1]}")

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def error(self, reason: str) -> InvalidLogStateError:
        return InvalidLogStateError(f"{self.topic}-{self.partition}: {reason}")

    @property
    def active(self) -> SegmentSummary:
        return self.segments[-1]

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    def upper_bound(self, index: int) -> int:
        """The exclusive end offset of segment `index`: the next base offset, or the log end offset."""
        return self.segments[index + 1].base_offset if index + 1 < len(self.segments) else self.log_end_offset

    def floor_index(self, offset: int) -> int | None:
        """Index of the segment containing `offset` (largest base <= offset), None when below all."""
        i = bisect.bisect_right(self._bases, offset) - 1
        return i if i >= 0 else None

    def segments_in(self, start: int, end: int) -> tuple[SegmentSummary, ...]:
        """Kafka's logSegments(from, to): floor(from) .. segments with base < to."""
        return tuple(self.segments[i] for i in self.indexes_in(start, end))

    def indexes_in(self, start: int, end: int) -> range:
        if start == end:
            return range(0)
        if end < start:
            raise self.error(f"invalid segment range [{start}, {end})")
        first = self.floor_index(start)
        stop = bisect.bisect_left(self._bases, end)
        return range(0 if first is None else first, stop)

    def non_active_from(self, offset: int) -> tuple[SegmentSummary, ...]:
        """Kafka's nonActiveLogSegmentsFrom: segments from the one containing `offset`, active excluded."""
        if offset > self.active.base_offset:
            return ()
        return self.segments_in(offset, self.active.base_offset)


@dataclass(frozen=True, slots=True)
class SegmentData:
    """The bytes of one segment's .log file (whole batches), for the cleaner's rewrite."""

    base_offset: int
    data: bytes | bytearray | memoryview = field(repr=False)
    offset_index_bytes: int = 0
    time_index_bytes: int = 0
    last_modified_ms: int | None = None

    @property
    def size(self) -> int:
        return len(self.data)


def check_sorted(topic: str, partition: int, segments: Sequence[SegmentData | SegmentSummary]) -> None:
    bases = [s.base_offset for s in segments]
    if any(b <= a for a, b in zip(bases, bases[1:])):
        raise InvalidLogStateError(f"{topic}-{partition}: segment base offsets are not strictly increasing: {bases}")
