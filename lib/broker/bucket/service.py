"""The broker's side of a bucket root: the lease, the metadata mirror, the partitions' tails and
the flush tick (docs/OBJECT-STORAGE.md, "Write path" and "Ownership and takeover").

Every `flush_ms` (or earlier: tick_schedule.TickSchedule), one tick on its own thread syncs the
metadata, then flushes every partition with unflushed batches, their PUTs in parallel on a pool,
each followed by its fence check; a produce request waiting on a partition is answered when its
offsets are flushed (`wait_flushed`), or with REQUEST_TIMED_OUT at its timeout (the store down:
producers retry, the tick keeps retrying the same bytes). A partition's seal and manifest poll
(`_maintain`) run beside the tick on their own pool, one at a time per partition
(`PartitionTail.maintaining`): a seal uploads up to a whole segment, and no flush of any partition
waits for it. Nothing here runs object I/O on the event loop.

A newer epoch, a lost lease or a metadata conflict means another broker leads this root: the
service is fenced, every waiting produce gets NOT_LEADER_OR_FOLLOWER, and the broker stops.

Cluster mode (`clustered`: ZooKeeper elects a leader per partition, docs/CLUSTER.md): no lease;
a partition is taken over at the epoch ZooKeeper gave (`open_partition(epoch=...)`) and let go
when the cluster node resigns it (`release`); a newer epoch in the bucket fences that partition
alone (the node resigns it), never the broker. The metadata objects are written by every broker
with If-Match read-modify-write: a request that changes them runs on the bucket's newest copy and
runs again when another broker's write won (`changing_metadata`), and every
`METADATA_REFRESH_S` the other brokers' changes are fetched into the cache (`on_metadata_changed`).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from functools import partial
from typing import Any, Awaitable, Callable

from topiclake.objectlog.fence import LeaderFenced
from topiclake.objectlog.flush import FlushConflict, FlushTimedOut
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.lease import OWNER_KEY, LeaseLost, Owner, OwnerLease
from topiclake.objectlog.manifest import ManifestConflict, StaleManifestWriter
from topiclake.objectlog.notices import NoticeWatcher, notice_key
from topiclake.segments.errors import UnknownTopicError
from topiclake.segments.ownership import LOCK_NAME
from topiclake.segments.storage import StorageLayout
from topiclake.store.errors import ObjectNotFound, ObjectStoreError, StoreUnavailable
from topiclake.store.objects import ObjectStore

from ..errors import NotLeaderOrFollower, RequestTimedOut
from .metadata import MetadataConflict, MetadataMirror, MetadataNotStored, reserve_producer_id_block
from .settings import BucketSettings
from .tail import MANIFEST_POLL_S, PartitionTail
from .takeover import take_over
from .tick_schedule import TickSchedule

log = logging.getLogger(__name__)

FLUSH_THREADS = 8  # one partition's flush is a PUT and a HEAD: 8 overlap on the network
SEAL_THREADS = 2  # seals upload whole segments: a few at once, beside the flushes
UNAVAILABLE = "unavailable"  # what `_guarded` returns when the store did not answer
FAILED = "failed"  # ... when the work failed otherwise (e.g. the store refused it for good)
RETRY_AFTER_TICKS = 0.9  # a failed flush's tail is due again at the regular tick after (flush_ms on), not before
FENCING_ERRORS = (LeaderFenced, FlushConflict, StaleManifestWriter, LeaseLost, MetadataConflict)
METADATA_REFRESH_S = 1.0  # cluster mode: how often the other brokers' metadata changes are fetched
METADATA_TRIES = 5  # cluster mode: a metadata change that keeps losing its race to other brokers
TOPIC_WAIT_S = 10.0  # cluster mode: a topic's state reaches ZooKeeper before its object the bucket
# Outcomes of a metadata sync.
SYNCED, LOST_RACE, NOT_SYNCED = "synced", "lost a race", "not synced"


class BucketService:
    def __init__(self, settings: BucketSettings, *, broker_id: int, host: str, port: int, clustered: bool = False):
        self.settings = settings
        self.clustered = clustered
        self.store = ObjectStore(settings.root)
        self.mirror = MetadataMirror(self.store, settings.cache_dir,
                                     resweep_after_s=(2.0, settings.flush_timeout_ms / 1000 + 2.0))
        self.lease = OwnerLease(self.store, broker_id=broker_id, host=host, port=port, lease_ms=settings.lease_ms)
        self.broker_id = broker_id
        self.tails: dict[tuple[str, int], PartitionTail] = {}
        # Changes of `tails` (the event loop's serve/release, the tick's sweep, a fence on any
        # thread): a check-then-remove of one tail must not remove the next one put there between.
        self._tails_lock = threading.Lock()
        self.fenced: str | None = None  # why this broker no longer leads the root
        self._stopping = False  # a stop began: ticks start no seal, poll or drop
        self._store_failing = False  # the last flush found the store unavailable
        self.on_fenced: Callable[[str], None] = lambda reason: None  # the server stops
        self.serves: Callable[[Any], bool] = lambda part: True  # PartitionManager.serves
        self.on_writer_thread: Callable[[Callable[[], Any]], Any] = lambda fn: fn()
        self.on_metadata_changed: Callable[[list[str]], None] = lambda keys: None  # cluster mode (any thread)
        self._metadata_lock = asyncio.Lock()  # cluster mode: one metadata change of this broker at a time
        # Cluster mode: set while a request changes metadata; the tick leaves the metadata to it
        # (a tick adopting a winner's object between the handling and its sync would lose the change).
        self._changing = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.schedule = TickSchedule(settings.flush_ms, settings.full_window_flush_ms)
        self._waiters: dict[PartitionTail, list[tuple[int, asyncio.Future]]] = {}
        self._pool = ThreadPoolExecutor(max_workers=FLUSH_THREADS, thread_name_prefix="topiclake-bucket")
        self._ticker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="topiclake-flush-tick")
        self._sealer = ThreadPoolExecutor(max_workers=SEAL_THREADS, thread_name_prefix="topiclake-seal")
        self._maintenance: dict[PartitionTail, Future] = {}  # scheduled or running (tick thread only)
        self._retry_at: dict[PartitionTail, float] = {}  # a failed flush's tail: not flushed again before (tick thread)
        self._notices = NoticeWatcher(self.store)
        self._notices_listed = 0.0  # monotonic time of the last LIST of the maintenance notices
        self._notices_job: Future | None = None  # that LIST, on the seal pool (never the tick's thread)
        self._tasks: list[asyncio.Task] = []

    # -- start (blocking: run in a thread)
    def prepare(self) -> None:
        """Empty the cache (nothing in it is trusted), hold the root's lease (waiting out a
        previous owner's), then bring the root's metadata from the bucket into the cache."""
        cache = self.settings.cache_dir
        for child in (cache / "log").iterdir() if (cache / "log").is_dir() else ():
            if child.name != LOCK_NAME:
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        if self.clustered:  # ZooKeeper decides who leads what: no lease
            self.mirror.download()
            return
        if self.store.head(OWNER_KEY) is not None:
            log.info("%s is leased by another broker: taking it over once it is not renewed for %d ms",
                     self.settings.root, self.settings.lease_ms)
        owner = self.lease.acquire()
        if self.lease.previous is not None:
            log.info("took the lease of %s from broker %d (generation %d)", self.settings.root,
                     self.lease.previous.broker_id, owner.generation)
        self.mirror.download()

    def reserve_producer_ids(self, block: int) -> int:
        return reserve_producer_id_block(self.store, block)

    def publish_root(self, claim_mode: Callable[[], Any]) -> None:
        """Cluster mode, at start (blocking): the cluster id and the root's mode in the bucket, the
        first broker's winning when several start at once (`claim_mode()` checks the mode again
        once the bucket's copy is adopted)."""
        claim_mode()  # before the cluster id: a root with an id and no mode is a single broker's
        StorageLayout(self.settings.cache_dir).cluster_id()
        for _ in range(METADATA_TRIES):
            if self._sync_metadata() == SYNCED:
                break
        claim_mode()

    def open_partition(self, meta: Any, index: int, directory: Any, make_partition: Callable[[Any, int], Any],
                       epoch: int | None = None) -> Any:
        """A partition taken over from the bucket (a takeover thread); its tail joins the tick
        when the partition manager serves it (`serve`). `epoch`: cluster mode's, from ZooKeeper
        (FencedLeaderError when the bucket has it already)."""
        if not self.clustered:
            self._check_lease()  # claiming an epoch without the lease would fence the root's owner
        elif self.fenced:
            raise NotLeaderOrFollower(f"this broker is stopping: {self.fenced}")
        keys = PartitionKeys(meta.name, index)
        part = take_over(self.store, keys, self.settings, directory, meta.log_config,
                         owner={"broker_id": self.broker_id}, make_partition=make_partition, epoch=epoch)
        tail: PartitionTail = part.tail
        tail.on_flushed = self._flushed
        tail.on_fenced = lambda reason: self._fenced_by(tail, reason)
        return part

    def _drop_tail(self, key: tuple[str, int], tail: PartitionTail) -> bool:
        """Remove `tail` if it is still the one of `key` (True), never another put there since."""
        with self._tails_lock:
            if self.tails.get(key) is not tail:
                return False
            del self.tails[key]
            return True

    def serve(self, part: Any) -> None:
        """On the event loop, once the partition manager serves `part` (opened by open_partition):
        its tail joins the tick. Not before: the tick drops the tails of partitions not served
        (deleted or resigned), and a tail dropped between the takeover and the partition's
        registration would never flush again, every produce to it timing out."""
        with self._tails_lock:
            self.tails[(part.topic, part.index)] = part.tail

    def topic_meta(self, read: Callable[[], Any]) -> Any:
        """Cluster mode, on a takeover thread: `read()` (the topic's registry entry), waiting for
        its object to reach the bucket (the broker that created it writes ZooKeeper first)."""
        deadline = time.monotonic() + TOPIC_WAIT_S
        while True:
            try:
                return read()
            except UnknownTopicError:
                if time.monotonic() > deadline:
                    raise
            self._refresh_metadata()
            time.sleep(0.1)

    def release(self, part: Any) -> None:
        """On the event loop: the partition is no longer led here (resigned, or its topic
        deleted); its tail leaves the tick and its waiting produces are told NOT_LEADER_OR_FOLLOWER."""
        tail = part.tail
        if tail is None:
            return
        self._drop_tail((part.topic, part.index), tail)
        self._fail_waiters_of(tail, f"{part} is no longer led by this broker")

    async def commit_log_start(self, part: Any, offset: int) -> None:
        """DeleteRecords on a bucket: after the cache's log start moved, the manifest's (on the
        seal pool, holding the partition's `maintaining`, so it never races the partition's seal)."""
        tail: PartitionTail = part.tail
        deadline = time.monotonic() + self.settings.flush_timeout_ms / 1000

        def commit() -> None:
            if not tail.maintaining.acquire(timeout=max(deadline - time.monotonic(), 0.001)):
                raise FlushTimedOut(f"{tail.keys.prefix}: a seal still runs")
            try:
                tail.commit_log_start(offset, deadline, self.on_writer_thread)
            finally:
                tail.maintaining.release()
        try:
            await asyncio.get_running_loop().run_in_executor(self._sealer, commit)
        except FENCING_ERRORS as exc:
            self._fenced_by(tail, f"{tail.keys.prefix}: {exc}")
            raise NotLeaderOrFollower(f"{part} is no longer led by this broker: {exc}") from None
        except (FlushTimedOut, StoreUnavailable, ManifestConflict) as exc:
            raise RequestTimedOut(f"{part}: the log start offset {offset} is not in the bucket yet: {exc}") from None

    def _check_lease(self) -> None:
        """NotLeaderOrFollower (and fenced) unless the lease object is still the one this broker
        wrote: a broker paused past its lease wakes up here before it claims anything."""
        if not self.fenced and not self._holds_lease():
            self.fence(f"{self.store.root.uri(OWNER_KEY)} is no longer this broker's lease")
        if self.fenced:
            raise NotLeaderOrFollower(f"this broker no longer leads {self.settings.root}: {self.fenced}")

    def _holds_lease(self) -> bool:
        """The lease object is the one this broker last wrote, or (a renewal of its own in flight
        changed the ETag) it names this broker at the generation it took."""
        current = self.store.head(OWNER_KEY)
        if current is not None and current.etag == self.lease.etag:
            return True
        try:
            found = Owner.from_json(self.store.get(OWNER_KEY))
        except ObjectNotFound:
            return False
        held = self.lease.owner
        return found is not None and held is not None and (found.generation, found.pid, found.broker_id) == (
            held.generation, held.pid, held.broker_id)

    # -- serving
    def start(self) -> None:
        """On the event loop, once partitions may open: the tick and the lease renewals."""
        self._loop = asyncio.get_running_loop()
        self.schedule.start()
        self._tasks = [asyncio.create_task(self._tick_forever()),
                       asyncio.create_task(self._refresh_forever() if self.clustered else self._renew_forever())]

    async def wait_flushed(self, part: Any, end: int, timeout_s: float) -> None:
        """Until offsets below `end` of `part` are in objects that passed the fence."""
        tail: PartitionTail = part.tail
        if tail.flushed_end >= end:
            return
        if self.fenced:
            raise NotLeaderOrFollower(f"{part} is no longer led by this broker: {self.fenced}")
        if self.tails.get((part.topic, part.index)) is not tail:
            # Released or fenced before this wait began (a pipelined request answered after the
            # ones before it): no tick flushes it again, so it would only time out.
            raise NotLeaderOrFollower(f"{part} is no longer led by this broker")
        future = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda done: done.cancelled() or done.exception())  # told to nobody after a timeout
        self._waiters.setdefault(tail, []).append((end, future))
        if tail.unflushed_bytes >= self.settings.flush_bytes:
            self.schedule.now()
        try:
            await asyncio.wait_for(asyncio.shield(future), max(timeout_s, 0.001))
        except asyncio.TimeoutError:
            raise RequestTimedOut(f"{part}: offsets below {end} were not stored in the bucket within "
                                  f"{timeout_s:.1f} s (is the object store reachable?)") from None

    async def changing_metadata(self, handle: Callable[[], Awaitable[Any]]) -> Any:
        """A request that changes the root's metadata: `handle()` it, and answer (return) once its
        files are in the bucket (on the tick's thread), not at the next tick. A store that is down
        only delays that to a later tick, which syncs before any data of the change is flushed.
        Cluster mode: handled on the bucket's newest metadata, and handled again on the winner's
        objects when another broker's write won the race (If-Match read-modify-write)."""
        loop = asyncio.get_running_loop()
        if not self.clustered:
            response = await handle()
            await self._sync_changed(response)
            return response
        async with self._metadata_lock:
            self._changing.set()
            try:
                for attempt in range(1, METADATA_TRIES + 1):
                    await loop.run_in_executor(self._ticker, self._refresh_metadata)
                    response = await handle()
                    if await self._sync_changed(response) != LOST_RACE:
                        break
                    log.info("a metadata change lost its race to another broker (try %d of %d): made again",
                             attempt, METADATA_TRIES)
            finally:
                self._changing.clear()
            return response

    async def _sync_changed(self, response: Any) -> str:
        """A metadata request's own sync (on the tick's thread). The store refusing for good (a 4xx,
        never retried by the client) raises MetadataNotStored with the request's `response`, for
        the connection to answer with errors: the change stays in the cache for the ticks."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self._ticker, self._sync_metadata)
        except ObjectStoreError as exc:
            log.warning("a metadata change is not stored in the bucket, tried again at each tick: %s", exc)
            raise MetadataNotStored(response, exc) from exc

    def _sync_metadata(self) -> str:
        if self.fenced:
            return NOT_SYNCED
        try:
            self.mirror.sync()
            return SYNCED
        except MetadataConflict as exc:
            if not self.clustered:
                self.fence(str(exc))
                return NOT_SYNCED
            self.mirror.adopt(exc.keys)  # the winner's objects; the change is made again on them
            self.on_metadata_changed(exc.keys)
            return LOST_RACE
        except StoreUnavailable as exc:
            log.warning("metadata not synced to the bucket yet: %s", exc)
        return NOT_SYNCED

    def _refresh_metadata(self) -> None:
        """Cluster mode: the other brokers' metadata changes into the cache. Not read (the store
        down, or refusing: a 403 is not retried by the client), a request's change is made on the
        cache's copy, and its If-Match upload still refuses to overwrite a change not read."""
        try:
            changed = self.mirror.refresh()
        except ObjectStoreError as exc:
            log.warning("metadata not refreshed from the bucket: %s", exc)
            return
        if changed:
            log.debug("metadata changed by other brokers: %s", ", ".join(changed))
            self.on_metadata_changed(changed)

    def _fenced_by(self, tail: PartitionTail, reason: str) -> None:
        """A newer leader of the tail's partition (any thread): one broker on the root stops;
        in a cluster only the partition is let go (its node resigns it, NOT_LEADER meanwhile)."""
        if not self.clustered:
            self.fence(reason)
            return
        log.warning("no longer leading %s: %s", tail.keys.prefix, reason.removeprefix(f"{tail.keys.prefix}: "))
        key = (tail.part.topic, tail.part.index)
        current = self._drop_tail(key, tail)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._fail_waiters_of, tail, reason)
        if current:  # a released tail's late seal or flush must not resign the partition led again since
            tail.part.on_fenced()

    def fence(self, reason: str) -> None:
        """Another broker leads the root now (any thread): fail the waiting, stop the broker."""
        if self.fenced:
            return
        self.fenced = reason
        log.error("this broker no longer leads %s: %s", self.settings.root, reason)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._fail_waiters, f"this broker no longer leads: {reason}")
        self.on_fenced(reason)

    async def stop(self) -> None:
        """Clean stop, before the partitions close: running seals finish, then a last flush of
        everything appended (`tick`: not when the store is failing)."""
        self.begin_stop()
        self.schedule.cancel()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._ticker, self._wait_maintenance)
        if self.fenced:
            return
        await loop.run_in_executor(self._ticker, self.tick)
        if self._store_failing:
            unflushed = sum(1 for tail in self.tails.values() if tail.has_unflushed)
            log.warning("the object store is unavailable: %d partitions keep records never acknowledged unstored",
                        unflushed)

    def close(self) -> None:
        """After the partitions closed: let the lease go (a restart takes over at once)."""
        self._pool.shutdown(wait=True)
        self._ticker.shutdown(wait=True)
        self._sealer.shutdown(wait=True)
        if not self.fenced and not self.clustered:
            try:
                self.lease.release()
            except StoreUnavailable as exc:
                log.warning("the lease stays until it expires: %s", exc)

    # -- the tick (its own thread)
    def begin_stop(self) -> None:
        """The broker stops (its requests in flight drain first): ticks go on flushing, so waiting
        produces are acknowledged, but start no seal, poll or drop (the flush objects are the log:
        the next leader seals them). Once a flush finds the store unavailable, no other is tried:
        what they hold was never acknowledged, and each try waits out flush_timeout_ms, which
        would keep the broker past an orchestrator's grace period; the waiting produces are
        answered NOT_LEADER_OR_FOLLOWER (their clients retry elsewhere or after the restart). A
        failure before the stop does not count: the stop's first flush is tried."""
        if not self._stopping:
            self._stopping, self._store_failing = True, False

    def tick(self) -> bool:
        """One flush of every partition's tail (and the seals due); False when the topics' metadata
        could not be stored, so nothing was flushed (the next tick waits flush_ms, whatever asks
        sooner). A tail whose flush or seal failed waits flush_ms alone (`_retry_at`): the others'
        ticks, early ones too, go on."""
        if self._stopping and self._store_failing:
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._fail_waiters, "the broker stops; the object store is unavailable")
            return True
        # A topic's file is in the bucket before any of its records; while a request changes metadata
        # (cluster mode), that request syncs it itself, right after handling it.
        if not self._changing.is_set() and self._sync_metadata() != SYNCED:
            return False
        for key, tail in list(self.tails.items()):
            if not self.serves(tail.part) and self._drop_tail(key, tail):  # deleted or closed (not since taken again)
                if self._loop is not None:
                    self._loop.call_soon_threadsafe(self._fail_waiters_of, tail, f"{tail.part} is no longer served")
        tails = list(self.tails.values())
        if self._retry_at:  # a tail dropped meanwhile (resigned, fenced, deleted) is forgotten
            live = set(tails)
            self._retry_at = {tail: at for tail, at in self._retry_at.items() if tail in live}
        started = time.monotonic()
        deadline = started + self.settings.flush_timeout_ms / 1000
        retry_at = started + RETRY_AFTER_TICKS * self.settings.flush_ms / 1000  # for a tail that fails now
        due = [tail for tail in tails if tail.has_unflushed
               and (self._stopping or self._retry_at.get(tail, 0.0) <= started)]
        outcomes = list(self._pool.map(lambda tail: self._guarded(tail, lambda: tail.flush(deadline)), due))
        if outcomes:
            self._store_failing = UNAVAILABLE in outcomes
        for tail, outcome in zip(due, outcomes):
            if outcome is None:
                self._retry_at.pop(tail, None)
            else:  # not before the next regular tick: a produce at flush_bytes would retry it per request
                self._retry_at[tail] = retry_at
        if self._stopping:
            return True
        for tail, job in list(self._maintenance.items()):
            if job.done():
                del self._maintenance[tail]
                if job.exception() is None and job.result() is not None:  # a seal that failed waits too
                    self._retry_at[tail] = retry_at
        now = time.monotonic()
        if now - self._notices_listed >= MANIFEST_POLL_S and (self._notices_job is None or self._notices_job.done()):
            self._notices_listed = now
            self._notices_job = self._sealer.submit(self._read_notices)
        for tail in tails:
            if tail in self._maintenance or self._retry_at.get(tail, 0.0) > now:
                continue
            if tail.seal_due(now) or tail.poll_due(now) or tail.drop_due(now):
                self._maintenance[tail] = self._sealer.submit(self._guarded, tail, partial(self._maintain, tail))
        return True

    def _read_notices(self) -> None:
        """On the seal pool: one LIST of the maintenance notices for every partition; those it
        names that this broker leads poll their manifests at the next tick (all of them after the
        first LIST)."""
        try:
            changed = self._notices.changed()
        except StoreUnavailable as exc:
            log.warning("maintenance notices not read, retried in %.0f s: %s", MANIFEST_POLL_S, exc)
            return
        except Exception:
            log.exception("maintenance notices not read, retried in %.0f s", MANIFEST_POLL_S)
            return
        for tail in list(self.tails.values()):  # those led now: one taken over since polls once anyway
            if changed is None or notice_key(tail.keys) in changed:
                tail.poll_requested = True

    def _maintain(self, tail: PartitionTail) -> None:
        """On the seal pool: a partition's seal when due, its look for maintenance jobs' commits
        (retention, merges) and its sealed segments' drop from the cache when due: one after the
        other, holding `maintaining`, so they never race each other (nor a DeleteRecords commit)
        for the tail's manifest."""
        with tail.maintaining:
            if self._stopping:  # queued before a stop: the next leader seals, polls and drops
                return
            now = time.monotonic()
            deadline = now + self.settings.flush_timeout_ms / 1000
            if tail.seal_due(now):
                tail.seal(deadline, self.on_writer_thread)
            if tail.poll_due(now) and not self._stopping:
                tail.poll_manifest(self.on_writer_thread)
            if tail.drop_due(time.monotonic()) and not self._stopping:
                tail.drop_sealed(self.on_writer_thread)

    def _wait_maintenance(self) -> None:
        """On the tick's thread: until the seals and polls started by ticks have finished."""
        wait(list(self._maintenance.values()))
        self._maintenance = {}

    def _guarded(self, tail: PartitionTail, work: Callable[[], Any]) -> str | None:
        """Run a flush or a seal of `tail`, logging what goes wrong: None when it went well (or the
        partition is fenced or gone), UNAVAILABLE when the store did not answer, else FAILED."""
        if self.fenced:
            return None
        try:
            work()
        except FENCING_ERRORS as exc:
            self._fenced_by(tail, f"{tail.keys.prefix}: {exc}")
        except (FlushTimedOut, StoreUnavailable) as exc:
            log.warning("%s: not stored yet, retried at the next tick: %s", tail.keys.prefix, exc)
            return UNAVAILABLE
        except ManifestConflict as exc:
            log.info("%s: seal lost its manifest version, retried later: %s", tail.keys.prefix, exc)
        except Exception:
            if not self.serves(tail.part):
                return None  # closed or deleted meanwhile: nothing of it left to store
            log.exception("%s: flush or seal failed", tail.keys.prefix)
            return FAILED
        return None

    async def _tick_forever(self) -> None:
        loop = asyncio.get_running_loop()
        failed = False
        while not self.fenced:
            # after a failure, not sooner than flush_ms whatever asks: a produce at flush_bytes
            # would retry it per request
            await self.schedule.next_tick(hold=failed)
            try:
                failed = not await loop.run_in_executor(self._ticker, self.tick)
            except Exception:  # e.g. the store refusing a metadata read: flushing must go on
                log.exception("flush tick failed; the next one runs in %d ms", self.settings.flush_ms)
                failed = True

    async def _renew_forever(self) -> None:
        while not self.fenced:
            await asyncio.sleep(self.settings.lease_ms / 3000)
            try:
                await asyncio.to_thread(self.lease.renew)
            except LeaseLost as exc:
                self.fence(str(exc))
            except StoreUnavailable as exc:
                log.warning("lease not renewed: %s", exc)

    async def _refresh_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.fenced:
            await asyncio.sleep(METADATA_REFRESH_S)
            try:
                await loop.run_in_executor(self._ticker, self._refresh_metadata)
            except Exception:
                log.exception("metadata refresh failed; retried in %.0f s", METADATA_REFRESH_S)

    def _flushed(self, tail: PartitionTail) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._resolve, tail)

    def _resolve(self, tail: PartitionTail) -> None:
        waiting = self._waiters.get(tail)
        if waiting:
            still = []
            for end, future in waiting:
                if end <= tail.flushed_end:
                    if not future.done():
                        future.set_result(None)
                else:
                    still.append((end, future))
            if still:
                self._waiters[tail] = still
            else:
                del self._waiters[tail]
        tail.part.notify()

    def _fail_waiters_of(self, tail: PartitionTail, reason: str) -> None:
        for _end, future in self._waiters.pop(tail, []):
            if not future.done():
                future.set_exception(NotLeaderOrFollower(reason))
        tail.part.notify()

    def _fail_waiters(self, reason: str) -> None:
        waiters, self._waiters = self._waiters, {}
        for waiting in waiters.values():
            for _end, future in waiting:
                if not future.done():
                    future.set_exception(NotLeaderOrFollower(reason))
