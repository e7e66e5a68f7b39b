"""One share-partition (a group's view of one topic partition): the in-flight records between
the share-partition start offset (SPSO) and end offset (SPEO), each AVAILABLE, ACQUIRED (by one
member, until its lock expires), ACKNOWLEDGED or ARCHIVED, with its delivery count.

Pure and deterministic (Kafka's SharePartition, simplified to one broker): no I/O, every call
takes `now_ms`; what the log holds comes in as batch extents. The rules:

- Acquire: AVAILABLE in-flight records first (the lowest offsets), then records past SPEO, whole
  batches at a time (a fetch may exceed `max_records` to finish a batch, never the in-flight
  window of `max_locks` records). Each acquisition counts a delivery and takes a lock until
  `now + lock_ms`. Control batches and, read_committed, aborted transactions' batches are never
  delivered: their offsets are archived as they are reached.
- Acknowledge (member, ranges, types): every offset must be ACQUIRED by that member, or the
  whole acknowledgement of the partition fails with INVALID_RECORD_STATE and changes nothing.
  ACCEPT -> ACKNOWLEDGED, REJECT and GAP -> ARCHIVED, RELEASE -> AVAILABLE, RENEW keeps the
  record and restarts its lock.
- A released record (RELEASE, an expired lock, its member gone) that has been delivered
  `delivery_limit` times is ARCHIVED instead of AVAILABLE.
- SPSO moves past every ACKNOWLEDGED/ARCHIVED record at the start of the window; records below
  the log start offset (retention, DeleteRecords) are gone and SPSO moves to it.

`changes()` hands out what changed since the last call, as Kafka's persisted state batches
(an ACQUIRED record is persisted as AVAILABLE with its count): the manager writes them to
`__share_group_state` before it answers, and reloads from there if the write fails.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Iterable

from .persisted import PersistedState, merge_adjacent
from .state_records import DeliveryState, StateBatch


class RecordState(enum.IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(enum.IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


_TERMINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class InvalidRecordState(Exception):
    """An acknowledgement of records this member does not hold (Kafka's INVALID_RECORD_STATE)."""


class InvalidAcknowledgement(Exception):
    """An acknowledgement that is malformed (Kafka's INVALID_REQUEST)."""


@dataclass(slots=True)
class InFlight:
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    deadline: int = 0  # lock expiry (ms) while ACQUIRED


@dataclass(frozen=True, slots=True)
class BatchExtent:
    """What acquisition needs to know of one log batch."""

    base_offset: int
    last_offset: int
    deliverable: bool = True  # False: a control batch, or an aborted transaction's (read_committed)


@dataclass(frozen=True, slots=True)
class Acquired:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class AckRange:
    first_offset: int
    last_offset: int
    types: tuple[int, ...]  # one type for the whole range, or one per offset


@dataclass(eq=False)
class SharePartition:
    start_offset: int
    end_offset: int  # the last in-flight offset; start_offset - 1 when there is none
    records: dict[int, InFlight] = field(default_factory=dict)
    state_epoch: int = 0
    _changed: set[int] = field(default_factory=set)
    _start_moved: bool = False
    _deadline_hint: int | None = None  # at most the earliest lock expiry (a timer polls it cheaply)
    acquisitions: int = 0  # records acquired (deliveries) since this broker loaded the state: a metric

    @classmethod
    def from_persisted(cls, state: PersistedState) -> "SharePartition":
        part = cls(state.start_offset, state.end_offset, state_epoch=state.state_epoch)
        for b in state.batches:
            rs = RecordState(b.delivery_state)
            for off in range(b.first_offset, b.last_offset + 1):
                part.records[off] = InFlight(rs, b.delivery_count)
        for off in range(part.start_offset, part.end_offset + 1):
            part.records.setdefault(off, InFlight(RecordState.AVAILABLE, 0))
        part._advance()
        part._changed.clear()
        part._start_moved = False
        return part

    # ===================================================================== queries
    @property
    def window(self) -> int:
        return self.end_offset - self.start_offset + 1

    def next_fetch_offset(self) -> int:
        """Where acquisition reads the log from: the lowest AVAILABLE in-flight offset, else SPEO + 1."""
        for off in range(self.start_offset, self.end_offset + 1):
            if self.records[off].state is RecordState.AVAILABLE:
                return off
        return self.end_offset + 1

    def can_acquire(self, max_locks: int) -> bool:
        return self.next_fetch_offset() <= self.end_offset or self.window < max_locks

    def acquired_by(self, member_id: str) -> list[int]:
        return [off for off, r in self.records.items() if r.state is RecordState.ACQUIRED and r.member_id == member_id]

    def any_acquired(self) -> bool:
        return any(r.state is RecordState.ACQUIRED for r in self.records.values())

    def next_deadline(self) -> int | None:
        """No lock expires before this (None: no record is acquired); it may be early, never late."""
        return self._deadline_hint

    def acquired_count(self) -> int:
        return sum(1 for r in self.records.values() if r.state is RecordState.ACQUIRED)

    def delivery_complete_count(self) -> int:
        return sum(1 for r in self.records.values() if r.state in _TERMINAL)

    # ================================================================ transitions
    def acquire(self, member_id: str, batches: Iterable[BatchExtent], *, max_records: int, max_locks: int,
                lock_ms: int, now_ms: int, strict: bool = False) -> list[Acquired]:
        """Acquire from `batches` (log order, from `next_fetch_offset()`) for `member_id`;
        `strict`: never more than `max_records`, even in the middle of a batch."""
        deadline = now_ms + lock_ms
        taken: list[tuple[int, int]] = []  # (offset, delivery count)
        for batch in batches:
            if len(taken) >= max_records:
                break
            for off in range(max(batch.base_offset, self.start_offset), batch.last_offset + 1):
                if strict and len(taken) >= max_records:
                    break
                if off > self.end_offset:
                    if off > self.end_offset + 1 and not self._skip_hole(off, max_locks):
                        break
                    if self.window >= max_locks:
                        break
                    self.records[off] = InFlight(RecordState.AVAILABLE, 0)
                    self.end_offset = off
                record = self.records[off]
                if record.state is not RecordState.AVAILABLE:
                    continue
                if not batch.deliverable:
                    record.state = RecordState.ARCHIVED
                    self._changed.add(off)
                    continue
                record.state, record.member_id, record.deadline = RecordState.ACQUIRED, member_id, deadline
                record.delivery_count += 1
                taken.append((off, record.delivery_count))
                if self._deadline_hint is None or deadline < self._deadline_hint:
                    self._deadline_hint = deadline
            else:
                continue
            break  # the in-flight window is full
        self._advance()
        self.acquisitions += len(taken)
        return _ranges(taken)

    def acknowledge(self, member_id: str, ranges: Iterable[AckRange], *, delivery_limit: int,
                    lock_ms: int, now_ms: int) -> None:
        """Apply one member's acknowledgements of this partition, all or nothing."""
        plan: list[tuple[int, int]] = []
        for r in ranges:
            if r.last_offset < r.first_offset or not r.types:
                raise InvalidAcknowledgement(f"acknowledgement batch [{r.first_offset}, {r.last_offset}] is invalid")
            if r.first_offset < self.start_offset or r.last_offset > self.end_offset:
                raise InvalidRecordState(f"offsets [{r.first_offset}, {r.last_offset}] are not all in flight "
                                         f"([{self.start_offset}, {self.end_offset}])")
            span = r.last_offset - r.first_offset + 1
            if len(r.types) not in (1, span):
                raise InvalidAcknowledgement(f"acknowledgement batch [{r.first_offset}, {r.last_offset}] has "
                                     f"{len(r.types)} types for {span} offsets")
            for i, off in enumerate(range(r.first_offset, r.last_offset + 1)):
                kind = r.types[0] if len(r.types) == 1 else r.types[i]
                if kind not in AckType._value2member_map_:
                    raise InvalidAcknowledgement(f"unknown acknowledge type {kind}")
                record = self.records.get(off) if self.start_offset <= off <= self.end_offset else None
                if record is None or record.state is not RecordState.ACQUIRED or record.member_id != member_id:
                    raise InvalidRecordState(
                        f"offset {off} is not acquired by member {member_id}"
                        + ("" if record is None else f" (it is {record.state.name.lower()})"))
                plan.append((off, kind))
        for off, kind in plan:
            record = self.records[off]
            if kind == AckType.ACCEPT:
                self._finish(off, RecordState.ACKNOWLEDGED)
            elif kind in (AckType.REJECT, AckType.GAP):
                self._finish(off, RecordState.ARCHIVED)
            elif kind == AckType.RELEASE:
                self._release(off, delivery_limit)
            else:  # RENEW: a later expiry, so the hint stays a lower bound
                record.deadline = now_ms + lock_ms
        self._advance()

    def release_member(self, member_id: str, *, delivery_limit: int) -> int:
        """Every record `member_id` holds goes back (its session ended or it left the group)."""
        held = self.acquired_by(member_id)
        for off in held:
            self._release(off, delivery_limit)
        self._advance()
        return len(held)

    def expire_locks(self, now_ms: int, *, delivery_limit: int) -> int:
        if self._deadline_hint is None or self._deadline_hint > now_ms:
            return 0
        held = [(off, r) for off, r in self.records.items() if r.state is RecordState.ACQUIRED]
        expired = [off for off, r in held if r.deadline <= now_ms]
        for off in expired:
            self._release(off, delivery_limit)
        self._deadline_hint = min((r.deadline for _off, r in held if r.deadline > now_ms), default=None)
        self._advance()
        return len(expired)

    def move_to_log_start(self, log_start_offset: int) -> None:
        """Records below the log start offset no longer exist: the window starts there."""
        if log_start_offset <= self.start_offset:
            return
        for off in range(self.start_offset, min(log_start_offset, self.end_offset + 1)):
            self.records.pop(off, None)
        self.start_offset = log_start_offset
        self.end_offset = max(self.end_offset, log_start_offset - 1)
        self._start_moved = True
        self._changed = {o for o in self._changed if o >= log_start_offset}
        self._advance()

    # ================================================================ persistence
    def changes(self) -> tuple[int | None, tuple[StateBatch, ...]] | None:
        """(new start offset or None, changed batches) since the last call; None if nothing changed."""
        if not self._changed and not self._start_moved:
            return None
        batches = merge_adjacent([self._batch(off, off) for off in sorted(self._changed)
                                  if self.start_offset <= off <= self.end_offset])
        start = self.start_offset if self._start_moved else None
        self._changed.clear()
        self._start_moved = False
        return start, batches

    def snapshot(self) -> tuple[StateBatch, ...]:
        return merge_adjacent([self._batch(off, off) for off in range(self.start_offset, self.end_offset + 1)])

    def _batch(self, first: int, last: int) -> StateBatch:
        r = self.records[first]
        state = (DeliveryState.AVAILABLE if r.state in (RecordState.AVAILABLE, RecordState.ACQUIRED)
                 else int(r.state))
        return StateBatch(first, last, state, r.delivery_count)

    # ==================================================================== helpers
    def _skip_hole(self, off: int, max_locks: int) -> bool:
        """Offsets SPEO+1 .. off-1 are not in the log (compacted away): nothing to deliver. With
        nothing in flight the window jumps over them; otherwise they are archived if the window
        has room for them (False: it has not, try again once it drains)."""
        missing = off - self.end_offset - 1
        if self.window == 0:
            self.start_offset, self.end_offset, self._start_moved = off, off - 1, True
            return True
        if self.window + missing >= max_locks:
            return False
        for hole in range(self.end_offset + 1, off):
            self.records[hole] = InFlight(RecordState.ARCHIVED, 0)
            self._changed.add(hole)
        self.end_offset = off - 1
        return True

    def _finish(self, off: int, state: RecordState) -> None:
        record = self.records[off]
        record.state, record.member_id, record.deadline = state, None, 0
        self._changed.add(off)

    def _release(self, off: int, delivery_limit: int) -> None:
        record = self.records[off]
        if record.delivery_count >= delivery_limit:
            self._finish(off, RecordState.ARCHIVED)
        else:
            self._finish(off, RecordState.AVAILABLE)

    def _advance(self) -> None:
        while self.start_offset <= self.end_offset and self.records[self.start_offset].state in _TERMINAL:
            del self.records[self.start_offset]
            self._changed.discard(self.start_offset)
            self.start_offset += 1
            self._start_moved = True


def _ranges(taken: list[tuple[int, int]]) -> list[Acquired]:
    """Contiguous offsets of equal delivery count, as ShareFetch's AcquiredRecords."""
    out: list[Acquired] = []
    for off, count in taken:
        last = out[-1] if out else None
        if last is not None and last.last_offset + 1 == off and last.delivery_count == count:
            out[-1] = Acquired(last.first_offset, off, count)
        else:
            out.append(Acquired(off, off, count))
    return out
