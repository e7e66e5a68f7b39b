"""A partition taken over from the bucket into the local cache (docs/OBJECT-STORAGE.md, "Ownership
and takeover"): claim a new epoch (fencing every earlier leader), read the newest manifest, its
producer snapshot and the flush objects into an emptied local directory, recover (valid batches
only, each offset once), record where the new epoch starts, and seal the previous tail in the
takeover's own manifest commit. Only then does the broker serve the partition.

The local copy is the tail alone (the flush objects above the manifest's closed segments), with
the producer snapshot object at the manifest's end: the closed segments stay in the bucket and the
partition reads them there (closed.ClosedSegments), so a takeover's time and cache do not grow
with the log. Topics the broker reads from their start itself are restored whole (restores_whole).
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from topiclake.objectlog.fence import BucketFence, LeaderFenced
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import ManifestConflict, commit
from topiclake.objectlog.plan import FLUSH
from topiclake.objectlog.reader import PartitionView, read_log, view_partition
from topiclake.objectlog.seal import seal_tail
from topiclake.segments import filenames
from topiclake.segments.leader_fence import FencedLeaderError
from topiclake.segments.log import Log
from topiclake.segments.producer_snapshot import encode_snapshot
from topiclake.segments.errors import CorruptRecordError
from topiclake.store.errors import ObjectNotFound, ObjectStoreError
from topiclake.store.objects import ObjectStore

from .aborted_entries import local_aborted
from .closed import ClosedSegments
from .settings import BucketSettings
from .tail import PartitionTail, create_snapshot_object, restores_whole

log = logging.getLogger(__name__)

CLAIM_TRIES = 5  # another broker claiming the same epoch at once: claim the next one
SEAL_TRIES = 3  # a stale sealer's commit won the version: look again


def claim_next_epoch(fence: BucketFence, owner: dict[str, Any]) -> int:
    for _ in range(CLAIM_TRIES):
        current = fence.current_epoch()
        epoch = 0 if current is None else current + 1
        try:
            fence.begin_takeover(epoch, **owner)
            return epoch
        except LeaderFenced:
            continue
    raise LeaderFenced(f"{fence.keys.prefix}: {CLAIM_TRIES} epochs in a row were claimed by others")


def claim_epoch(fence: BucketFence, epoch: int, owner: dict[str, Any], directory: Path) -> int:
    """Cluster mode: exactly the epoch ZooKeeper gave this leader; FencedLeaderError naming the
    bucket's newest claim when it is taken already (the cluster node raises the state past it)."""
    try:
        fence.begin_takeover(epoch, **owner)
    except LeaderFenced:
        raise FencedLeaderError(directory, epoch, fence.current_epoch(), "claim in the bucket") from None
    return epoch


def restore_local(store: ObjectStore, view: PartitionView, directory: Path, *, whole: bool = False) -> bool:
    """Empty `directory` and write the tail's valid batches into it as one segment file starting at
    the manifest's end, with the producer snapshot object there beside it (the Log's loader
    rebuilds indexes): the closed segments stay in the bucket (True). The whole log instead when
    `whole` is asked or no snapshot object says the producer state at the manifest's end (False)."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    end = view.manifest.end_offset
    snapshot = None
    if view.manifest.segments:
        try:
            snapshot = store.get(view.keys.snapshot(end))
        except ObjectNotFound:
            whole = True  # the state is rebuilt from the whole log
    if not whole:
        view = dataclasses.replace(view, pieces=[piece for piece in view.pieces if piece.kind == FLUSH])
    first: int | None = None
    scratch = directory / "takeover.tmp"
    with open(scratch, "wb") as out:
        for batch in read_log(store, view.keys, from_offset=0 if whole else end, view=view):
            first = batch.base_offset if first is None else first
            out.write(batch.data)
    if first is None and end == 0:
        scratch.unlink()  # a new partition: the Log starts its first segment itself
    else:
        scratch.rename(filenames.segment_file(directory, end if first is None else first, filenames.LOG_SUFFIX))
    if snapshot is not None:
        filenames.snapshot_file(directory, end).write_bytes(snapshot)
    return not whole and bool(view.manifest.segments)


def take_over(store: ObjectStore, keys: PartitionKeys, settings: BucketSettings, directory: Path, config: Any,
              *, owner: dict[str, Any], make_partition: Callable[[Log, int], Any], epoch: int | None = None) -> Any:
    """The partition, led at a new epoch, with its PartitionTail (`make_partition(log, epoch)`
    builds the Partition and loads its producer state). `epoch`: the one ZooKeeper gave (cluster
    mode); None: the next one after the bucket's newest claim (one broker on the root)."""
    fence = BucketFence(store, keys)
    epoch = claim_next_epoch(fence, owner) if epoch is None else claim_epoch(fence, epoch, owner, directory)
    view = view_partition(store, keys)
    closed_in_bucket = restore_local(store, view, directory, whole=restores_whole(keys.topic))
    log_ = Log.open(directory, config, topic=keys.topic, partition=keys.partition)
    try:
        end = log_.log_end_offset
        if view.manifest.log_start_offset > log_.log_start_offset:  # DeleteRecords inside a batch
            log_.advance_log_start_offset(min(view.manifest.log_start_offset, end))
        history = fence.record_start(epoch, end)
        part = make_partition(log_, epoch)
        part.bucket_history = history  # OffsetForLeaderEpoch's answers
        if closed_in_bucket:
            closed = part.closed = ClosedSegments(store, keys, view.manifest)
            # the snapshot keeps each producer's last batch only: the batches before it, for retries
            try:
                part.producers.restore_windows(closed.last_batch_headers, int(time.time() * 1000))
            except (ObjectStoreError, CorruptRecordError, ValueError) as exc:  # only retries' answers are at stake
                log.warning("%s: producer windows not restored (retried batches may be refused): %s",
                            keys.prefix, exc)
        deadline = time.monotonic() + settings.flush_timeout_ms / 1000
        manifest = view.manifest
        snapshot = encode_snapshot(part.producers.to_snapshot(part.txns.ongoing()))
        aborted = local_aborted(log_, manifest.end_offset, end)  # the replay at open indexed the tail
        tail = PartitionTail(part, store, keys, epoch, settings, flushed_end=end, manifest=manifest)
        for _ in range(SEAL_TRIES):
            try:
                # The takeover's commit carries the new epoch even with no tail to seal: from it on,
                # an older leader's seal is a StaleManifestWriter.
                sealed = seal_tail(store, view, epoch, config=config, deadline=deadline,
                                   before_commit=lambda at: create_snapshot_object(store, keys, at, end, snapshot,
                                                                                          deadline),
                                   aborted=aborted)
                tail.manifest = sealed or commit(store, keys, view.manifest,
                                                 view.manifest.successor(leader_epoch=epoch))
                break
            except ManifestConflict:
                view = view_partition(store, keys)
                tail.manifest = view.manifest
        part.tail = tail
        if part.closed is not None:
            part.closed.adopt(tail.manifest)
        part.confirmed(end)
    except BaseException:
        log_.close_handlers()
        raise
    log.info("took over %s at epoch %d: offsets [%d, %d), manifest %d", keys.prefix, epoch, log_.log_start_offset,
             end, tail.manifest.version)
    return part

