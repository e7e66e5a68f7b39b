"""The share-partition leader (Kafka's SharePartitionManager): ShareFetch and ShareAcknowledge
over the live share-partitions of this broker.

A live share-partition (`partition.SharePartition`) is built from its durable state in
`__share_group_state` the first time a group fetches from it, read through the persister
(`persister`: the local share coordinator, or in a cluster the broker leading the key's state
partition) at this broker's leader epoch of the data partition, which fences writes of any
earlier leader. A partition with no state yet starts where the group's share.auto.offset.reset
says (latest: the high watermark at that first fetch; earliest: the log start offset;
by_duration:D: the first record at most D old) and that start is written at once, so a restart
does not move it. In a cluster a live share-partition lives as long as this broker leads its
data partition (a takeover is a new partition, read again), and a group's live share-partitions
are let go when its last share session here closes, so offsets altered or deleted on another
broker are read again by the next session.

Every change that must survive a crash (acknowledgements, releases, expired locks, archived
records) is written to `__share_group_state` under the share-partition's lock before the
request that caused it is answered; if the write fails (or is fenced), the live share-partition is dropped
and rebuilt from the log at the next fetch (its acquisitions are lost, which only means the
records are delivered again). Acquisitions themselves are not written, as in Kafka: after a
crash every acquired record is AVAILABLE again.

ShareFetch acquires from the session's partitions (the lowest available offsets first, then
new records, `partition` has the rules), reading the log on the reader threads; with nothing to
acquire it waits up to max_wait for an append to one of the partitions or for records to come
back (a release, an expired lock). A timer expires acquisition locks.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from kio.schema.errors import ErrorCode

from topiclake.segments.batch import iter_batches
from topiclake.segments.errors import OffsetOutOfRangeError

from ..errors import BrokerError, NotLeaderOrFollower
from ..clock import system_ms
from ..partitions import topic_uuid
from ..request_time import waiting
from ..group.share_config import ShareConfig
from .partition import AckRange, Acquired, BatchExtent, InvalidRecordState, InvalidAcknowledgement, SharePartition
from .persisted import UNINITIALIZED
from .persister import SharePersister
from .sessions import FINAL_EPOCH, INITIAL_EPOCH, INVALID_REQUEST, SessionError, ShareSessions
from .state_records import ShareStateKey
from .state_store import NO_EPOCH, ShareCoordinatorError, ShareStateStore

log = logging.getLogger(__name__)

READ_CHUNK_BYTES = 1024 * 1024  # log bytes read per partition and pass (at least one batch)
NONE, UNKNOWN_SERVER_ERROR = 0, -1
UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_ID, INVALID_RECORD_STATE = 3, 6, 100, 121
COORDINATOR_NOT_AVAILABLE, TOPIC_AUTHORIZATION_FAILED = 15, 29
# What a share-partition leader answers for its persister's errors (Kafka's SharePartition): the
# coordinator not reachable now, or this broker fenced as the partition's leader.
_STATE_ERRORS = {int(ErrorCode.not_coordinator): COORDINATOR_NOT_AVAILABLE,
                 int(ErrorCode.coordinator_load_in_progress): COORDINATOR_NOT_AVAILABLE,
                 int(ErrorCode.fenced_leader_epoch): NOT_LEADER_OR_FOLLOWER}


Readable = Callable[[str], bool]


def _everything(topic: str) -> bool:
    return True


now_ms = system_ms  # the broker's one clock (clock.py)


@dataclass(frozen=True, slots=True)
class PartitionRequest:
    topic_id: uuid.UUID
    partition: int
    acks: tuple[AckRange, ...] = ()


@dataclass(slots=True)
class SharePartitionResult:
    topic_id: uuid.UUID
    partition: int
    error: int = NONE
    error_message: str | None = None
    ack_error: int | None = None  # None: the request acknowledged nothing here
    ack_message: str | None = None
    records: bytes = b""
    acquired: list[Acquired] = field(default_factory=list)


@dataclass(slots=True)
class ShareResult:
    error: int = NONE
    error_message: str | None = None
    partitions: list[SharePartitionResult] = field(default_factory=list)
    lock_ms: int = 0
    fetched_bytes: int = 0


class ShareError(Exception):
    """A whole-request error of ShareFetch/ShareAcknowledge."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


