"""Segment retention (UnifiedLog.deleteOldSegments / deletableSegments), as a pure plan.

Kafka runs up to three passes, each deleting a prefix of the log and then moving the log start
offset to the first remaining segment's base:

1. log start offset breach (every policy): a segment whose NEXT segment starts at or below the
   log start offset holds nothing readable;
2. retention.bytes (policy delete): when size >= retention.bytes, with diff = size -
   retention.bytes, delete oldest segments while diff - segment size >= 0 (diff shrinking by each
   one), so the log never goes below the limit and only whole segments go;
3. retention.ms (policy delete): now - segment.largestTimestamp > retention.ms.

Each pass walks from the oldest segment and stops at the first segment that fails; a segment is
deletable only if its upper bound (next base, or the log end offset) <= high watermark, and never
if it is the last segment and empty. When every segment is deletable Kafka rolls a new empty
active segment first: the plan says `roll_required` (only the broker may roll) and the new log
start offset is then the log end offset.

`protect_offsets` (topiclake's --protect-groups) adds one bound: a segment is deleted only if
its upper bound <= the slowest protected group's committed offset; what Kafka would have
deleted beyond that is reported as held back, with the groups holding it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Mapping

from .config import LogConfig
from .log_summary import LogSummary, SegmentSummary


class DeletionReason(enum.Enum):
    LOG_START_OFFSET_BREACH = "log start offset breach"
    RETENTION_SIZE_BREACH = "retention.bytes breach"
    RETENTION_MS_BREACH = "retention.ms breach"


@dataclass(frozen=True, slots=True)
class SegmentDeletion:
    base_offset: int
    upper_bound: int  # exclusive end offset of the segment
    size: int
    reason: DeletionReason


@dataclass(frozen=True, slots=True)
class RetentionPlan:
    topic: str
    partition: int
    deletions: tuple[SegmentDeletion, ...]  # oldest first
    log_start_offset: int  # the new log start offset once the deletions are done
    roll_required: bool  # every segment goes: the active one must be rolled first
    held_back: tuple[SegmentDeletion, ...]  # deletable by Kafka's rules, kept for protected groups
    protect_offset: int | None
    blocking_groups: tuple[str, ...]  # protected groups whose committed offset holds segments back

    @property
    def base_offsets(self) -> tuple[int, ...]:
        return tuple(d.base_offset for d in self.deletions)


# A pass's predicate: (segment, next segment or None) -> deletable?
_Predicate = Callable[[SegmentSummary, "SegmentSummary | None"], bool]


@dataclass(frozen=True, slots=True)
class _State:
    segments: tuple[SegmentSummary, ...]
    log_start_offset: int
    log_end_offset: int
    rolled: bool = False

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)


def _deletable_prefix(state: _State, bound: int, predicate: _Predicate) -> int:
    """How many oldest segments pass (Kafka's deletableSegments); `bound` = min(HW, protection)."""
    count = 0
    for i, segment in enumerate(state.segments):
        nxt = state.segments[i + 1] if i + 1 < len(state.segments) else None
        upper = nxt.base_offset if nxt is not None else state.log_end_offset
        last_and_empty = nxt is None and segment.size == 0
        if not (bound >= upper and predicate(segment, nxt) and not last_and_empty):
            break
        count += 1
    return count


def _run_pass(state: _State, bound: int, predicate: _Predicate, reason: DeletionReason,
              out: list[SegmentDeletion]) -> _State:
    count = _deletable_prefix(state, bound, predicate)
    if count == 0:
        return state
    segments = state.segments
    for i in range(count):
        upper = segments[i + 1].base_offset if i + 1 < len(segments) else state.log_end_offset
        out.append(SegmentDeletion(segments[i].base_offset, upper, segments[i].size, reason))
    remaining = segments[count:]
    rolled = state.rolled
    if not remaining:
        # deleteSegments: a log keeps at least one segment, so roll() adds an empty one at the LEO
        remaining = (SegmentSummary(state.log_end_offset, 0),)
        rolled = True
    return _State(remaining, max(state.log_start_offset, remaining[0].base_offset), state.log_end_offset, rolled)


def _passes(log: LogSummary, config: LogConfig, now_ms: int, bound: int) -> tuple[list[SegmentDeletion], _State]:
    state = _State(log.segments, log.log_start_offset, log.log_end_offset)
    out: list[SegmentDeletion] = []

    def start_offset_breach(segment: SegmentSummary, nxt: SegmentSummary | None) -> bool:
        return nxt is not None and nxt.base_offset <= state.log_start_offset

    state = _run_pass(state, bound, start_offset_breach, DeletionReason.LOG_START_OFFSET_BREACH, out)
    if not config.delete:
        return out, state
    if config.retention_bytes >= 0 and state.size >= config.retention_bytes:
        diff = state.size - config.retention_bytes

        def size_breach(segment: SegmentSummary, nxt: SegmentSummary | None) -> bool:
            nonlocal diff
            if diff - segment.size >= 0:
                diff -= segment.size
                return True
            return False

        state = _run_pass(state, bound, size_breach, DeletionReason.RETENTION_SIZE_BREACH, out)
    if config.retention_ms >= 0:
        def time_breach(segment: SegmentSummary, nxt: SegmentSummary | None) -> bool:
            return now_ms - segment.largest_timestamp > config.retention_ms

        state = _run_pass(state, bound, time_breach, DeletionReason.RETENTION_MS_BREACH, out)
    return out, state


def deletable_segments(log: LogSummary, config: LogConfig, now_ms: int, *,
                       protect_offsets: Mapping[str, int] | int | None = None) -> RetentionPlan:
    """Which segments retention deletes now, oldest first, and the resulting log start offset.

    `protect_offsets`: group -> committed offset (or one offset): nothing at or above the
    smallest of them may be deleted, i.e. a segment goes only if its upper bound <= that offset.
    """
    if isinstance(protect_offsets, Mapping):
        groups = dict(protect_offsets)
        protect = min(groups.values()) if groups else None
    else:
        groups, protect = {}, protect_offsets
    hw = log.high_watermark
    kafka, kafka_state = _passes(log, config, now_ms, hw)
    if protect is None:
        deletions, state = kafka, kafka_state
    else:
        deletions, state = _passes(log, config, now_ms, min(hw, protect))
    kept = {d.base_offset for d in deletions}
    held_back = tuple(d for d in kafka if d.base_offset not in kept)
    blocking: tuple[str, ...] = ()
    if held_back:
        needed = held_back[0].upper_bound
        blocking = tuple(sorted(g for g, off in groups.items() if off < needed))
    return RetentionPlan(topic=log.topic, partition=log.partition, deletions=tuple(deletions),
                         log_start_offset=state.log_start_offset, roll_required=state.rolled,
                         held_back=held_back, protect_offset=protect, blocking_groups=blocking)
