"""One partition's writes to the bucket while this broker leads it (docs/OBJECT-STORAGE.md,
"Write path"): flush objects of what the local Log holds past the last flush, then the fence
check, and only then the high watermark moves; seals of the flushed tail into a closed segment
with its producer snapshot object.

Flushes and seals run on the service's threads, never on the event loop or the writer thread; a
seal runs beside the flushes of its partition: it seals the flush objects below the flushed end it
captured, and only hands state over (`first_unsealed`) under the flush's lock.
The local Log rolls at each seal's end, and `drop_sealed` deletes a sealed segment from the cache
`cache_sealed_ms` after its seal (Partition.closed reads those offsets from the bucket then), so
the cache holds the tail and the recently sealed data, not the log (`_` topics excepted).
A flush whose create did not finish keeps its exact bytes (`pending`) and the next round retries
them under the same key: a create whose response was lost must find identical bytes there.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
import zlib
from typing import Any, Callable

from topiclake.objectlog.fence import BucketFence, LeaderFenced
from topiclake.objectlog.flush import FlushConflict, FlushTimedOut, create_once, flush
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.garbage import collect_garbage
from topiclake.objectlog.manifest import Manifest, commit_change, load_newer, load_newest
from topiclake.objectlog.plan import FLUSH
from topiclake.objectlog.reader import PartitionView, view_partition
from topiclake.objectlog.seal import seal_tail
from topiclake.segments.leader_fence import FencedLeaderError
from topiclake.segments.maintenance import delete_segments, purge_deleted
from topiclake.segments.producer_snapshot import encode_snapshot
from topiclake.store.objects import ObjectStore

from .aborted_entries import local_aborted
from .closed import ClosedSegments
from .settings import BucketSettings

log = logging.getLogger(__name__)

READ_CHUNK = 64 * 1024 * 1024
SNAPSHOT_TRIES = 3  # the writer thread may append between a flush and the snapshot: flush again
# How often a leader lists the maintenance notices (objectlog.notices) for jobs' commits: a file
# root's refresh interval. Each partition's manifests are also listed every `manifest_poll_ms`, for
# a job killed between its commit and its notice.
MANIFEST_POLL_S = 5.0


def read_range(log_: Any, start: int, end: int) -> bytes:
    """The bytes of the local Log's batches holding offsets [start, end) (batch boundaries both)."""
    out = bytearray()
    offset = start
    while offset < end:
        piece = log_.read(offset, READ_CHUNK, max_offset=end)
        if piece.size == 0:
            raise RuntimeError(f"{log_.directory}: no batch at offset {offset} below {end}")
        out += piece.to_bytes()
        offset = piece.next_offset
    return bytes(out)


def restores_whole(topic: str) -> bool:
    """Topics the broker itself reads from their start through the local Log (the group and
    transaction coordinators' `__` topics, the schema registry's `_schemas`): taken over whole,
    and their sealed segments stay in the cache."""
    return topic.startswith("_")