@dataclass(eq=False)
class LiveShare:
    key: ShareStateKey
    topic: str
    index: int
    state: SharePartition
    partition: Any  # the data partition it was read for: a takeover opens another one
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    waiters: list[asyncio.Future] = field(default_factory=list)

    def changed(self) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        if len(self.waiters) >= 64:  # idle long polls cancel theirs: drop those
            self.waiters = [w for w in self.waiters if not w.done()]
        self.waiters.append(fut)
        return fut

    def notify(self) -> None:
        waiters, self.waiters = self.waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)


class ShareFetcher:
    def __init__(self, partitions: Any, store: ShareStateStore, group_configs: Any,
                 config: ShareConfig = ShareConfig(), *, persister: SharePersister | None = None,
                 shutting_down: asyncio.Event | None = None):
        self.partitions = partitions  # PartitionManager
        self.store = store  # this broker's share coordinator (its own keys: deleted topics, pruning)
        self.persister = persister or SharePersister(store)  # every share-partition's state, wherever it is
        self.configs = group_configs  # group.group_configs.GroupConfigs (share.* per group)
        self.config = config
        self.sessions = ShareSessions(config.max_share_sessions)
        self.shutting_down = shutting_down or asyncio.Event()
        self._live: dict[ShareStateKey, LiveShare] = {}
        self._opening: dict[ShareStateKey, asyncio.Lock] = {}
        self._tasks: list[asyncio.Task] = []

    # ================================================================= lifecycle
    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._timer())]

    def live_shares(self) -> list[LiveShare]:
        """The share-partitions this broker serves now (their in-flight state: metrics)."""
        return list(self._live.values())

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for live in self._live.values():
            live.notify()

    async def _timer(self) -> None:
        interval = self.config.tick_interval_ms / 1000
        next_prune = time.monotonic() + self.config.state_topic_prune_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.expire_locks(now_ms())
                if time.monotonic() >= next_prune:
                    next_prune = time.monotonic() + self.config.state_topic_prune_interval_ms / 1000
                    await self.forget_deleted_topics()
                    await self.store.prune()
            except Exception:
                log.exception("share-partition timer failed")

    # ============================================================== group settings
    def lock_ms(self, group: str) -> int:
        return int(self.configs.value(group, "share.record.lock.duration.ms"))

    def _delivery_limit(self, group: str) -> int:
        return int(self.configs.value(group, "share.delivery.count.limit"))

    def _max_locks(self, group: str) -> int:
        return int(self.configs.value(group, "share.partition.max.record.locks"))

    def _read_committed(self, group: str) -> bool:
        return self.configs.value(group, "share.isolation.level") == "read_committed"

    # ===================================================================== fetch
    async def fetch(self, group: str, member: str, epoch: int, requested: Iterable[PartitionRequest],
                    forgotten: Iterable[tuple[uuid.UUID, int]], *, max_wait_ms: int, max_records: int,
                    max_bytes: int, strict_records: bool = False, readable: Readable = _everything) -> ShareResult:
        """`readable(topic)` says whether the member's principal may read a topic: asked for every
        partition of the session on every request, so a revoked ACL takes effect at once."""
        requested = list(requested)
        await self.store.wait_loaded()
        result = ShareResult(lock_ms=self.lock_ms(group))
        if not group or not member:
            return ShareResult(INVALID_REQUEST, "ShareFetch needs a group id and a member id")
        acking = [r for r in requested if r.acks]
        try:
            if epoch == INITIAL_EPOCH:
                if acking:
                    raise ShareError(INVALID_REQUEST, "acknowledgements in a request that opens a share session")
                session, _replaced = self.sessions.open(group, member)
            elif epoch == FINAL_EPOCH:
                session = None
            else:
                session = self.sessions.use(group, member, epoch)
        except (SessionError, ShareError) as exc:
            return ShareResult(exc.code, str(exc), lock_ms=result.lock_ms)
        results = {(r.topic_id, r.partition): SharePartitionResult(r.topic_id, r.partition) for r in requested}
        for req in acking:
            res = results[(req.topic_id, req.partition)]
            res.ack_error, res.ack_message = await self._acknowledge(group, member, req, readable)
        if session is None:  # the final request: acknowledge, then let everything else go
            self.sessions.close(group, member)
            await self.release_member(group, member)
            result.partitions = list(results.values())
            return result
        for key in forgotten:
            session.partitions.pop(key, None)
        for r in requested:
            session.partitions[(r.topic_id, r.partition)] = None
        if epoch != INITIAL_EPOCH:  # a new session already expects epoch 1
            session.bump()
        if max_records > 0:
            keys = list(session.partitions)
            if keys:  # take turns: each request starts at another partition
                turn = session.epoch % len(keys)
                keys = keys[turn:] + keys[:turn]
            await self._acquire_all(group, member, keys, results, max_wait_ms, max_records, max_bytes, strict_records,
                                    readable)
        shown = [r for r in results.values()
                 if epoch == INITIAL_EPOCH or r.acquired or r.error or r.ack_error is not None]
        result.partitions = shown
        result.fetched_bytes = sum(len(r.records) for r in shown)
        return result

    async def _acquire_all(self, group: str, member: str, keys: list[tuple[uuid.UUID, int]],
                           results: dict, max_wait_ms: int, max_records: int, max_bytes: int,
                           strict: bool, readable: Readable) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(max_wait_ms, 0) / 1000
        while True:
            waiters: list[asyncio.Future] = []
            records_left, bytes_left = max_records, max_bytes
            for topic_id, index in keys:
                res = results.setdefault((topic_id, index), SharePartitionResult(topic_id, index))
                if res.error:
                    continue
                try:
                    live, part = await self._open(group, topic_id, index, readable)
                except ShareError as exc:
                    res.error, res.error_message = exc.code, str(exc)
                    continue
                waiters += [part.changed(), live.changed()]
                if records_left <= 0 or bytes_left <= 0:
                    continue
                acquired, data = await self._acquire(live, part, group, member, records_left, bytes_left, strict)
                if acquired:
                    res.acquired += acquired
                    res.records += data
                    records_left -= sum(a.last_offset - a.first_offset + 1 for a in acquired)
                    bytes_left -= len(data)
            # A refused partition stays refused: it answers with the others rather than end the wait.
            got = records_left < max_records or any(r.error not in (NONE, TOPIC_AUTHORIZATION_FAILED)
                                                    for r in results.values())
            remaining = deadline - loop.time()
            if got or remaining <= 0 or not waiters or self.shutting_down.is_set():
                for w in waiters:
                    w.cancel()
                return
            with waiting():  # a long poll: not busy time for the request quota
                await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            for w in waiters:
                w.cancel()

    async def _acquire(self, live: LiveShare, part: Any, group: str, member: str, max_records: int,
                       max_bytes: int, strict: bool) -> tuple[list[Acquired], bytes]:
        committed = self._read_committed(group)
        max_locks = self._max_locks(group)
        async with live.lock:
            live.state.move_to_log_start(part.history_start_offset)
            if not live.state.can_acquire(max_locks):
                return [], b""
            offset = live.state.next_fetch_offset()
        bound = part.last_stable_offset if committed else part.high_watermark
        if offset >= bound:
            return [], b""
        below_cache = part.closed is not None and offset < part.log.log_start_offset
        run = self.partitions.run_bucket_read if below_cache else self.partitions.run_read
        data, closed_aborted = await run(_read, part, offset, min(max_bytes, READ_CHUNK_BYTES), bound, committed)
        if not data:
            return [], b""
        aborted = (closed_aborted or []) + part.txns.aborted_between(offset, bound) if committed else []
        batches = []  # (extent, position, size)
        for batch in iter_batches(data, source=f"{part.topic}-{part.index}", allow_partial_tail=True,
                                  validate=False):
            h = batch.header
            deliverable = not h.is_control and not (h.is_transactional and any(
                t.producer_id == h.producer_id and t.first_offset <= h.base_offset <= t.last_offset for t in aborted))
            batches.append((BatchExtent(h.base_offset, h.last_offset, deliverable), batch.position, h.size))
        async with live.lock:  # records another fetch took meanwhile are no longer AVAILABLE: skipped
            acquired = live.state.acquire(member, [b for b, _pos, _size in batches], max_records=max_records,
                                          max_locks=max_locks, lock_ms=self.lock_ms(group), now_ms=now_ms(),
                                          strict=strict)
        if not acquired:
            return [], b""
        view = memoryview(data)
        parts = [bytes(view[pos:pos + size]) for extent, pos, size in batches
                 if extent.deliverable and any(a.first_offset <= extent.last_offset and
                                               a.last_offset >= extent.base_offset for a in acquired)]
        records = b"".join(parts)
        part.bytes_out += len(records)
        return acquired, records

    # ============================================================== acknowledge
    async def acknowledge(self, group: str, member: str, epoch: int,
                          requested: Iterable[PartitionRequest], readable: Readable = _everything) -> ShareResult:
        requested = list(requested)
        await self.store.wait_loaded()
        result = ShareResult(lock_ms=self.lock_ms(group))
        try:
            if epoch == INITIAL_EPOCH:
                raise SessionError(123, "ShareAcknowledge cannot open a share session (epoch 0)")
            session = self.sessions.use(group, member, epoch) if epoch != FINAL_EPOCH else None
        except SessionError as exc:
            return ShareResult(exc.code, str(exc), lock_ms=result.lock_ms)
        for req in requested:
            res = SharePartitionResult(req.topic_id, req.partition)
            res.error, res.error_message = await self._acknowledge(group, member, req, readable)
            result.partitions.append(res)
        if session is None:
            self.sessions.close(group, member)
            await self.release_member(group, member)
        else:
            session.bump()
        return result

    async def _acknowledge(self, group: str, member: str, req: PartitionRequest,
                           readable: Readable) -> tuple[int, str | None]:
        try:
            live, _part = await self._open(group, req.topic_id, req.partition, readable)
        except ShareError as exc:
            return exc.code, str(exc)
        async with live.lock:
            try:
                live.state.acknowledge(member, req.acks, delivery_limit=self._delivery_limit(group),
                                       lock_ms=self.lock_ms(group), now_ms=now_ms())
            except InvalidRecordState as exc:
                return INVALID_RECORD_STATE, str(exc)
            except InvalidAcknowledgement as exc:
                return INVALID_REQUEST, str(exc)
            error = await self._persist(live)
        live.notify()
        return error

    # ================================================================ releasing
    def disconnected(self, group: str, member: str, session: object) -> None:
        """The connection a member fetched on closed: its share session ends and its records go
        back (Kafka's SharePartitionManager does the same on a disconnect). Nothing happens if the
        member has opened another session since (on another connection)."""
        if session is None or self.sessions.get(group, member) is not session:
            return
        self.sessions.close(group, member)
        task = asyncio.get_running_loop().create_task(self.release_member(group, member))
        self._tasks.append(task)
        task.add_done_callback(self._tasks.remove)

    async def release_member(self, group: str, member: str) -> None:
        """The member's share session closed, or it left the group: its records go back. In a
        cluster, the group's last session here lets its share-partitions go (read again next time:
        AlterShareGroupOffsets and DeleteShareGroupOffsets run on the group's coordinator)."""
        limit = self._delivery_limit(group)
        lives = [lv for k, lv in self._live.items() if k.group == group]
        for live in lives:
            async with live.lock:
                if live.state.release_member(member, delivery_limit=limit):
                    await self._persist(live)
            live.notify()
        if self.persister.clustered and not self.sessions.of_group(group):
            for live in lives:
                if not live.state.any_acquired() and self._live.get(live.key) is live:
                    self._drop(live.key)

    async def expire_locks(self, now: int) -> None:
        for live in list(self._live.values()):
            deadline = live.state.next_deadline()
            if deadline is None or deadline > now:
                continue
            if not self._still_led(live):  # its data partition moved: the new leader reads the state
                self._drop(live.key)
                continue
            async with live.lock:
                if live.state.expire_locks(now, delivery_limit=self._delivery_limit(live.key.group)):
                    await self._persist(live)
            live.notify()

    # =============================================================== group admin
    async def start_offset(self, key: ShareStateKey) -> tuple[int, int]:
        """(share-partition start offset, delivered records at or after it); (-1, -1) without state."""
        live = self._live.get(key)
        if live is not None and self._still_led(live):
            return live.state.start_offset, live.state.delivery_complete_count()
        state = await self.persister.summary(key)
        if state is None or state.start_offset == UNINITIALIZED:
            return -1, -1
        return state.start_offset, state.delivery_complete_count

    async def alter_start_offset(self, key: ShareStateKey, offset: int) -> None:
        """AlterShareGroupOffsets (the group is empty): the share-partition starts over at `offset`."""
        old = await self.persister.read(key, NO_EPOCH)
        await self.persister.initialize(key, old.state_epoch + 1 if old else 0, offset)
        self._drop(key)

    async def delete_state(self, keys: Iterable[ShareStateKey]) -> None:
        keys = list(keys)
        await self.persister.delete(keys)
        for key in keys:
            self._drop(key)

    async def forget_deleted_topics(self) -> None:
        """State of share-partitions whose topic is gone (Kafka deletes it with the topic)."""
        known = {topic_uuid(m) for m in self.partitions.topics()}
        gone = [k for k in self.store.keys() if k.topic_id not in known]
        if gone:
            log.info("deleting the share state of %d partitions of deleted topics", len(gone))
            await self.delete_state(gone)

    # ================================================================= internals
    def _still_led(self, live: LiveShare) -> bool:
        """Whether this broker still leads the live share-partition's data partition (alone: always)."""
        if not self.persister.clustered:
            return True
        leadership = self.persister.leadership
        current = leadership.leader(live.topic, live.index)
        return leadership.leads(live.topic, live.index) and current is not None and \
            current.epoch == live.partition.leader_epoch

    def _drop(self, key: ShareStateKey) -> None:
        live = self._live.pop(key, None)
        if live is not None:
            live.notify()

    async def _persist(self, live: LiveShare) -> tuple[int, str | None]:
        """Write what changed (the caller holds the lock)."""
        changes = live.state.changes()
        if changes is None:
            return NONE, None
        start, batches = changes
        try:
            await self.persister.write(live.key, state_epoch=live.state.state_epoch,
                                       leader_epoch=live.partition.leader_epoch, start_offset=start, batches=batches,
                                       delivery_complete_count=live.state.delivery_complete_count())
        except BrokerError as exc:  # fenced, or the share coordinator not reachable in time
            log.warning("writing the share state of %s failed (%s): it is read again", live.key, exc)
            self._drop(live.key)
            return _STATE_ERRORS.get(int(exc.code), int(exc.code)), f"writing the share-partition state failed: {exc}"
        except Exception as exc:
            log.exception("writing the share state of %s failed: it is reloaded from %s", live.key,
                          "__share_group_state")
            self._drop(live.key)
            return COORDINATOR_NOT_AVAILABLE, f"writing the share-partition state failed: {exc}"
        return NONE, None

    async def _open(self, group: str, topic_id: uuid.UUID, index: int,
                    readable: Readable = _everything) -> tuple[LiveShare, Any]:
        """The live share-partition and the log partition behind it (ShareError if either is gone,
        or the topic is not `readable`)."""
        meta = self.partitions.topic_by_id(topic_id)
        if meta is None:
            for key in [k for k in self._live if k.topic_id == topic_id]:
                self._drop(key)
            raise ShareError(UNKNOWN_TOPIC_ID, f"no topic with id {topic_id}")
        if not readable(meta.name):
            raise ShareError(TOPIC_AUTHORIZATION_FAILED, f"not authorized to read topic {meta.name}")
        try:
            part = await self.partitions.get(meta.name, index)
        except NotLeaderOrFollower as exc:  # cluster mode: another broker leads it (now)
            for key in [k for k in self._live if k.topic_id == topic_id and k.partition == index]:
                self._drop(key)
            raise ShareError(NOT_LEADER_OR_FOLLOWER, str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - no such partition, or the topic went meanwhile
            raise ShareError(UNKNOWN_TOPIC_OR_PARTITION, f"{meta.name}-{index}: {exc}") from None
        key = ShareStateKey(group, topic_id, index)
        live = self._live.get(key)
        if live is not None and live.partition is part:
            return live, part
        lock = self._opening.setdefault(key, asyncio.Lock())
        async with lock:
            live = self._live.get(key)
            if live is not None and live.partition is not part:  # led again since: its state is read again
                self._drop(key)
                live = None
            if live is None:
                try:
                    state = await self._read_or_initialize(key, part, group)
                except BrokerError as exc:  # the share coordinator not reachable in time, or this leader fenced
                    raise ShareError(_STATE_ERRORS.get(int(exc.code), int(exc.code)), str(exc)) from None
                except Exception as exc:
                    log.exception("reading the share state of %s failed", key)
                    raise ShareError(COORDINATOR_NOT_AVAILABLE, f"reading the share state failed: {exc}") from None
                live = self._live[key] = LiveShare(key, meta.name, index, SharePartition.from_persisted(state), part)
        self._opening.pop(key, None)
        return live, part

    async def _read_or_initialize(self, key: ShareStateKey, part: Any, group: str):
        """The share-partition's state, read at this leader's epoch; a partition without one
        starts where share.auto.offset.reset says, written before it is used."""
        state = await self.persister.read(key, part.leader_epoch)
        if state is not None and state.start_offset != UNINITIALIZED:
            return state
        reset = self.configs.value(group, "share.auto.offset.reset")
        # by_duration on a bucket partition may read its closed segments (ranged GETs)
        run = self.partitions.run_bucket_read if part.closed is not None else self.partitions.run_read
        start = await run(_reset_offset, part, reset)
        await self.persister.initialize(key, state.state_epoch if state else 0, start)
        log.info("share group %s starts %s-%d at offset %d", group, part.topic, part.index, start)
        state = await self.persister.read(key, part.leader_epoch)  # records this leader's epoch with it
        if state is None:
            raise ShareCoordinatorError(f"the share state of {key} was deleted meanwhile",
                                        ErrorCode.coordinator_not_available)
        return state


def _read(part: Any, offset: int, max_bytes: int, bound: int, committed: bool) -> tuple[bytes, list | None]:
    """Reader thread: whole batches from `offset` (below `bound`), at least one, and (committed)
    the aborted transactions overlapping them where they came from the bucket's closed segments
    (None: the caller takes the cache's).
    Below the cache's start of a bucket partition, its closed segments (ranged GETs)."""
    log_ = part.log
    if part.closed is not None and offset < log_.log_start_offset:
        records, aborted, upper = part.read_closed(offset, max_bytes, True, bound, committed)
        if records:
            return records, aborted
        offset = max(upper, log_.log_start_offset)  # no closed batch at or above it (a compacted end)
    if not log_.log_start_offset <= offset < log_.log_end_offset:
        return b"", None
    try:
        return log_.read(offset, max_bytes, max_offset=bound, min_one_message=True).to_bytes(), None
    except OffsetOutOfRangeError:
        if part.closed is None or offset >= log_.log_start_offset:
            raise
        return _read(part, offset, max_bytes, bound, committed)  # a sealed segment left the cache meanwhile


def _reset_offset(part: Any, reset: str) -> int:
    """Where a share-partition without state starts (share.auto.offset.reset)."""
    from ..group.group_configs import iso_duration_ms

    if reset == "earliest":
        return part.history_start_offset
    if reset.startswith("by_duration:"):
        # the whole log's first record at most that old: a bucket's closed segments included
        found = part.offset_for_timestamp(now_ms() - iso_duration_ms(reset[len("by_duration:"):]))
        return found.offset if found is not None else part.high_watermark
    return part.high_watermark
