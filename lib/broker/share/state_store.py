"""The share coordinator: every share-partition's durable state, kept in `__share_group_state`.

One replay path, as for `__transaction_state`: a write appends one record (ShareSnapshot or
ShareUpdate, `state_records`) to the key's partition of the topic (Utils.abs(hashCode of
"group:topicId:partition") % partitions, as Kafka's share coordinator picks it) and then replays
that record into the cache; loading at start replays the same records in log order. So the cache
never holds a state the log does not.

Kafka's layout: an update carries only what changed; after `snapshot_update_records_per_snapshot`
updates of a key the next write is a whole snapshot. The topic is not compacted (updates of one
key share a key): cleanup.policy=delete with no retention, and `prune()` moves each partition's
log start offset up to the oldest snapshot any live key still needs (Kafka's
ShareCoordinatorOffsetsManager + DeleteRecords). Deleting a share-partition's state writes
tombstones for both its keys.

The operations are the share coordinator's APIs (Kafka's ShareCoordinatorShard), served here for
this broker's share-partitions and, in a cluster, for other brokers' (`handlers.share_state`):
`read` (ReadShareGroupState: a share-partition leader reading with a newer leader epoch records it
first, so writes of an older leader are fenced from then on), `initialize`
(InitializeShareGroupState), `write_update` (WriteShareGroupState: FENCED_LEADER_EPOCH /
FENCED_STATE_EPOCH for a writer behind the recorded epochs), `delete` (DeleteShareGroupState) and
`summary` (ReadShareGroupStateSummary). Each decides and appends under its partition's lock, so
two brokers writing one key are ordered by the log. A share-partition leader reaches them through
`persister.SharePersister`, locally or over the wire.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable

from kio.schema.errors import ErrorCode

from ..coordinator_runtime import CoordinatorErrorCode, CoordinatorResult, CoordinatorRuntime, InternalTopic
from ..errors import BrokerError
from ..group.java import coordinator_partition
from ..group.share_config import ShareConfig
from .persisted import PersistedState, apply_update, from_snapshot
from .state_records import (NO_OFFSET, SNAPSHOT_TYPE, UPDATE_TYPE, DeliveryState, ShareStateKey, ShareStateRecord,
                            ShareUpdateValue, StateBatch, decode_record)

log = logging.getLogger(__name__)

STATE_TOPIC = "__share_group_state"
NO_EPOCH = -1  # a request naming no leader (or state) epoch: nothing to fence it with


class ShareCoordinatorError(BrokerError):
    """The share coordinator refused: the key's state partition is not served here now (loading,
    not owned, failed), or the writer is fenced (FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH)."""


def _share_error(code: CoordinatorErrorCode, message: str) -> ShareCoordinatorError:
    return ShareCoordinatorError(message, ErrorCode(int(code)))


@dataclass(eq=False)
class ShareStateShard:
    """The share-partition states of one `__share_group_state` partition."""

    states: dict[ShareStateKey, PersistedState] = field(default_factory=dict)
    updates_since_snapshot: dict[ShareStateKey, int] = field(default_factory=dict)
    snapshot_offset: dict[ShareStateKey, int] = field(default_factory=dict)  # where each key's latest snapshot is


class ShareStateStore:
    replays_writes = True  # the cache changes only through `replay`, live and at load

    def __init__(self, partitions: Any, config: ShareConfig = ShareConfig()):
        self.partitions = partitions  # PartitionManager
        self.config = config
        # Not compacted (updates of one key share a key): `prune` moves the log start instead.
        self.topic = InternalTopic(STATE_TOPIC, config.state_topic_partitions, {
            "cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1",
            "segment.bytes": str(config.state_topic_segment_bytes)})
        self.runtime: CoordinatorRuntime[ShareStateShard] = CoordinatorRuntime(partitions, self, error=_share_error)

    # ============================================== the state machine (coordinator runtime)
    def new_shard(self, index: int) -> ShareStateShard:
        return ShareStateShard()

    def decode(self, key: bytes | None, value: bytes | None) -> ShareStateRecord | None:
        return decode_record(key, value)

    def replay(self, shard: ShareStateShard, record: ShareStateRecord, offset: int, producer_id: int,
               now: int) -> None:
        key, value = record.key, record.value
        if value is None:
            shard.states.pop(key, None)
            shard.updates_since_snapshot.pop(key, None)
            shard.snapshot_offset.pop(key, None)
        elif record.type == SNAPSHOT_TYPE:
            shard.states[key] = from_snapshot(value)
            shard.updates_since_snapshot[key] = 0
            shard.snapshot_offset[key] = offset
        else:
            shard.states[key] = apply_update(shard.states.get(key), value)
            shard.updates_since_snapshot[key] = shard.updates_since_snapshot.get(key, 0) + 1
            shard.snapshot_offset.setdefault(key, offset)

    def replay_marker(self, shard: ShareStateShard, producer_id: int, commit: bool, now: int) -> None:
        pass  # __share_group_state holds no transactional batches

    def loaded(self, index: int, shard: ShareStateShard, count: int) -> None:
        if shard.states:
            log.debug("loaded %d share-partition states from %s-%d", len(shard.states), STATE_TOPIC, index)

    def unloaded(self, index: int, shard: ShareStateShard) -> None:
        pass  # share-partition leaders keep their live state: the persister finds the next coordinator

    # ================================================================= lifecycle
    async def start(self) -> None:
        if self.runtime.open_existing_topic():
            await self.runtime.settle()

    async def stop(self) -> None:
        await self.runtime.stop()

    async def wait_loaded(self) -> None:
        """Until every partition owned here has loaded (at start: the whole topic)."""
        await self.runtime.settle()

    # =================================================================== queries
    def get(self, key: ShareStateKey) -> PersistedState | None:
        shard = self._shard(key)
        return shard.states.get(key) if shard is not None else None

    def summary(self, key: ShareStateKey) -> PersistedState | None:
        """ReadShareGroupStateSummary: the state, its delivery-complete count counted from its
        batches (records at or after the start offset that are done)."""
        state = self.get(key)
        if state is None:
            return None
        return replace(state, delivery_complete_count=sum(
            b.last_offset - b.first_offset + 1 for b in state.batches if b.delivery_state != DeliveryState.AVAILABLE))

    def keys(self, group: str | None = None) -> list[ShareStateKey]:
        return [k for shard in self.runtime.active_shards() for k in shard.state.states
                if group is None or k.group == group]

    def partition_for(self, key: ShareStateKey) -> int:
        return self.partition_for_coordinator_key(key.coordinator_key())

    def partition_for_coordinator_key(self, key: str) -> int:
        """The partition of "group:topicId:partition" (FindCoordinator's SHARE key)."""
        return coordinator_partition(key, self.runtime.partition_count)

    def _shard(self, key: ShareStateKey) -> ShareStateShard | None:
        """The loaded shard holding `key`; None before the topic exists (ShareCoordinatorError
        when its partition is not served here now)."""
        if not self.runtime.topic_exists:
            return None
        return self.runtime.active(self.partition_for(key)).state

    # ========================================================= the coordinator's APIs
    async def read(self, key: ShareStateKey, leader_epoch: int = NO_EPOCH) -> PersistedState | None:
        """ReadShareGroupState (Kafka's readStateAndMaybeUpdateLeaderEpoch): the state, None if
        there is none. A leader epoch above the recorded one is recorded first (an update record),
        one below it is FENCED_LEADER_EPOCH."""
        if not self.runtime.topic_exists:
            return None

        def op(shard: ShareStateShard, now: int) -> CoordinatorResult:
            old = shard.states.get(key)
            if old is None:
                return CoordinatorResult(None)
            _check_leader_epoch(key, old, leader_epoch)
            if leader_epoch == NO_EPOCH or leader_epoch == old.leader_epoch:
                return CoordinatorResult(old)
            update = ShareUpdateValue(old.snapshot_epoch, leader_epoch, NO_OFFSET, (), old.delivery_complete_count)
            return CoordinatorResult(apply_update(old, update), (self._update_record(shard, key, old, update, now),))

        return await self._run(key, op)

    async def initialize(self, key: ShareStateKey, state_epoch: int, start_offset: int) -> None:
        """InitializeShareGroupState: the share-partition starts (over) at `start_offset` with no
        batches (its first fetch, AlterShareGroupOffsets); a state epoch below the recorded one is
        FENCED_STATE_EPOCH. The recorded leader epoch stays: it still fences older leaders."""

        def op(shard: ShareStateShard, now: int) -> CoordinatorResult:
            old = shard.states.get(key)
            if old is not None and state_epoch < old.state_epoch:
                raise _fenced(ErrorCode.fenced_state_epoch, f"{key}: state epoch {state_epoch} is older than "
                              f"the recorded {old.state_epoch}")
            state = PersistedState(state_epoch, start_offset, leader_epoch=old.leader_epoch if old else 0)
            return CoordinatorResult(None, (_snapshot_record(key, old, state, now),))

        await self._run(key, op, create=True)

    async def write_snapshot(self, key: ShareStateKey, state: PersistedState) -> None:
        """The whole state of a share-partition, unfenced."""
        await self._run(key, lambda shard, now: CoordinatorResult(
            None, (_snapshot_record(key, shard.states.get(key), state, now),)), create=True)

    async def write_update(self, key: ShareStateKey, start_offset: int | None, batches: tuple[StateBatch, ...],
                           delivery_complete_count: int, *, state_epoch: int = NO_EPOCH,
                           leader_epoch: int = NO_EPOCH) -> None:
        """WriteShareGroupState: what changed; every Nth write of a key is a snapshot. A writer
        behind the recorded leader or state epoch is fenced; a key without state (deleted since
        the writer read it) is FENCED_STATE_EPOCH too: the writer must read it again."""

        def op(shard: ShareStateShard, now: int) -> CoordinatorResult:
            old = shard.states.get(key)
            if old is None:
                raise _fenced(ErrorCode.fenced_state_epoch, f"no share-partition state for {key}")
            _check_leader_epoch(key, old, leader_epoch)
            if state_epoch != NO_EPOCH and state_epoch < old.state_epoch:
                raise _fenced(ErrorCode.fenced_state_epoch, f"{key}: state epoch {state_epoch} is older than "
                              f"the recorded {old.state_epoch}")
            update = ShareUpdateValue(old.snapshot_epoch, old.leader_epoch,
                                      NO_OFFSET if start_offset is None else start_offset, batches,
                                      delivery_complete_count)
            return CoordinatorResult(None, (self._update_record(shard, key, old, update, now),))

        await self._run(key, op, create=True)

    async def delete(self, keys: Iterable[ShareStateKey]) -> None:
        """DeleteShareGroupState: tombstones for both record keys of each share-partition."""
        if not self.runtime.topic_exists:
            return
        for key in keys:
            await self._run(key, lambda shard, now, key=key: CoordinatorResult(None, (
                ShareStateRecord(SNAPSHOT_TYPE, key, None), ShareStateRecord(UPDATE_TYPE, key, None))
                if key in shard.states else ()))

    async def prune(self) -> None:
        """Move each state partition's log start offset up to the oldest snapshot still needed."""
        for shard in self.runtime.active_shards():
            offsets = shard.state.snapshot_offset
            needed = min((offsets.get(key, 0) for key in shard.state.states), default=None)
            await self.runtime.with_partition(shard.index, lambda part, needed=needed: _prune(part, needed))

    # ================================================================= internals
    def _update_record(self, shard: ShareStateShard, key: ShareStateKey, old: PersistedState,
                       update: ShareUpdateValue, now: int) -> ShareStateRecord:
        """The update, or the whole new state when the key had enough updates since its snapshot."""
        if shard.updates_since_snapshot.get(key, 0) >= self.config.snapshot_update_records_per_snapshot:
            return _snapshot_record(key, old, apply_update(old, update), now)
        return ShareStateRecord(UPDATE_TYPE, key, update)

    async def _run(self, key: ShareStateKey, op: Callable[[ShareStateShard, int], CoordinatorResult], *,
                   create: bool = False) -> Any:
        """Run `op` on the key's partition under its lock and append its records (creating the
        topic first when `create`, as Kafka's share coordinator does on first use); the runtime
        replays them once they are in the log."""
        if create:
            self.runtime.ensure_topic()
        return await self.runtime.write(self.partition_for(key), op, wait=True)


def _snapshot_record(key: ShareStateKey, old: PersistedState | None, state: PersistedState,
                     now: int) -> ShareStateRecord:
    """A snapshot of `state` following `old` (its snapshot epoch one higher, its creation time kept)."""
    if old is not None and state.create_timestamp < 0:
        state = replace(state, create_timestamp=old.create_timestamp)
    epoch = old.snapshot_epoch + 1 if old is not None else 0
    return ShareStateRecord(SNAPSHOT_TYPE, key, state.to_snapshot(epoch, now))


def _check_leader_epoch(key: ShareStateKey, old: PersistedState, leader_epoch: int) -> None:
    if leader_epoch != NO_EPOCH and leader_epoch < old.leader_epoch:
        raise _fenced(ErrorCode.fenced_leader_epoch, f"{key}: leader epoch {leader_epoch} is older than the "
                      f"recorded {old.leader_epoch}")


def _fenced(code: ErrorCode, message: str) -> ShareCoordinatorError:
    return ShareCoordinatorError(message, code)


def _prune(part: Any, needed: int | None) -> None:
    """Up to the oldest snapshot a live key needs; everything when no key is left (I/O thread)."""
    target = part.log.log_end_offset if needed is None else needed
    if target > part.log.log_start_offset:
        part.log.advance_log_start_offset(target)
