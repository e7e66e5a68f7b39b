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

import asyncio
import logging
import time
from dataclasses import replace
from typing import Any, Iterable

from topiclake.segments.batch import Record, build_batch, iter_batches
from topiclake.segments.errors import TopicAlreadyExistsError, UnknownTopicError

from ..group.java import string_hash_code, utils_abs
from .config import ShareConfig
from .persisted import PersistedState, apply_update, from_snapshot
from .state_records import (NO_OFFSET, SNAPSHOT_TYPE, UPDATE_TYPE, ShareStateKey, ShareStateRecord, ShareUpdateValue,
                            StateBatch, decode_record)

log = logging.getLogger(__name__)

STATE_TOPIC = "__share_group_state"
_READ_CHUNK = 4 * 1024 * 1024
LEADER_EPOCH = 0


def _now_ms() -> int:
    return int(time.time() * 1000)


class ShareStateStore:
    def __init__(self, partitions: Any, config: ShareConfig = ShareConfig()):
        self.partitions = partitions  # PartitionManager
        self.config = config
        self._states: dict[ShareStateKey, PersistedState] = {}
        self._updates_since_snapshot: dict[ShareStateKey, int] = {}
        self._snapshot_offset: dict[ShareStateKey, int] = {}  # where each key's latest snapshot is
        self._num_partitions: int | None = None
        self._locks: dict[int, asyncio.Lock] = {}
        self.loaded = asyncio.Event()

    # ================================================================= lifecycle
    async def start(self) -> None:
        try:
            meta = self.partitions.topic(STATE_TOPIC, fresh=True)
        except UnknownTopicError:
            meta = None
        if meta is not None:
            self._num_partitions = meta.partitions
            for index in range(meta.partitions):
                if self.partitions.layout.log_dir(STATE_TOPIC, index).exists():
                    part = await self.partitions.get(STATE_TOPIC, index)
                    for offset, record in await self.partitions.run_read(_read_records, part):
                        self._replay(record, offset)
        self.loaded.set()
        if self._states:
            log.info("loaded %d share-partition states from %s", len(self._states), STATE_TOPIC)

    # =================================================================== queries
    def get(self, key: ShareStateKey) -> PersistedState | None:
        return self._states.get(key)

    def keys(self, group: str | None = None) -> list[ShareStateKey]:
        return [k for k in self._states if group is None or k.group == group]

    def partition_for(self, key: ShareStateKey) -> int:
        n = self._num_partitions or self.config.state_topic_partitions
        return utils_abs(string_hash_code(key.coordinator_key())) % n

    # ==================================================================== writes
    async def write_snapshot(self, key: ShareStateKey, state: PersistedState) -> None:
        """The whole state of a share-partition (initialisation, offsets altered)."""
        now = _now_ms()
        old = self._states.get(key)
        epoch = old.snapshot_epoch + 1 if old is not None else 0
        if old is not None and state.create_timestamp < 0:
            state = replace(state, create_timestamp=old.create_timestamp)
        await self._append(ShareStateRecord(SNAPSHOT_TYPE, key, state.to_snapshot(epoch, now)))

    async def write_update(self, key: ShareStateKey, start_offset: int | None, batches: tuple[StateBatch, ...],
                           delivery_complete_count: int) -> None:
        """What changed (Kafka's WriteShareGroupState); every Nth write of a key is a snapshot."""
        old = self._states.get(key)
        if old is None:
            raise KeyError(f"no share-partition state for {key}")
        update = ShareUpdateValue(old.snapshot_epoch, old.leader_epoch,
                                  NO_OFFSET if start_offset is None else start_offset, batches,
                                  delivery_complete_count)
        if self._updates_since_snapshot.get(key, 0) >= self.config.snapshot_update_records_per_snapshot:
            await self.write_snapshot(key, apply_update(old, update))
        else:
            await self._append(ShareStateRecord(UPDATE_TYPE, key, update))

    async def delete(self, keys: Iterable[ShareStateKey]) -> None:
        for key in keys:
            if key in self._states:
                await self._append(ShareStateRecord(SNAPSHOT_TYPE, key, None))
                await self._append(ShareStateRecord(UPDATE_TYPE, key, None))

    async def prune(self) -> None:
        """Move each state partition's log start offset up to the oldest snapshot still needed."""
        if self._num_partitions is None:
            return
        needed: dict[int, int] = {}
        for key in self._states:
            index = self.partition_for(key)
            offset = self._snapshot_offset.get(key, 0)
            needed[index] = min(needed.get(index, offset), offset)
        for index in range(self._num_partitions):
            if not self.partitions.layout.log_dir(STATE_TOPIC, index).exists():
                continue
            part = await self.partitions.get(STATE_TOPIC, index)
            target = needed.get(index, part.log.log_end_offset)
            if target > part.log.log_start_offset:
                async with self._lock(index):
                    await self.partitions.run_io(part.log.advance_log_start_offset, target)

    # ================================================================= internals
    def _lock(self, index: int) -> asyncio.Lock:
        lock = self._locks.get(index)
        if lock is None:
            lock = self._locks[index] = asyncio.Lock()
        return lock

    async def _append(self, record: ShareStateRecord) -> None:
        if self._num_partitions is None:
            self._num_partitions = await self._ensure_topic()
        index = self.partition_for(record.key)
        part = await self.partitions.get(STATE_TOPIC, index)
        batch = build_batch([Record(0, _now_ms(), record.key_bytes(), record.value_bytes())])
        async with self._lock(index):
            result = await self.partitions.run_io(lambda: part.log.append(batch, leader_epoch=LEADER_EPOCH))
            self._replay(record, result.first_offset)

    def _replay(self, record: ShareStateRecord, offset: int) -> None:
        key, value = record.key, record.value
        if value is None:
            self._states.pop(key, None)
            self._updates_since_snapshot.pop(key, None)
            self._snapshot_offset.pop(key, None)
        elif record.type == SNAPSHOT_TYPE:
            self._states[key] = from_snapshot(value)
            self._updates_since_snapshot[key] = 0
            self._snapshot_offset[key] = offset
        else:
            self._states[key] = apply_update(self._states.get(key), value)
            self._updates_since_snapshot[key] = self._updates_since_snapshot.get(key, 0) + 1
            self._snapshot_offset.setdefault(key, offset)

    async def _ensure_topic(self) -> int:
        """Create `__share_group_state` on first use, as Kafka's share coordinator does."""
        try:
            return self.partitions.topic(STATE_TOPIC, fresh=True).partitions
        except UnknownTopicError:
            pass
        config = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1",
                  "segment.bytes": str(self.config.state_topic_segment_bytes)}
        try:
            meta = await self.partitions.run_io(self.partitions.create_topic, STATE_TOPIC,
                                                self.config.state_topic_partitions, config)
            log.info("created %s with %d partitions", STATE_TOPIC, meta.partitions)
        except TopicAlreadyExistsError:
            meta = self.partitions.topic(STATE_TOPIC, fresh=True)
        return meta.partitions


def _read_records(part) -> list[tuple[int, ShareStateRecord]]:
    """Every record of a `__share_group_state` partition with its offset, in log order."""
    out: list[tuple[int, ShareStateRecord]] = []
    source = f"{STATE_TOPIC}-{part.index}"
    offset, end = part.log.log_start_offset, part.log.log_end_offset
    while offset < end:
        result = part.log.read(offset, _READ_CHUNK)
        data = result.to_bytes()
        if not data:
            break
        for batch in iter_batches(data, source=source, allow_partial_tail=True):
            if batch.header.is_control:
                continue
            for rec in batch.records():
                if rec.offset < offset:
                    continue
                try:
                    decoded = decode_record(rec.key, rec.value)
                except Exception as exc:  # one bad record must not make the others unusable
                    log.error("%s offset %d: skipping a record that does not decode: %s", source, rec.offset, exc)
                    continue
                if decoded is not None:
                    out.append((rec.offset, decoded))
        offset = result.next_offset
    return out
