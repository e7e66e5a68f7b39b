"""A share-partition's durable state as `__share_group_state` describes it, and the one replay
that builds it from ShareSnapshot/ShareUpdate records (Kafka's ShareCoordinatorShard.replay and
PersisterStateBatchCombiner): a snapshot replaces the state, an update lays its batches over it
(later wins per offset) and may move the start offset; batches below the start offset are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .state_records import NO_OFFSET, UNKNOWN_COUNT, ShareSnapshotValue, ShareUpdateValue, StateBatch

UNINITIALIZED = -1  # a start offset not resolved yet (share.auto.offset.reset decides at first fetch)


@dataclass(frozen=True, slots=True)
class PersistedState:
    state_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...] = ()
    leader_epoch: int = 0
    snapshot_epoch: int = 0
    create_timestamp: int = -1
    write_timestamp: int = -1
    delivery_complete_count: int = UNKNOWN_COUNT

    @property
    def end_offset(self) -> int:
        """The last offset the state says anything about (start - 1 when it holds no batch)."""
        return self.batches[-1].last_offset if self.batches else self.start_offset - 1

    def to_snapshot(self, snapshot_epoch: int, now_ms: int) -> ShareSnapshotValue:
        return ShareSnapshotValue(snapshot_epoch, self.state_epoch, self.leader_epoch, self.start_offset,
                                  self.create_timestamp if self.create_timestamp >= 0 else now_ms, now_ms,
                                  self.batches, self.delivery_complete_count)


def from_snapshot(value: ShareSnapshotValue) -> PersistedState:
    start = value.start_offset
    return PersistedState(value.state_epoch, start, prune(value.state_batches, start), value.leader_epoch,
                          value.snapshot_epoch, value.create_timestamp, value.write_timestamp,
                          value.delivery_complete_count)


def apply_update(state: PersistedState | None, value: ShareUpdateValue) -> PersistedState:
    if state is None:  # an update with no snapshot before it (Kafka takes it as the state)
        state = PersistedState(0, value.start_offset)
    start = value.start_offset if value.start_offset != NO_OFFSET else state.start_offset
    return replace(state, start_offset=start, batches=prune(overlay(state.batches, value.state_batches), start),
                   leader_epoch=max(state.leader_epoch, value.leader_epoch),
                   delivery_complete_count=value.delivery_complete_count)


def overlay(base: tuple[StateBatch, ...], newer: tuple[StateBatch, ...]) -> tuple[StateBatch, ...]:
    """`newer` laid over `base`: where they overlap, `newer` wins. Sorted, non-overlapping,
    adjacent batches of equal state and count merged."""
    pieces: list[StateBatch] = []
    cuts = sorted((b.first_offset, b.last_offset) for b in newer)
    for b in base:
        lo = b.first_offset
        for first, last in cuts:
            if last < lo or first > b.last_offset:
                continue
            if first > lo:
                pieces.append(replace(b, first_offset=lo, last_offset=first - 1))
            lo = max(lo, last + 1)
            if lo > b.last_offset:
                break
        if lo <= b.last_offset:
            pieces.append(replace(b, first_offset=lo))
    pieces += newer
    return merge_adjacent(sorted(pieces, key=lambda b: b.first_offset))


def merge_adjacent(batches: list[StateBatch]) -> tuple[StateBatch, ...]:
    out: list[StateBatch] = []
    for b in batches:
        prev = out[-1] if out else None
        if (prev is not None and prev.last_offset + 1 == b.first_offset and prev.delivery_state == b.delivery_state
                and prev.delivery_count == b.delivery_count):
            out[-1] = replace(prev, last_offset=b.last_offset)
        else:
            out.append(b)
    return tuple(out)


def prune(batches: tuple[StateBatch, ...], start_offset: int) -> tuple[StateBatch, ...]:
    """Drop what lies below the start offset (it is all delivered)."""
    if start_offset < 0:
        return batches
    out = []
    for b in batches:
        if b.last_offset < start_offset:
            continue
        out.append(b if b.first_offset >= start_offset else replace(b, first_offset=start_offset))
    return tuple(out)
