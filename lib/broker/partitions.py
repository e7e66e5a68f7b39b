"""Topic -> partition -> Log, backed by the TopicRegistry in shared storage.

Disk work never runs on the event loop. Appends, flushes, refreshes and closes of all partitions
run on ONE writer thread (`self.io`), which is the Log's single-writer contract and keeps each
partition's idempotence check + append one atomic step. Fetch reads run on a small reader pool
(`run_read`): Log reads work on an immutable snapshot, so they may overlap appends, and a fetch
never waits behind an fsync (flush.messages=1 fsyncs every append). Only cheap attribute reads
(log end offset, log start offset) happen on the loop thread.

Fetches that wait for data (max_wait_ms long poll) park on one future that `Partition.watch`
registers with each of their partitions: the next append to any of them (or shutdown) resolves it.

Idle producers' state expires (Kafka's producer.id.expiration.ms): `remove_expired_producers`,
run periodically by the server, drops it from every open partition on the I/O thread; an opening
partition leaves its snapshot's expired producers out. Both read `clock` (ms; tests replace it).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import shutil
import time
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable

from topiclake.segments.config import LogConfig
from topiclake.segments.errors import LogClosedError, UnknownTopicError
from topiclake.segments.leader_fence import PartitionFence
from topiclake.segments.storage import StorageLayout, TopicMeta, TopicRegistry, validate_topic_name

from .clock import SYSTEM, Clock
from .constants import LEADER_EPOCH
from .errors import NotLeaderOrFollower, UnknownTopicOrPartition
from .leadership import DEFAULT_REPLICATION, Leadership, Replication
from .log_close import close_logs
from .partition import Partition
from .producer_state import EXPIRATION_MS

log = logging.getLogger(__name__)

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})  # Kafka's
TOPIC_CACHE_TTL_S = 2.0  # topics changed by another process (CLI, jobs) show up within this
OPEN_THREADS = 8  # an open or a takeover is ~30 ms, mostly fsyncs: 8 overlap them (bench/failover.py)
BUCKET_READ_THREADS = 4  # Kafka's remote.log.reader.threads is 10; a GET here reads 4 MiB ahead
REFRESH_SETTLED_NS = 1_000_000_000  # a directory mtime this old is past any filesystem clock tick
FSYNC_THREADS = 8  # cluster mode: a produce request's partitions are fsynced (and fenced) together


def topic_uuid(meta: TopicMeta) -> uuid.UUID:
    """The registry's base64 topic id as the UUID Kafka sends on the wire."""
    if not meta.topic_id:
        return uuid.UUID(int=0)
    return uuid.UUID(bytes=base64.urlsafe_b64decode(meta.topic_id + "=" * (-len(meta.topic_id) % 4)))


def _directories_changed(parts: list[Partition]) -> list[tuple[Partition, int | None]]:
    """The partitions whose log directory's mtime is not the one their last refresh saw, with it
    (None: the stat failed; the refresh says why)."""
    due: list[tuple[Partition, int | None]] = []
    for part in parts:
        try:
            mtime_ns: int | None = os.stat(part.log.directory).st_mtime_ns
        except OSError:
            mtime_ns = None
        if mtime_ns is None or mtime_ns != part.refreshed_mtime_ns:
            due.append((part, mtime_ns))
    return due