class PartitionTail:
    def __init__(self, part: Any, store: ObjectStore, keys: PartitionKeys, epoch: int, settings: BucketSettings,
                 *, flushed_end: int, manifest: Manifest):
        self.part = part
        self.store = store
        self.keys = keys
        self.fence = BucketFence(store, keys)
        self.epoch = epoch
        self.settings = settings
        self.flushed_end = flushed_end  # everything below is in objects that passed the fence
        self.manifest = manifest  # the newest manifest this leader knows (its own commits)
        self.pending: tuple[int, int, bytes] | None = None  # (base, end, bytes) of a create not yet done
        # The flush_bytes trigger's counts, each written by one thread only (no lost updates): bytes
        # appended (the writer thread) and bytes flushed (the flush, under `_lock`).
        self.appended_bytes = 0
        self.flushed_bytes = 0
        # (end, monotonic time) of each flush above the last seal's end, oldest first (a few: one a
        # tick until a seal), so a seal hands the seal_ms clock on to the first flush it did not cover.
        self._unsealed_flushes: collections.deque[tuple[int, float]] = collections.deque()
        self.seal_requested = False  # the local log rolled: seal at the next tick
        # (end, monotonic time) of each seal whose local segments are still in the cache, oldest first
        self._sealed_in_cache: collections.deque[tuple[int, float]] = collections.deque()
        self.drops_sealed = settings.cache_sealed_ms >= 0 and not restores_whole(keys.topic)
        # When the newest manifest was last looked at: set back by a per-partition phase, so the slow
        # polls of a broker's partitions are spread over `manifest_poll_ms`, not all at once.
        self.manifest_polled = time.monotonic() - (
            zlib.crc32(keys.prefix.encode()) % settings.manifest_poll_ms) / 1000
        # A maintenance notice named this partition: poll at the next tick. True at first: a job may
        # commit between the takeover's manifest load and the tail joining the notices' readers.
        self.poll_requested = True
        self.on_flushed: Callable[["PartitionTail"], None] = lambda tail: None
        self.on_fenced: Callable[[str], None] = lambda reason: None
        self._lock = threading.Lock()  # a flush's state (pending, flushed_end): held across its PUT
        # Held by a seal, a manifest poll or a log start commit (the service's seal pool): they share
        # the manifest, and run one at a time; flushes never take it.
        self.maintaining = threading.Lock()

    def __repr__(self) -> str:
        return f"PartitionTail({self.keys.prefix}, epoch {self.epoch})"

    @property
    def first_unsealed(self) -> float | None:
        """Monotonic time of the first flush no seal covers yet: the seal_ms clock runs from it."""
        try:  # not under `_lock` (held across a PUT); a seal beside the tick may empty the queue
            return self._unsealed_flushes[0][1]
        except IndexError:
            return None

    def _sealed_below(self, end: int) -> None:
        """Under `_lock`: flushes ending at or below `end` are sealed; the clock moves to the next."""
        while self._unsealed_flushes and self._unsealed_flushes[0][0] <= end:
            self._unsealed_flushes.popleft()

    @property
    def has_unflushed(self) -> bool:
        return self.pending is not None or self.part.log.log_end_offset > self.flushed_end

    @property
    def unflushed_bytes(self) -> int:
        return self.appended_bytes - self.flushed_bytes

    def appended(self, size: int) -> None:
        self.appended_bytes += size

    def flush(self, deadline: float) -> bool:
        """Create flush objects until everything the Log held when called is flushed and fenced
        (FlushTimedOut, LeaderFenced, FlushConflict otherwise). True when anything was flushed."""
        flushed = False
        with self._lock:
            while True:
                if self.pending is None:
                    end = self.part.log.log_end_offset
                    if end <= self.flushed_end:
                        return flushed
                    self.pending = (self.flushed_end, end, read_range(self.part.log, self.flushed_end, end))
                base, end, data = self.pending
                flush(self.fence, base, self.epoch, data, deadline=deadline)
                self.pending = None
                self.flushed_end = end
                self.flushed_bytes += len(data)
                self._unsealed_flushes.append((end, time.monotonic()))
                self.part.confirmed(end)
                self.on_flushed(self)
                flushed = True

    def confirm(self) -> None:
        """On the writer thread, after an append that counts at once (a coordinator's record, a
        transaction marker): flush now, fence check included. FencedLeaderError, as on a file
        root, when a newer leader claimed the partition (a coordinator then moves, not reloads)."""
        try:
            self.flush(time.monotonic() + self.settings.flush_timeout_ms / 1000)
        except (LeaderFenced, FlushConflict) as exc:
            self.on_fenced(str(exc))
            raise FencedLeaderError(self.part.log.directory, self.epoch, None, "flush to the bucket") from exc

    def seal_due(self, now: float) -> bool:
        if self.first_unsealed is None:
            return False
        return self.seal_requested or (now - self.first_unsealed) * 1000 >= self.settings.seal_ms

    def seal(self, deadline: float, on_writer_thread: Callable[[Callable[[], Any]], Any]) -> Manifest | None:
        """Seal the flushed tail with the producer snapshot at its end, commit, then collect
        garbage past the grace. `on_writer_thread(fn)` runs fn on the partition's writer thread
        (where the producer state is consistent with the log). None when nothing was sealed."""
        captured = None
        for _ in range(SNAPSHOT_TRIES):
            self.flush(deadline)
            captured = on_writer_thread(self._capture_snapshot)
            if captured is not None:
                break
        if captured is None:
            return None  # appends kept coming between the flush and the snapshot: next tick
        end, snapshot, aborted = captured
        if end <= self.manifest.end_offset:
            with self._lock:  # a flush beside this one may have added a flush above `end`: keep it
                self._sealed_below(self.manifest.end_offset)
            self.seal_requested = False
            return None
        started = time.monotonic()
        # A roll while the segment uploads asks for the next seal; this one no longer needs asking.
        requested, self.seal_requested = self.seal_requested, False
        try:
            manifest = self._seal_up_to(end, snapshot, deadline, aborted)
        except BaseException:
            self.seal_requested = self.seal_requested or requested
            raise
        with self._lock:  # flushes during the seal keep their own times: the next seal is not late
            self._sealed_below(end)
        if manifest is not None:
            self.adopt(manifest, on_writer_thread)
            if self.drops_sealed:  # what the committed manifest holds (a seal may end below `end`)
                self._sealed_in_cache.append((min(end, manifest.end_offset), time.monotonic()))
            log.info("%s: sealed below offset %d in %.1f s", self.keys.prefix, end, time.monotonic() - started)
        self.collect_garbage()
        return manifest

    def _seal_up_to(self, end: int, snapshot: bytes, deadline: float, aborted: list) -> Manifest | None:
        """The flush objects below `end` sealed and committed with the producer snapshot at `end`
        (flushes above `end` go on meanwhile: they are the next seal's)."""
        view = _up_to(view_partition(self.store, self.keys), end)

        def before_commit(sealed_end: int) -> None:
            create_snapshot_object(self.store, self.keys, sealed_end, end, snapshot, deadline)
            self.fence.check(self.epoch)  # a superseded leader commits nothing (nor deletes)

        return seal_tail(self.store, view, self.epoch, config=self.part.config, deadline=deadline,
                         before_commit=before_commit, aborted=aborted)

    def poll_due(self, now: float) -> bool:
        return self.poll_requested or (now - self.manifest_polled) * 1000 >= self.settings.manifest_poll_ms

    def poll_manifest(self, on_writer_thread: Callable[[Callable[[], Any]], Any]) -> Manifest:
        """Pick up what maintenance jobs committed (`topiclake retain`, `merge-segments`): the
        newest manifest becomes this leader's, and its log start the cache's. LeaderFenced when a
        newer epoch committed (a takeover this leader has not heard of)."""
        self.manifest_polled = time.monotonic()
        self.poll_requested = False  # before the LIST: a notice arriving during it asks again
        newest = load_newer(self.store, self.keys, self.manifest.version)
        if newest is None:
            return self.manifest
        if newest.leader_epoch > self.epoch:
            raise LeaderFenced(f"{self.keys.prefix}: manifest {newest.version} was committed at epoch "
                               f"{newest.leader_epoch}, above this leader's {self.epoch}")
        self.adopt(newest, on_writer_thread)
        return self.manifest

    def adopt(self, manifest: Manifest, on_writer_thread: Callable[[Callable[[], Any]], Any]) -> None:
        """`manifest` (committed, at least as new as the one known) is this leader's; a log start
        it raised (retention, DeleteRecords) moves the cache's, so ListOffsets and Fetch agree.

        Safe beside the flush pool without `_lock`: a flush reads only `pending`, `flushed_end`
        and the epoch (fixed), never the manifest; the manifest is read by seals, polls and log
        start commits, which hold `maintaining` as the caller of adopt does, and it is handed over
        as one reference swap. The log start moves on the writer thread, and never past the
        flushed end (a manifest's start is at most its sealed end, DeleteRecords' at most the
        high watermark), so a flush's `read_range` never reads below it."""
        self.manifest = manifest
        part = self.part
        if part.closed is not None:  # what Fetch and ListOffsets serve below the cache moves with it
            part.closed.adopt(manifest)
        if manifest.log_start_offset > part.log.log_start_offset:
            def advance() -> None:
                part.log.advance_log_start_offset(min(manifest.log_start_offset, part.log.log_end_offset))
                part.txns.forget_before(part.log.log_start_offset)

            on_writer_thread(advance)
            log.info("%s: log start offset %d from manifest %d", self.keys.prefix, part.log.log_start_offset,
                     manifest.version)

    def drop_due(self, now: float) -> bool:
        return bool(self._sealed_in_cache) and (
            now - self._sealed_in_cache[0][1]) * 1000 >= self.settings.cache_sealed_ms

    def drop_sealed(self, on_writer_thread: Callable[[Callable[[], Any]], Any]) -> int:
        """Delete from the cache the local segments of the seals `cache_sealed_ms` old: from then
        on Fetch, ListOffsets and DeleteRecords read those offsets from the bucket's closed
        segments (Partition.closed, made here if the takeover did not). The segments go as a
        retention job's do (the log start checkpointed first, then the files; the Log lets go of
        them at its refresh; a read in flight keeps its open file). Returns the segments deleted."""
        upto = -1
        while self.drop_due(time.monotonic()):
            upto = self._sealed_in_cache.popleft()[0]
        upto = min(upto, self.manifest.end_offset)  # never an offset no committed manifest holds
        segments = self.part.log.segments()
        bases = [segment.base_offset for segment, after in zip(segments, segments[1:]) if after.base_offset <= upto]
        if not bases:
            return 0
        part = self.part
        if part.closed is None:
            part.closed = ClosedSegments(self.store, self.keys, self.manifest)
        delete_segments(part.log.directory, bases, segments[len(bases)].base_offset)

        def let_go() -> None:
            part.log.refresh()
            # Not the cache's start: a read_committed Fetch that read the cache before this looks
            # its aborted transactions up after; the closed segments still hold these offsets.
            part.txns.forget_before(part.history_start_offset)

        on_writer_thread(let_go)
        purge_deleted(part.log.directory)
        log.debug("%s: dropped %d sealed segment(s) below offset %d from the cache", self.keys.prefix, len(bases),
                  segments[len(bases)].base_offset)
        return len(bases)

    def commit_log_start(self, offset: int, deadline: float,
                         on_writer_thread: Callable[[Callable[[], Any]], Any]) -> None:
        """DeleteRecords kept in the bucket: the manifest's log start raised to `offset` (already
        the cache's), so a takeover starts there too. An offset in the tail seals it first (a
        manifest's log start is never past its closed segments' end). FlushTimedOut when appends
        kept the seal from catching up: the client retries."""
        if offset > self.manifest.end_offset:
            self.seal(deadline, on_writer_thread)
        if offset > self.manifest.end_offset:
            raise FlushTimedOut(f"{self.keys.prefix}: offset {offset} is not sealed yet")

        def raise_start(newest: Manifest) -> Manifest | None:
            if newest.log_start_offset >= offset:
                return None
            return newest.successor(leader_epoch=self.epoch, log_start_offset=offset)

        committed = commit_change(self.store, self.keys, self.manifest, raise_start)
        if committed is not None:
            self.adopt(committed, on_writer_thread)

    def collect_garbage(self) -> list[str]:
        return collect_garbage(self.store, self.keys, load_newest(self.store, self.keys),
                               grace_ms=self.settings.delete_grace_ms)

    def _capture_snapshot(self) -> tuple[int, bytes, list] | None:
        """On the writer thread: the producer state as of the flushed end, when nothing is
        unflushed, and the aborted transactions of the tail (the segment's `.txnindex`)."""
        part = self.part
        if self.pending is not None or part.log.log_end_offset != self.flushed_end:
            return None
        captured = (self.flushed_end, encode_snapshot(part.producers.to_snapshot(part.txns.ongoing())),
                    local_aborted(part.log, self.manifest.end_offset, self.flushed_end))
        if self.drops_sealed and part.log.active_segment.base_offset < self.flushed_end:
            part.log.roll()  # the sealed offsets in their own local segments, for drop_sealed
        return captured


def create_snapshot_object(store: ObjectStore, keys: PartitionKeys, sealed_end: int, end: int, snapshot: bytes,
                           deadline: float) -> None:
    """`<end>.snapshot` (the producer state at `end`) for a segment sealed up to `sealed_end`. A
    seal that ended elsewhere has no snapshot: a takeover then replays the whole log instead."""
    if sealed_end == end:
        create_once(store, keys.snapshot(end), snapshot, deadline=deadline)
    else:
        log.warning("%s: sealed up to %d but the producer state is at %d: no snapshot object", keys.prefix,
                    sealed_end, end)


def _up_to(view: PartitionView, end: int) -> PartitionView:
    """The view with its flush objects cut at `end` (later flushes are the next seal's)."""
    pieces = []
    for piece in view.pieces:
        if piece.kind == FLUSH:
            if piece.base_offset >= end:
                continue
            cut = end if piece.end_offset is None else min(piece.end_offset, end)
            piece = dataclasses.replace(piece, end_offset=cut)
        pieces.append(piece)
    return dataclasses.replace(view, pieces=pieces)
