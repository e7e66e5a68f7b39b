"""One runtime for the coordinators that keep their state in an internal topic (Kafka's
`CoordinatorRuntime`, coordinator-common).

The group coordinator (`__consumer_offsets`), the transaction coordinator (`__transaction_state`)
and the share coordinator (`__share_group_state`) each keep one state machine (a *shard*) per
partition of their topic, built only from that partition's records. This module owns what they
share, so that leadership moving between brokers is one call per partition (`load`, `unload`):

- the internal topic, created on first use with its config; once it exists its partition count
  decides the key -> partition mapping;
- loading a partition: replay it from its log start into a fresh shard. A torn tail ends the
  replay; a record that does not decode or replay is logged (topic, partition, offset) and
  skipped, the same way for every coordinator. Unloading one: it stops serving, its parked
  requests are failed;
- whole-request errors while a partition is loading (COORDINATOR_LOAD_IN_PROGRESS), failed
  (COORDINATOR_NOT_AVAILABLE) or not owned here (NOT_COORDINATOR), raised in each coordinator's own
  error type (`error`);
- `write`: run an operation on a shard under the partition's lock, append the records it returns,
  and only then answer (or complete the parked requests it names). A failed append reloads the
  partition from its log, so a shard only ever holds what its log says;
- deferred responses (a JoinGroup parked until its rebalance completes) and timers.

Two ways a state machine applies its records, both built on the one `replay` the load uses:
- the op applies them itself and returns them (the group cores, as Kafka's group coordinator
  does): `Coordinator.replays_writes = False`;
- the runtime replays them after the append (the transaction and share coordinators change state
  only through `replay`, live and at load): `replays_writes = True`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Generic, Iterable, Protocol, Sequence, TypeVar

from topiclake.segments.batch import NO_SEQUENCE, Record, build_batch, iter_batches, read_header
from topiclake.segments.control import ControlRecordType, parse_control_record
from topiclake.segments.errors import TopicAlreadyExistsError, UnknownTopicError
from topiclake.segments.leader_fence import FencedLeaderError

from .clock import SYSTEM, Clock
from .constants import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from .markers import COORDINATOR_EPOCH, write_marker
from .request_time import waiting

log = logging.getLogger(__name__)

S = TypeVar("S")  # a coordinator's state machine of one partition
T = TypeVar("T")  # a response
LOAD_CHUNK_BYTES = 4 * 1024 * 1024
STOP_GRACE_S = 5.0  # how long `stop` lets a timer round in progress finish
# A failed load (e.g. the bucket unreachable at a takeover) is tried again after these delays,
# doubling up to the last: a transient failure heals without a leadership change (Kafka's stays
# failed until one), a lasting one (a corrupt log) is logged at most twice a minute.
RELOAD_FIRST_S = 1.0
RELOAD_MAX_S = 30.0


class CoordinatorErrorCode(enum.IntEnum):
    """Kafka's codes for a request that reached a coordinator partition it cannot serve now."""

    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16


ErrorFactory = Callable[[CoordinatorErrorCode, str], Exception]


class EncodedRecord(Protocol):
    def key_bytes(self) -> bytes | None: ...

    def value_bytes(self) -> bytes | None: ...


@dataclass(frozen=True, slots=True)
class InternalTopic:
    name: str
    partitions: int  # used when the runtime creates the topic; an existing topic's own count wins
    config: dict[str, str]


@dataclass(frozen=True, slots=True)
class Completion(Generic[T]):
    """The response to an earlier, parked request, now ready."""

    ticket: int
    response: T


@dataclass(frozen=True, slots=True)
class CoordinatorResult(Generic[T]):
    """What an operation on a shard returns (Kafka's CoordinatorResult).

    `records` are appended to the partition before any response (this one or those in
    `completions`) is sent. `response` is None when the request is parked: its answer arrives
    later as the Completion with this `ticket`, returned by a later operation or a timer.
    """

    response: T | None
    records: Sequence[Any] = ()
    completions: Sequence[Completion] = ()
    ticket: int | None = None


class Coordinator(Protocol[S]):
    """What a coordinator tells the runtime about its state machine and its records."""

    topic: InternalTopic
    replays_writes: bool  # True: the runtime replays a write's records after appending them

    def new_shard(self, index: int) -> S: ...

    def decode(self, key: bytes | None, value: bytes | None) -> Any:
        """The record, or None to skip it quietly (a type this coordinator does not keep)."""

    def replay(self, shard: S, record: Any, offset: int, producer_id: int, now: int) -> None: ...

    def replay_marker(self, shard: S, producer_id: int, commit: bool, now: int) -> None: ...

    def loaded(self, index: int, shard: S, records: int) -> None: ...

    def unloaded(self, index: int, shard: S) -> None: ...