class PartitionManager:
    def __init__(self, layout: StorageLayout, *, default_partitions: int = 1,
                 producer_id_expiration_ms: int = EXPIRATION_MS,
                 clock: Clock = SYSTEM, leadership: Leadership | None = None, bucket: Any = None):
        """`leadership`: in cluster mode, which partitions this broker leads; a partition opens
        only through `take_over` then, and `get` of any other is NOT_LEADER_OR_FOLLOWER. None:
        one broker on the root, leading every partition (`get` opens it on first use).
        `bucket`: a bucket root's BucketService; a partition opens by a takeover from the bucket."""
        self.bucket = bucket
        self.layout = layout
        self.leadership = leadership if leadership is not None and leadership.clustered else None
        self.registry = TopicRegistry(layout)
        self.default_partitions = default_partitions
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.clock = clock
        self.io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="topiclake-io")
        self.readers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="topiclake-read")
        # Reads below a bucket partition's cache (ranged GETs, seconds while the store is slow or
        # down) have their own threads, as Kafka's remote.log.reader.threads: they never hold up
        # the fetches served from the cache.
        self.bucket_readers = ThreadPoolExecutor(max_workers=BUCKET_READ_THREADS,
                                                 thread_name_prefix="topiclake-bucket-read")
        # Opening a log (at start, on first use, a takeover: recovery, fsyncs) runs here, not on
        # the writer thread: appends to open partitions never wait behind it, and the opens of
        # many partitions overlap their fsyncs. A Log being opened is its opener's alone until
        # it is published in `_partitions`.
        self.openers = ThreadPoolExecutor(max_workers=OPEN_THREADS, thread_name_prefix="topiclake-open")
        # Cluster mode: the fsyncs and fence checks of one produce request's partitions overlap
        # here while the writer thread waits for them (so no append runs meanwhile): a request
        # spread over 100 partitions costs about one fsync, not 100 in a row.
        self.confirmers = ThreadPoolExecutor(max_workers=FSYNC_THREADS, thread_name_prefix="topiclake-fsync")
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._opening: dict[tuple[str, int], asyncio.Future] = {}
        self._topics: dict[str, tuple[float, TopicMeta | None]] = {}
        self._log_configs: dict[str, tuple[TopicMeta, LogConfig]] = {}  # topic -> (its entry, its LogConfig)
        # The root, open from the start: a stop's one syncfs through it makes every closed log
        # durable and reports any write-back error since now, as each file's fsync would (log_close).
        layout.root.mkdir(parents=True, exist_ok=True)
        self._root_fd = os.open(layout.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        weakref.finalize(self, os.close, self._root_fd)

    async def run_io(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.io, fn, *args)

    def queue_io(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future:
        """`fn(*args)` queued on the I/O thread now; a future of its outcome. Cancelling the future
        (its awaiter cancelled) does not take the job back: it runs anyway, as a queued Produce's
        appends must (the log holds a prefix of a connection's requests). One asyncio future set
        from the thread, not run_in_executor's pair chained (and a shield around them): a Produce
        per partition of a wide topic makes this thousands of times a second."""
        loop = asyncio.get_running_loop()
        outcome = loop.create_future()

        def settle(result: Any, failure: BaseException | None) -> None:
            if outcome.done():
                return  # cancelled: nobody waits for it
            if failure is None:
                outcome.set_result(result)
            else:
                outcome.set_exception(failure)

        def job() -> None:
            try:
                result = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiter, as run_in_executor would
                loop.call_soon_threadsafe(settle, None, exc)
            else:
                loop.call_soon_threadsafe(settle, result, None)

        self.io.submit(job)
        return outcome

    def confirm_appends(self, parts: list[Partition]) -> list[BaseException | None]:
        """Cluster mode, on the I/O thread after `append_batch(confirm=False)` of each: confirm
        them all (fsync, then the fence), overlapping; per partition, None or why it failed."""
        def confirm(part: Partition) -> BaseException | None:
            try:
                part.confirm()
            except LogClosedError:
                # Resigned between its append and now (the writer thread ran the close in
                # between): not acknowledged, and retriable, as when the fence moved.
                return NotLeaderOrFollower(f"{part} is no longer led by this broker")
            except Exception as exc:  # noqa: BLE001 - handed back to the waiting producer, which answers with it
                return exc
            return None

        if len(parts) <= 1:
            return [confirm(part) for part in parts]
        return list(self.confirmers.map(confirm, parts))

    async def run_read(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.readers, fn, *args)

    async def run_bucket_read(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`run_read` for a read that goes below a bucket partition's cache (the bucket's GETs)."""
        return await asyncio.get_running_loop().run_in_executor(self.bucket_readers, fn, *args)

    # -- topics
    def topic(self, name: str, *, fresh: bool = False) -> TopicMeta:
        """The topic's registry entry (InvalidTopicError / UnknownTopicError), cached briefly."""
        validate_topic_name(name)
        now = time.monotonic()
        cached = self._topics.get(name)
        if fresh or cached is None or now - cached[0] > TOPIC_CACHE_TTL_S:
            try:
                meta = self.registry.get(name)
            except UnknownTopicError:
                meta = None
            cached = self._topics[name] = (now, meta)
        if cached[1] is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        return cached[1]

    def topics(self) -> list[TopicMeta]:
        metas = self.registry.list()
        now = time.monotonic()
        for meta in metas:
            self._topics[meta.name] = (now, meta)
        return metas

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMeta | None:
        """The topic with this id: from the topic cache when it knows the id (requests by id,
        Produce v13 and Fetch v13+, come often), else from a fresh listing of the registry."""
        for _at, meta in list(self._topics.values()):
            if meta is not None and topic_uuid(meta) == topic_id:
                try:
                    current = self.topic(meta.name)  # re-read once the cache entry is stale
                except UnknownTopicError:
                    break
                if topic_uuid(current) == topic_id:  # not deleted and re-created meanwhile
                    return current
                break
        for meta in self.topics():
            if topic_uuid(meta) == topic_id:
                return meta
        return None

    def forget_topic(self, name: str) -> None:
        self._topics.pop(name, None)

    def create_topic(self, name: str, partitions: int, config: dict[str, str] | None = None,
                     replication: Replication = DEFAULT_REPLICATION) -> TopicMeta:
        """`replication`: the partitions' replicas in cluster mode (a broker alone is the only one)."""
        meta = self.registry.create(name, partitions, config)
        self._topics[name] = (time.monotonic(), meta)
        if self.leadership is not None:
            self.leadership.topic_created(name, meta.partitions, replication)
        return meta

    def add_partitions(self, name: str, count: int) -> TopicMeta:
        """CreatePartitions: grow the topic to `count` partitions (the registry checks it grows)."""
        old = self.topic(name, fresh=True).partitions
        meta = self.registry.add_partitions(name, count)
        self.forget_topic(name)
        if self.leadership is not None:
            self.leadership.partitions_added(name, old, meta.partitions)
        return meta

    async def delete_topic(self, name: str) -> TopicMeta:
        meta = self.topic(name, fresh=True)
        opening = [future for (topic, _index), future in self._opening.items() if topic == name]
        if opening:  # opened off the writer thread: finished (and closed below) before the directories go
            await asyncio.gather(*opening, return_exceptions=True)
        for key in [k for k in self._partitions if k[0] == name]:
            part = self._partitions.pop(key)
            part.notify()
            if self.bucket is not None:  # its tail leaves the tick; produces waiting on it are answered
                self.bucket.release(part)
            await self.run_io(part.log.close)
        meta = await self.run_io(self.registry.delete, name)
        self.forget_topic(name)
        if self.leadership is not None:
            self.leadership.topic_deleted(name)
        return meta

    async def apply_config(self, meta: TopicMeta) -> None:
        """A topic's config changed: open logs take the new LogConfig (opens in flight, as at a
        start's background open, took the old one: they finish first, then are updated here)."""
        self._topics[meta.name] = (time.monotonic(), meta)
        opening = [future for (topic, _index), future in self._opening.items() if topic == meta.name]
        if opening:
            await asyncio.gather(*opening, return_exceptions=True)
        config = meta.log_config
        for (topic, _index), part in list(self._partitions.items()):
            if topic == meta.name:
                part.config = config
                await self.run_io(part.log.update_config, config)

    async def apply_defaults(self) -> None:
        """The cluster-wide topic defaults changed: cached topics are re-read, open logs take
        their new LogConfig."""
        self._topics.clear()
        for name in sorted({topic for topic, _index in self._partitions}):
            try:
                await self.apply_config(self.topic(name, fresh=True))
            except UnknownTopicError:  # deleted meanwhile
                continue

    # -- partitions
    async def get(self, topic: str, index: int) -> Partition:
        """The open partition (opening its log, with recovery, on first use). In cluster mode only
        a partition this broker leads (waiting for its takeover if one is in progress)."""
        key = (topic, index)
        part = self._partitions.get(key)
        if part is not None:
            return part
        if self.leadership is not None:
            taking_over = self._opening.get(key)
            if taking_over is None:
                raise NotLeaderOrFollower(f"this broker does not lead {topic}-{index}")
            return await asyncio.shield(taking_over)
        meta = self.topic(topic)
        if not 0 <= index < meta.partitions:
            meta = self.topic(topic, fresh=True)  # partitions may have been added elsewhere
            if not 0 <= index < meta.partitions:
                raise UnknownTopicOrPartition(
                    f"topic {topic!r} has {meta.partitions} partitions, there is no partition {index}")
        opening = self._opening.get(key)
        if opening is None:
            opening = self._opening[key] = asyncio.ensure_future(self._open(meta, index))
            opening.add_done_callback(lambda _f: self._opening.pop(key, None))
        return await asyncio.shield(opening)

    def _log_config(self, meta: TopicMeta) -> LogConfig:
        """`meta.log_config`, parsed once per topic entry (not per partition: 2,000 opens at start)."""
        cached = self._log_configs.get(meta.name)
        if cached is None or cached[0] is not meta:
            cached = self._log_configs[meta.name] = (meta, meta.log_config)
        return cached[1]

    async def _open(self, meta: TopicMeta, index: int) -> Partition:
        config = self._log_config(meta)
        directory = self.layout.log_dir(meta.name, index)

        def open_log() -> Partition:
            from topiclake.segments.log import Log

            # (Log.open makes the directory of a new partition)
            log_ = Log.open(directory, config, topic=meta.name, partition=index)
            part = Partition(meta.name, index, log_, config)
            # The load's listing, if current: nothing changed the directory's snapshots since.
            part.load_state(now_ms=self.clock(), expiration_ms=self.producer_id_expiration_ms,
                            names=log_.load_result.names)
            return part

        loop = asyncio.get_running_loop()
        if self.bucket is None:
            part = await loop.run_in_executor(self.openers, open_log)
        else:
            part = await loop.run_in_executor(
                self.openers, self.bucket.open_partition, meta, index, directory, self._bucket_partition(meta, index))
        self._partitions[(meta.name, index)] = part
        if self.bucket is not None:
            self.bucket.serve(part)
        # DEBUG: a start opens every internal-topic partition (50 of __consumer_offsets alone); the
        # coordinators log one summary line per start instead.
        log.debug("opened %s-%d: offsets [%d, %d)", meta.name, index, part.log_start_offset, part.log_end_offset)
        return part

    def _bucket_partition(self, meta: TopicMeta, index: int) -> Callable[[Any, int], Partition]:
        """How a bucket takeover makes the Partition of its recovered Log, led at `epoch`."""
        def make(log_: Any, epoch: int) -> Partition:
            part = Partition(meta.name, index, log_, meta.log_config)
            part.bucket_epoch = part.leader_epoch = epoch  # clients are told the takeover's epoch
            part.load_state(now_ms=self.clock(), expiration_ms=self.producer_id_expiration_ms)
            return part
        return make

    async def open_many(self, keys: Iterable[tuple[str, int]]) -> None:
        """Open together those of the partitions `keys` names that are not open yet (their opens
        overlap on the opener threads), before a request's partition-by-partition work: a
        produce to 2,000 partitions after a restart waits for about one open, not 2,000 in a
        row. A partition that cannot be opened is left for `get` to report."""
        missing = {key for key in keys if key not in self._partitions}
        if len(missing) > 1:
            await asyncio.gather(*(self.get(*key) for key in missing), return_exceptions=True)

    async def open_all(self, *, keep_going: bool = False) -> int:
        """Open every partition of every topic (at start); how many opened. `keep_going`: one
        that fails is logged and left for `get` to report, the others still open.
        At most OPEN_THREADS opens are queued at a time: a client's request for a partition not
        open yet has its open start at once, not behind thousands nobody asked for yet."""
        keys = iter([(meta.name, index) for meta in self.topics() for index in range(meta.partitions)])
        results: list[Partition | BaseException] = []

        async def open_next() -> None:
            for key in keys:  # one iterator shared by the openers: each key is taken once
                try:
                    results.append(await self.get(*key))
                except Exception as exc:
                    if not keep_going:
                        raise
                    results.append(exc)

        await asyncio.gather(*(open_next() for _ in range(OPEN_THREADS)))
        failed = [result for result in results if isinstance(result, BaseException)]
        if failed:
            log.error("opening %d partitions at start failed; the first: %s", len(failed), failed[0])
        return len(results) - len(failed)

    # -- leadership (cluster mode)
    async def take_over(self, topic: str, index: int, epoch: int) -> Partition:
        """Become the leader of `epoch` (won in ZooKeeper): claim the epoch in storage (fencing
        the previous leader), recover the log it left with the epoch history, record where this
        epoch starts, continue in a segment of this broker's own (leader_fence's steps 1-4)."""
        key = (topic, index)
        await self.resign(topic, index)
        directory = self.layout.log_dir(topic, index)

        def take_over_log() -> Partition:
            from topiclake.segments.log import Log

            if self.bucket is not None:  # from the bucket at `epoch`, into this broker's cache
                meta = self.bucket.topic_meta(lambda: self.topic(topic, fresh=True))
                return self.bucket.open_partition(meta, index, directory, self._bucket_partition(meta, index), epoch)
            meta = self.topic(topic, fresh=True)
            directory.mkdir(parents=True, exist_ok=True)
            fence = PartitionFence(directory)
            history = fence.begin_takeover(epoch)
            log_ = Log.open(directory, meta.log_config, topic=topic, partition=index, epochs=history,
                            create_segment=fence.create_segment)
            try:
                log_.epochs = fence.record_start(epoch, log_.log_end_offset)
                log_.take_over()
                part = Partition(topic, index, log_, meta.log_config)
                part.load_state(now_ms=self.clock(), expiration_ms=self.producer_id_expiration_ms)
                part.lead(epoch, fence)
            except BaseException:
                log_.close_handlers()
                raise
            return part

        opening = self._opening[key] = asyncio.ensure_future(
            asyncio.get_running_loop().run_in_executor(self.openers, take_over_log))
        try:
            part = await asyncio.shield(opening)
        finally:
            if self._opening.get(key) is opening:
                del self._opening[key]
        self._partitions[key] = part
        if self.bucket is not None:
            self.bucket.serve(part)
        log.debug("leading %s-%d at epoch %d: offsets [%d, %d)", topic, index, epoch, part.log_start_offset,
                 part.log_end_offset)
        return part

    async def resign(self, topic: str, index: int) -> None:
        """Stop leading: requests get NOT_LEADER_OR_FOLLOWER from now on, parked fetches answer,
        and the log's files are let go without writing anything (the next leader owns them)."""
        part = self._partitions.pop((topic, index), None)
        if part is None:
            return
        part.notify()
        if self.bucket is not None:
            self.bucket.release(part)
        await self.run_io(part.log.close_handlers)
        if self.bucket is not None:  # the cache holds only the partitions this broker leads
            await self.run_io(shutil.rmtree, part.log.directory, True)
        log.debug("no longer leading %s-%d (epoch %d)", topic, index, part.leader_epoch)

    def leader_epoch_of(self, topic: str, index: int) -> int:
        """The epoch clients are told for a partition (a bucket takeover's once it is open)."""
        return getattr(self._partitions.get((topic, index)), "leader_epoch", LEADER_EPOCH)

    def opened(self, topic: str, index: int) -> Partition | None:
        """The partition if it is open (no open, no wait: a fetch session's look at its quiet partitions)."""
        return self._partitions.get((topic, index))

    def serves(self, part: Partition) -> bool:
        """Whether `part` is still the open partition of its key (cluster mode: not resigned)."""
        return self._partitions.get((part.topic, part.index)) is part

    def open_partitions(self) -> list[Partition]:
        return list(self._partitions.values())

    async def refresh_all(self) -> None:
        """Pick up segment swaps/deletions and log start offsets moved by maintenance jobs, in the
        partitions whose log directory changed since they were last looked at: a job renames
        files there (segments swapped or retired, the log start checkpoint replaced), which moves
        the directory's mtime. One stat a partition, on a reader thread; the writer thread only
        refreshes those (a round over every partition cost 0.1 ms each there: bench/refresh.py)."""
        now_ns = time.time_ns()  # before the stats: a directory changed within the settle time is looked at again
        due = await self.run_read(_directories_changed, list(self._partitions.values()))
        for part, mtime_ns in due:
            if not self.serves(part):
                continue  # resigned meanwhile (cluster mode): its log is closed
            try:
                refreshed = await self.run_io(part.refresh)
            except LogClosedError:
                continue  # deleted or let go (resigned) while this walk went over the partitions
            except Exception:
                log.exception("refreshing %s-%d failed", part.topic, part.index)
                continue
            # A change in the same filesystem clock tick as the mtime seen would leave it as it
            # was: only an mtime older than any tick is trusted to move on the next change.
            settled = refreshed and mtime_ns is not None and now_ns - mtime_ns > REFRESH_SETTLED_NS
            part.refreshed_mtime_ns = mtime_ns if settled else None

    async def remove_expired_producers(self) -> int:
        """Kafka's PeriodicProducerExpirationCheck over every open partition; the number of
        producer ids removed."""
        removed = 0
        for part in list(self._partitions.values()):
            try:
                removed += len(await self.run_io(part.remove_expired_producers, self.clock(),
                                                 self.producer_id_expiration_ms))
            except Exception:
                log.exception("expiring producers of %s-%d failed", part.topic, part.index)
        return removed

    async def flush_all(self) -> None:
        for part in list(self._partitions.values()):
            await self.run_io(part.log.flush)

    async def close(self) -> None:
        """Flush and close every log, then write their clean-shutdown markers: a marker only once
        every log is durable (Kafka's LogManager.shutdown). Opens in flight finish first, so
        they are closed too."""
        opening = list(self._opening.values())
        if opening:
            await asyncio.gather(*opening, return_exceptions=True)
        parts = list(self._partitions.values())
        for part in parts:
            part.notify()
        started = time.monotonic()
        closed = await self.run_io(close_logs, parts, self._root_fd)  # on the writer thread: nothing appends meanwhile
        log.info("closed %d of %d logs in %.2f s", closed, len(parts), time.monotonic() - started)
        self._partitions.clear()
        self.openers.shutdown(wait=True)
        self.confirmers.shutdown(wait=True)
        self.readers.shutdown(wait=True)
        self.bucket_readers.shutdown(wait=True)
        self.io.shutdown(wait=True)

