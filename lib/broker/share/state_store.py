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
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable

from kio.schema.errors import ErrorCode

from ..coordinator_runtime import CoordinatorErrorCode, CoordinatorResult, CoordinatorRuntime, InternalTopic
from ..errors import BrokerError
from ..group.java import string_hash_code, utils_abs
from ..group.share_config import ShareConfig
from .persisted import PersistedState, apply_update, from_snapshot
from .state_records import (NO_OFFSET, SNAPSHOT_TYPE, UPDATE_TYPE, ShareStateKey, ShareStateRecord, ShareUpdateValue,
                            StateBatch, decode_record)

log = logging.getLogger(__name__)

STATE_TOPIC = "__share_group_state"


class ShareCoordinatorError(BrokerError):
    """The share-partition's state partition is not served here now (loading, not owned, failed)."""


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
        # Told the keys of a partition that stops being served here (the share-partitions built on
        # them must re-read their state from whoever serves it next).
        self.on_unloaded: Callable[[Iterable[ShareStateKey]], None] = lambda keys: None

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
            log.info("loaded %d share-partition states from %s-%d", len(shard.states), STATE_TOPIC, index)

    def unloaded(self, index: int, shard: ShareStateShard) -> None:
        self.on_unloaded(list(shard.states))

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

    def keys(self, group: str | None = None) -> list[ShareStateKey]:
        return [k for shard in self.runtime.active_shards() for k in shard.state.states
                if group is None or k.group == group]

    def partition_for(self, key: ShareStateKey) -> int:
        return self.partition_for_coordinator_key(key.coordinator_key())

    def partition_for_coordinator_key(self, key: str) -> int:
        """The partition of "group:topicId:partition" (FindCoordinator's SHARE key)."""
        return utils_abs(string_hash_code(key)) % self.runtime.partition_count

    def _shard(self, key: ShareStateKey) -> ShareStateShard | None:
        """The loaded shard holding `key`; None before the topic exists (ShareCoordinatorError
        when its partition is not served here now)."""
        if not self.runtime.topic_exists:
            return None
        return self.runtime.active(self.partition_for(key)).state

    # ==================================================================== writes
    async def write_snapshot(self, key: ShareStateKey, state: PersistedState) -> None:
        """The whole state of a share-partition (initialisation, offsets altered)."""
        now = self.runtime.clock()
        old = self.get(key)
        epoch = old.snapshot_epoch + 1 if old is not None else 0
        if old is not None and state.create_timestamp < 0:
            state = replace(state, create_timestamp=old.create_timestamp)
        await self._append(ShareStateRecord(SNAPSHOT_TYPE, key, state.to_snapshot(epoch, now)))

    async def write_update(self, key: ShareStateKey, start_offset: int | None, batches: tuple[StateBatch, ...],
                           delivery_complete_count: int) -> None:
        """What changed (Kafka's WriteShareGroupState); every Nth write of a key is a snapshot."""
        shard = self._shard(key)
        old = shard.states.get(key) if shard is not None else None
        if old is None:
            raise KeyError(f"no share-partition state for {key}")
        update = ShareUpdateValue(old.snapshot_epoch, old.leader_epoch,
                                  NO_OFFSET if start_offset is None else start_offset, batches,
                                  delivery_complete_count)
        if shard.updates_since_snapshot.get(key, 0) >= self.config.snapshot_update_records_per_snapshot:
            await self.write_snapshot(key, apply_update(old, update))
        else:
            await self._append(ShareStateRecord(UPDATE_TYPE, key, update))

    async def delete(self, keys: Iterable[ShareStateKey]) -> None:
        for key in keys:
            if self.get(key) is not None:
                await self._append(ShareStateRecord(SNAPSHOT_TYPE, key, None))
                await self._append(ShareStateRecord(UPDATE_TYPE, key, None))

    async def prune(self) -> None:
        """Move each state partition's log start offset up to the oldest snapshot still needed."""
        for shard in self.runtime.active_shards():
            offsets = shard.state.snapshot_offset
            needed = min((offsets.get(key, 0) for key in shard.state.states), default=None)
            await self.runtime.with_partition(shard.index, lambda part, needed=needed: _prune(part, needed))

    # ================================================================= internals
    async def _append(self, record: ShareStateRecord) -> None:
        """Append one record to the key's partition (creating the topic on first use, as Kafka's
        share coordinator does); the runtime replays it once it is in the log."""
        self.runtime.ensure_topic()
        await self.runtime.write(self.partition_for(record.key), lambda shard, now: CoordinatorResult(None, (record,)),
                                 wait=True)


def _prune(part: Any, needed: int | None) -> None:
    """Up to the oldest snapshot a live key needs; everything when no key is left (I/O thread)."""
    target = part.log.log_end_offset if needed is None else needed
    if target > part.log.log_start_offset:
        part.log.advance_log_start_offset(target)