class Status(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"  # the load failed: COORDINATOR_NOT_AVAILABLE until a retried load succeeds
    UNLOADED = "unloaded"


@dataclass(eq=False)
class CoordinatorShard(Generic[S]):
    """One owned partition of the internal topic: its state machine and what guards it."""

    index: int
    status: Status = Status.LOADING
    state: S | None = None
    partition: Any = None  # the open Partition of the internal topic
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    settled: asyncio.Event = field(default_factory=asyncio.Event)  # set once not LOADING
    waiters: dict[int, asyncio.Future] = field(default_factory=dict)  # parked requests by ticket
    failed_loads: int = 0  # in a row: sets the delay of the next retry


class CoordinatorRuntime(Generic[S]):
    def __init__(self, partitions: Any, coordinator: Coordinator[S], *, error: ErrorFactory,
                 clock: Clock = SYSTEM, owns_every_partition: bool = True):
        """`owns_every_partition`: a single broker leads every partition of the topic, so each
        is loaded as soon as the topic exists. Otherwise leadership calls `load`/`unload`."""
        self.partitions = partitions  # the broker's PartitionManager
        self.coordinator = coordinator
        self.topic = coordinator.topic
        self.error = error
        self.clock = clock
        self.owns_every_partition = owns_every_partition
        self._shards: dict[int, CoordinatorShard[S]] = {}
        self._partition_count: int | None = None  # of the topic, once it exists
        self._loads: list[asyncio.Task] = []  # scheduled loads: cancelled at stop (they only read)
        self._timers: list[asyncio.Task] = []
        self._stopping = asyncio.Event()

    # ===================================================================== the topic
    @property
    def partition_count(self) -> int:
        return self._partition_count if self.topic_exists else self.topic.partitions

    @property
    def topic_exists(self) -> bool:
        """Whether the topic exists (in a cluster another broker may have created it meanwhile:
        the registry is asked, through its short cache, until it does)."""
        if self._partition_count is None and not self.owns_every_partition:
            try:
                self._partition_count = self.partitions.topic(self.topic.name).partitions
            except UnknownTopicError:
                return False
        return self._partition_count is not None

    def open_existing_topic(self) -> bool:
        """At start: learn the topic's partition count if it exists (and own its partitions)."""
        try:
            meta = self.partitions.topic(self.topic.name, fresh=True)
        except UnknownTopicError:
            return False
        self._topic_found(meta.partitions)
        return True

    def ensure_topic(self) -> int:
        """Create the topic if it does not exist yet (as Kafka does on first use); its count."""
        if self._partition_count is not None:
            return self._partition_count
        try:
            meta = self.partitions.topic(self.topic.name, fresh=True)
        except UnknownTopicError:
            try:
                meta = self.partitions.create_topic(self.topic.name, self.topic.partitions, dict(self.topic.config))
                log.info("created %s with %d partitions", self.topic.name, meta.partitions)
            except TopicAlreadyExistsError:  # created concurrently (another request, the CLI)
                meta = self.partitions.topic(self.topic.name, fresh=True)
        self._topic_found(meta.partitions)
        return meta.partitions

    def _topic_found(self, count: int) -> None:
        if count != self.topic.partitions:
            # The topic decides: key -> partition must not change under existing state.
            log.warning("%s has %d partitions, the configuration says %d: using %d", self.topic.name, count,
                        self.topic.partitions, count)
        self._partition_count = count
        if self.owns_every_partition:
            self.schedule_load(range(count))

    # ================================================================= ownership
    def owned(self) -> list[int]:
        return sorted(self._shards)

    def schedule_load(self, indexes: Iterable[int]) -> None:
        """Own `indexes` now (requests get COORDINATOR_LOAD_IN_PROGRESS) and load them one after
        another in the background."""
        todo = [i for i in indexes if i not in self._shards]
        for index in todo:
            self._shards[index] = CoordinatorShard(index)
        if todo:
            self._start_load(self._load_each(todo))

    def _start_load(self, load: Awaitable[Any]) -> None:
        """Run a background load, kept (the finished ones dropped) so that `stop` cancels it."""
        self._loads = [t for t in self._loads if not t.done()]
        self._loads.append(asyncio.ensure_future(load))

    async def _load_each(self, indexes: list[int]) -> None:
        """Load the partitions one after another; one INFO line for them all (the partitions' own
        lines are DEBUG: a start would otherwise log one per partition, 50 of __consumer_offsets)."""
        started, loaded, records = time.monotonic(), 0, 0
        for index in indexes:
            count = await self._load_scheduled(index)
            if count is not None:
                loaded, records = loaded + 1, records + count
        log.info("%s: %d partitions loaded in %.2f s (%d records replayed)", self.topic.name, loaded,
                 time.monotonic() - started, records)

    async def _load_scheduled(self, index: int) -> int | None:
        """Load `index` if it is still waiting for its scheduled load (a request that waits for
        it loads it first, out of turn); the records replayed, None if it was not loaded here."""
        shard = self._shards.get(index)
        if shard is not None and shard.status is Status.LOADING:
            async with shard.lock:
                if self._shards.get(index) is shard and shard.status is Status.LOADING:
                    return await self._load(shard)
        return None

    async def _load_again(self, shard: CoordinatorShard[S], delay_s: float) -> None:
        """Retry a failed load of `shard` after `delay_s`, if it is still owned and still failed."""
        await asyncio.sleep(delay_s)
        async with shard.lock:
            if self._shards.get(shard.index) is shard and shard.status is Status.FAILED:
                await self._load(shard)

    async def settle(self) -> None:
        """Wait until no owned partition is loading (e.g. the loads a start scheduled)."""
        for shard in list(self._shards.values()):
            await shard.settled.wait()

    async def load(self, index: int) -> None:
        """Own partition `index` and (re)build its shard from its log; returns once it serves."""
        _ = self.topic_exists  # learns the partition count of a topic another broker created
        shard = self._shards.get(index)
        if shard is None:
            shard = self._shards[index] = CoordinatorShard(index)
        async with shard.lock:
            if self._shards.get(index) is shard:
                await self._load(shard)

    async def unload(self, index: int) -> None:
        """Stop serving partition `index`: requests get NOT_COORDINATOR, parked ones are failed,
        its state is dropped (the log keeps it for whoever loads it next)."""
        shard = self._shards.pop(index, None)
        if shard is None:
            return
        async with shard.lock:
            state, shard.state, shard.status = shard.state, None, Status.UNLOADED
            shard.settled.set()
            self._fail_waiters(shard, CoordinatorErrorCode.NOT_COORDINATOR)
            if state is not None:
                self.coordinator.unloaded(index, state)
        log.debug("unloaded %s-%d", self.topic.name, index)

    async def _load(self, shard: CoordinatorShard[S]) -> int | None:
        """Replay the partition into a fresh state machine; the caller holds the shard's lock.
        Returns the records replayed (None: the load failed)."""
        shard.status, shard.state = Status.LOADING, None
        shard.settled.clear()
        self._fail_waiters(shard, CoordinatorErrorCode.COORDINATOR_NOT_AVAILABLE)
        source = f"{self.topic.name}-{shard.index}"
        try:
            part = shard.partition = await self.partitions.get(self.topic.name, shard.index)
            state = self.coordinator.new_shard(shard.index)
            count = await self.partitions.run_read(self._replay_log, part.log, state, source)
        except Exception:
            delay = min(RELOAD_MAX_S, RELOAD_FIRST_S * 2 ** min(shard.failed_loads, 16))
            shard.failed_loads += 1
            log.exception("loading %s failed: its requests get COORDINATOR_NOT_AVAILABLE; loading it again in %.0f s",
                          source, delay)
            shard.status = Status.FAILED
            shard.settled.set()
            if not self._stopping.is_set():
                self._start_load(self._load_again(shard, delay))
            return None
        shard.state, shard.status, shard.failed_loads = state, Status.ACTIVE, 0
        shard.settled.set()
        self.coordinator.loaded(shard.index, state, count)
        return count

    def _replay_log(self, log_: Any, state: S, source: str) -> int:
        """Replay a whole partition into `state` (reader thread; nothing else sees `state` yet).
        Returns the number of records replayed."""
        coordinator, now = self.coordinator, self.clock()
        offset, end, count = log_.log_start_offset, log_.log_end_offset, 0
        while offset < end:
            result = log_.read(offset, LOAD_CHUNK_BYTES)
            data = result.to_bytes()
            if not data:
                break
            for batch in iter_batches(data, source=source, allow_partial_tail=True):
                if batch.last_offset < offset:
                    continue
                producer_id = batch.header.producer_id if batch.is_transactional else NO_PRODUCER_ID
                for record in batch.records():
                    if record.offset < offset:
                        continue
                    try:
                        if batch.is_control:
                            marker = parse_control_record(record)
                            if marker.type in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                                coordinator.replay_marker(state, batch.header.producer_id,
                                                          marker.type is ControlRecordType.COMMIT, now)
                            continue
                        decoded = coordinator.decode(record.key, record.value)
                        if decoded is not None:
                            coordinator.replay(state, decoded, record.offset, producer_id, now)
                            count += 1
                    except Exception as exc:  # noqa: BLE001 - one bad record must not make the whole partition unusable
                        log.error("%s offset %d: skipping a record that does not load: %s", source, record.offset,
                                  exc)
            offset = result.next_offset
        return count

    # ================================================================== lookups
    def active(self, index: int) -> CoordinatorShard[S]:
        """The shard of an owned, loaded partition; else the request's whole-request error."""
        shard = self._shards.get(index)
        if shard is None:
            raise self.error(CoordinatorErrorCode.NOT_COORDINATOR,
                             f"{self.topic.name}-{index} is not led by this broker")
        if shard.status is Status.LOADING:
            raise self.error(CoordinatorErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"{self.topic.name}-{index} is loading")
        if shard.status is not Status.ACTIVE:
            raise self.error(CoordinatorErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"{self.topic.name}-{index} could not be loaded")
        return shard

    async def wait_active(self, index: int) -> CoordinatorShard[S]:
        """As `active`, but waiting while the partition loads (loading it now if it waits its turn)."""
        shard = self._shards.get(index)
        if shard is not None and not shard.settled.is_set():
            await self._load_scheduled(index)
            await shard.settled.wait()
        return self.active(index)

    @contextlib.asynccontextmanager
    async def _holding(self, index: int, wait: bool = False) -> AsyncIterator[CoordinatorShard[S]]:
        """The active shard of `index` with its lock held (checked again once the lock is held:
        the partition may have been unloaded, reloaded or failed while this request waited).
        `wait`: wait while it loads instead of answering COORDINATOR_LOAD_IN_PROGRESS."""
        while True:
            shard = await self.wait_active(index) if wait else self.active(index)
            async with shard.lock:
                if self._shards.get(index) is shard:
                    yield self.active(index)
                    return

    def active_shards(self) -> list[CoordinatorShard[S]]:
        return [s for _, s in sorted(self._shards.items()) if s.status is Status.ACTIVE]

    def loading(self) -> bool:
        return any(s.status is Status.LOADING for s in self._shards.values())

    # =================================================================== writes
    async def write(self, index: int, op: Callable[[S, int], CoordinatorResult[T]], *,
                    producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                    wait: bool = False) -> T:
        """Run `op(state, now)` under the partition's lock, append its records (one batch;
        transactional when `producer_id` is given), then answer. A parked request waits here,
        outside the lock, for its completion. `wait`: wait while the partition loads."""
        async with self._holding(index, wait) as shard:
            now = self.clock()
            result = op(shard.state, now)
            parked = None
            if result.response is None and result.ticket is not None:
                parked = shard.waiters[result.ticket] = asyncio.get_running_loop().create_future()
            if result.records:
                await self._append(shard, result.records, producer_id, producer_epoch, now)
            for completion in result.completions:
                fut = shard.waiters.pop(completion.ticket, None)
                if fut is not None and not fut.done():
                    fut.set_result(completion.response)
        if parked is None:
            return result.response
        try:
            with waiting():  # parked until the state moves on: not busy time (request quota)
                return await parked
        finally:
            shard.waiters.pop(result.ticket, None)

    async def _append(self, shard: CoordinatorShard[S], records: Sequence[EncodedRecord], producer_id: int,
                      producer_epoch: int, now: int) -> None:
        transactional = producer_id != NO_PRODUCER_ID
        batch = build_batch([Record(i, now, r.key_bytes(), r.value_bytes()) for i, r in enumerate(records)],
                            base_offset=0, producer_id=producer_id, producer_epoch=producer_epoch,
                            base_sequence=0 if transactional else NO_SEQUENCE, is_transactional=transactional)
        try:
            part = shard.partition
            # The partition's producer and transaction state follow the append, as for Produce: a
            # transactional batch holds back this partition's LSO until its marker.
            appended = await self.partitions.run_io(part.append_batch, batch, read_header(batch))
            part.notify()
            if self.coordinator.replays_writes:
                for i, record in enumerate(records):
                    self.coordinator.replay(shard.state, record, appended.first_offset + i, producer_id, now)
        except FencedLeaderError:
            raise self._moved(shard) from None
        except Exception:  # noqa: BLE001 - any failed append: the shard recovers, the client retries
            await self._recover(shard, f"appending {len(records)} records")
            raise self.error(CoordinatorErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"appending to {self.topic.name}-{shard.index} failed") from None

    async def write_marker(self, index: int, producer_id: int, producer_epoch: int, commit: bool, *,
                           coordinator_epoch: int = COORDINATOR_EPOCH) -> None:
        """Append a transaction's COMMIT/ABORT marker to the partition and replay it."""
        async with self._holding(index) as shard:
            try:
                part = shard.partition
                await self.partitions.run_io(functools.partial(write_marker, part, producer_id, producer_epoch, commit,
                                                               self.clock(), coordinator_epoch=coordinator_epoch))
            except FencedLeaderError:
                raise self._moved(shard) from None
            except Exception:  # noqa: BLE001 - any failed write: the shard recovers, the client retries
                await self._recover(shard, f"writing the {'COMMIT' if commit else 'ABORT'} marker of producer "
                                           f"{producer_id}")
                raise self.error(CoordinatorErrorCode.COORDINATOR_NOT_AVAILABLE,
                                 f"writing a marker to {self.topic.name}-{index} failed") from None
            part.notify()
            self.coordinator.replay_marker(shard.state, producer_id, commit, self.clock())

    async def with_partition(self, index: int, work: Callable[[Any], Any]) -> Any:
        """Run `work(partition)` on the I/O thread under the partition's lock (e.g. moving its log
        start offset), so no write of this coordinator interleaves."""
        async with self._holding(index) as shard:
            return await self.partitions.run_io(work, shard.partition)

    def _moved(self, shard: CoordinatorShard[S]) -> Exception:
        """Cluster mode: another broker leads the partition now (its append found the fence moved;
        leadership unloads it here next): the client finds the new coordinator. Nothing to reload."""
        log.info("%s-%d: a newer leader took the partition over: not the coordinator any more",
                 self.topic.name, shard.index)
        return self.error(CoordinatorErrorCode.NOT_COORDINATOR,
                          f"{self.topic.name}-{shard.index} moved to another broker")

    async def _recover(self, shard: CoordinatorShard[S], what: str) -> None:
        """The one reload-on-failure path: the state is rebuilt from what the log holds."""
        log.exception("%s to %s-%d failed: reloading it from its log", what, self.topic.name, shard.index)
        await self._load(shard)

    def _fail_waiters(self, shard: CoordinatorShard[S], code: CoordinatorErrorCode) -> None:
        waiters, shard.waiters = shard.waiters, {}
        for fut in waiters.values():
            if not fut.done():
                fut.set_exception(self.error(code, f"{self.topic.name}-{shard.index} moved on"))

    # =================================================================== timers
    def every(self, interval_s: float, work: Callable[[], Awaitable[None]], what: str) -> None:
        """Run `await work()` every `interval_s` until `stop`; a failed round is logged, not fatal."""
        self._timers.append(asyncio.create_task(self._every(interval_s, work, what)))

    async def _every(self, interval_s: float, work: Callable[[], Awaitable[None]], what: str) -> None:
        while True:
            try:
                await asyncio.wait_for(self._stopping.wait(), interval_s)
                return  # stopping: no new round
            except asyncio.TimeoutError:
                pass
            try:
                await work()
            except Exception:
                log.exception("%s failed; retrying in %.1f s", what, interval_s)

    async def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stop the timers, letting a round in progress finish its writes (a write cut off
        half-way would leave in memory what the log never got), then fail parked requests."""
        self._stopping.set()
        loads, timers, self._loads, self._timers = self._loads, self._timers, [], []
        for task in loads:
            task.cancel()
        _done, pending = await asyncio.wait(timers, timeout=grace_s) if timers else (set(), set())
        for task in pending:
            task.cancel()
        await asyncio.gather(*loads, *timers, return_exceptions=True)
        for shard in self._shards.values():
            self._fail_waiters(shard, CoordinatorErrorCode.COORDINATOR_NOT_AVAILABLE)
