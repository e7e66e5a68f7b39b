"""Kafka log compaction on an object-store root (docs/OBJECT-STORAGE.md, "Maintenance on the
bucket", compaction): the file root's rules (runs/compaction.py: the same CompactOptions, skip
reasons, summary and run record; segments' cleanable, offset map and cleaner) over a partition's
log in the bucket, with a manifest commit in place of the file root's renames.

1. Driver (`plan_bucket_partition`): the newest manifest and the listing (no segment is read:
   closed segments' sizes and largest timestamps are the manifest's, index sizes the listing's,
   a first batch header is one ranged GET, only when max.compaction.lag.ms is set) make the
   LogSummary that `cleanable.log_to_clean` judges, with the tail (flush objects) as the active
   segment, the cleaner checkpoint from the manifest (`cleaner_offset`) and as last stable offset
   the first offset of the first transaction open at the manifest's end (the producer snapshot
   object there, log.bucket.open_transactions): as Kafka's cleaner, only the segments wholly
   below it are cleaned; the tail is never cleaned, so a transaction begun there does not count.
2. Executors, ONE task per partition (`CleanBucketPartition`): GET the closed segments and the
   tail's valid batches, then `cleaner.clean_log` over them (aborted transactions, producers'
   last batches, offset map and rewrite: exactly the file root's rules). When the manifest's end
   has no snapshot object (the driver could not tell), the task's header scan caps the round at
   the first open transaction. Each cleaned group is written with its `.index`, `.timeindex`
   and, when it keeps an aborted transaction's ABORT marker, `.txnindex` as new objects
   (`<base>.c<version>-<run>.log`, created once, never overwriting: objectlog.seal.write_segment);
   the `.txnindex` holds what Kafka's cleaner re-indexes (the aborted transactions whose batches
   the round saw), with the replaced segments' entries' last stable offsets; only metadata rows
   return.
3. Driver: ONE manifest commit per partition replacing the cleaned segments by the new ones and
   setting the checkpoint (manifest.commit_change: a seal or another maintenance commit landing
   first is rebased onto, as long as every replaced segment is still there). Killed before the
   commit, the old segments are still the log and the new objects garbage (objectlog.garbage
   deletes them after delete_grace_ms); after it, the cleaned segments are the log.

Differences from a file root, each refusing rather than guessing: a partition in the middle of a
takeover (an epoch claimed, its start not recorded) is skipped. The task holds the partition's
closed segments in memory (a file root maps them).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from typing import Sequence

from topiclake.objectlog.aborted import segment_aborted
from topiclake.objectlog.flush import FlushConflict
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import Manifest, SegmentEntry, commit_change
from topiclake.objectlog.notices import post_notice
from topiclake.objectlog.plan import FLUSH
from topiclake.objectlog.reader import PartitionView, view_partition
from topiclake.objectlog.seal import write_segment
from topiclake.segments.batch import HEADER_SIZE, NO_TIMESTAMP, iter_batches, read_header
from topiclake.segments.cleanable import log_to_clean
from topiclake.segments.cleaner import clean_log
from topiclake.segments.config import LogConfig
from topiclake.segments.errors import TopiclakeError
from topiclake.segments.log_summary import LogSummary, SegmentData, SegmentSummary
from topiclake.segments.maintenance import crash_point
from topiclake.segments.txn_index import TxnIndexEntry
from topiclake.segments.txn_metadata import AbortedTxn
from topiclake.store.objects import ObjectStore
from topiclake.store.root import S3Root

from ..log.bucket import bucket_topics, open_transactions, scan_tail
from ..log.scan import Transactions
from ..spark.progress import ProgressCallback, spark_job_group
from ..spark.session import collect
from .compaction_plan import (CompactOptions, CompactResult, PartitionCompaction, SkipReason, chosen, compacted_of,
                              describe_planned)

log = logging.getLogger(__name__)

WRITE_TIMEOUT_S = 60.0  # one cleaned segment's objects, the store retried while unavailable
NO_MAX_COMPACTION_LAG = LogConfig().max_compaction_lag_ms


@dataclasses.dataclass(frozen=True, slots=True)
class BucketCleanSpec:
    """What one partition's task needs (pickled to the executor)."""

    root: S3Root
    view: PartitionView  # the manifest, epoch history and pieces the plan read
    first_dirty_offset: int
    first_uncleanable_offset: int
    config: dict[str, str]
    now_ms: int
    run: str  # the run id: part of the cleaned objects' keys
    index_bytes: dict[int, tuple[int, int]]  # base offset -> (.index, .timeindex) object sizes
    open_known: bool  # the driver knew the transactions open at the manifest's end (its snapshot object)

    @property
    def keys(self) -> PartitionKeys:
        return self.view.keys


def plan_bucket_partition(store: ObjectStore, topic: str, partition: int, config: LogConfig, *, now_ms: int,
                          force: bool, run: str) -> tuple[PartitionCompaction, BucketCleanSpec | None]:
    out = PartitionCompaction(topic, partition)
    keys = PartitionKeys(topic, partition)
    view = view_partition(store, keys)
    manifest = view.manifest
    tail = [piece for piece in view.pieces if piece.kind == FLUSH]
    live = [e for e in manifest.segments if e.end_offset > manifest.log_start_offset]
    if not live and not tail:
        return out.skip(SkipReason.NO_SEGMENTS, "no segments"), None
    if view.history.pending:
        return out.skip(SkipReason.TAKEOVER, "a takeover is in progress (its start not recorded yet); run again"), None
    sizes = {info.key: info.size for info in store.list(keys.prefix + "/")}
    index_bytes = {e.base_offset: (sizes.get(e.index_key, 0), sizes.get(e.time_index_key, 0)) for e in live}
    first_batch = {e.base_offset: _first_batch_timestamp(store, e) for e in live} \
        if config.max_compaction_lag_ms != NO_MAX_COMPACTION_LAG else {}
    summaries = tuple(SegmentSummary(e.base_offset, e.size, e.largest_timestamp,
                                     first_batch.get(e.base_offset, NO_TIMESTAMP),
                                     *index_bytes[e.base_offset]) for e in live)
    # The tail is the active segment (only its leader seals it); its end is not read here, so the
    # log end is where it starts: the round's upper bound never passes it anyway.
    end = manifest.end_offset
    active = SegmentSummary(end, sum(piece.size or 0 for piece in tail))
    start = min(max(manifest.log_start_offset, live[0].base_offset if live else end), end)
    # None (no snapshot object at the end): not known here; the task's scan caps the round then.
    open_at_end = open_transactions(store, keys, manifest)
    stable = min(max(min((open_at_end or {}).values(), default=end), start), end)
    summary = LogSummary(topic, partition, summaries + (active,), start, end, last_stable_offset=stable)
    ltc = log_to_clean(summary, manifest.cleaner_offset, config, now_ms)
    if not chosen(out, ltc, config, force):
        return out, None
    return out, BucketCleanSpec(store.root, view, ltc.first_dirty_offset, ltc.first_uncleanable_offset,
                                config.to_properties(), now_ms, run, index_bytes, open_at_end is not None)


def _first_batch_timestamp(store: ObjectStore, entry: SegmentEntry) -> int:
    """The first batch's max timestamp (LogSegment.getFirstBatchTimestamp): one ranged GET."""
    if entry.size < HEADER_SIZE:
        return NO_TIMESTAMP
    return read_header(store.get_range(entry.key, 0, HEADER_SIZE)).max_timestamp


# ----------------------------------------------------------------------------------- executors

class CleanBucketPartition:
    """One task per partition: read its log from the bucket, clean it, write the cleaned objects."""

    def __init__(self, specs: dict[tuple[str, int], BucketCleanSpec]):
        self.specs = specs

    def __call__(self, key: tuple[str, int]) -> list[dict]:
        spec = self.specs[key]
        try:
            return self._clean(spec)
        except Exception as exc:  # reported per partition; the others still commit
            log.exception("compaction of %s-%d failed", *key)
            return [dict(_row(spec), error=f"{type(exc).__name__}: {exc}")]

    def _clean(self, spec: BucketCleanSpec) -> list[dict]:
        store = ObjectStore(spec.root)
        manifest, keys = spec.view.manifest, spec.keys
        live = [e for e in manifest.segments if e.end_offset > manifest.log_start_offset]
        segments = [SegmentData(e.base_offset, store.get(e.key), *spec.index_bytes[e.base_offset]) for e in live]
        tail = bytearray()  # the tail's valid batches, each offset once (scan_tail's rule)
        for _where, batch in scan_tail(store, spec.view):
            tail += batch.data
        if tail or not segments:
            segments.append(SegmentData(manifest.end_offset, bytes(tail)))
        config = LogConfig.from_properties(spec.config)
        result = clean_log(segments, first_dirty_offset=spec.first_dirty_offset,
                           first_uncleanable_offset=_below_open_transactions(segments, spec), config=config,
                           now_ms=spec.now_ms, topic=keys.topic, partition=keys.partition)
        entries = {e.base_offset: e for e in live}
        rows = []
        for group in result.groups:
            replaced = [entries[base] for base in group.replaces]
            headers = [batch.header for batch in iter_batches(group.data, source=f"{keys.prefix} cleaned")]
            key = functools.partial(keys.cleaned_segment, group.base_offset, manifest.version, spec.run)
            try:
                cleaned = write_segment(store, group.data, headers, config, key, time.monotonic() + WRITE_TIMEOUT_S,
                                        base_offset=group.base_offset, end_offset=replaced[-1].end_offset,
                                        aborted=_txn_index_entries(store, spec, replaced, group.aborted_txns))
            except FlushConflict:
                raise TopiclakeError(f"{keys.prefix}: another run wrote the cleaned segment at "
                                     f"{group.base_offset}") from None
            if not headers:  # nothing left: keep the replaced segments' age (Kafka keeps the last one's mtime)
                cleaned = dataclasses.replace(cleaned, largest_timestamp=max(e.largest_timestamp for e in replaced))
            rows.append(dict(_row(spec), base_offset=group.base_offset, replaces=list(group.replaces),
                             next_offset=cleaned.end_offset, path=cleaned.key, size=cleaned.size,
                             bytes_read=group.stats.bytes_read, records_read=group.stats.records_read,
                             records_retained=group.stats.records_retained,
                             batches_emptied=group.stats.batches_emptied, checkpoint=result.checkpoint,
                             map_entries=result.offset_map_entries, entry=dataclasses.asdict(cleaned)))
        return rows or [dict(_row(spec), checkpoint=result.checkpoint)]


def _below_open_transactions(segments: Sequence[SegmentData], spec: BucketCleanSpec) -> int:
    """The planned first uncleanable offset, lowered to the base of the segment holding the first
    offset of a transaction still open (Kafka's round never passes the last stable offset, and
    cleans whole segments), by a header scan when the driver had no snapshot object at the
    manifest's end to cap it with."""
    if spec.open_known:
        return spec.first_uncleanable_offset
    txns = Transactions()
    for segment in segments:
        for batch in iter_batches(segment.data, source=f"{spec.keys.prefix}@{segment.base_offset}"):
            txns.see(batch)
    stable = txns.last_stable_offset(spec.first_uncleanable_offset)
    if stable >= spec.first_uncleanable_offset:
        return spec.first_uncleanable_offset
    return max((s.base_offset for s in segments if s.base_offset <= stable), default=spec.first_dirty_offset)


def _txn_index_entries(store: ObjectStore, spec: BucketCleanSpec, replaced: Sequence[SegmentEntry],
                       retained: Sequence[AbortedTxn]) -> list[TxnIndexEntry]:
    """The cleaned segment's `.txnindex` entries: the aborted transactions Kafka's cleaner
    re-indexes (their ABORT marker kept: CleanedGroup.aborted_txns, whose first offsets the
    cleaner found in the whole log), each with the last stable offset of the replaced segments'
    entry for it (objectlog.aborted: their `.txnindex` objects, or a scan of an older segment)."""
    if not retained:
        return []
    stable = {(e.producer_id, e.last_offset): e.last_stable_offset
              for entry in replaced for e in segment_aborted(store, spec.keys, entry)}
    # None known: 0 never ends a reader's search of the index early (Kafka stops at an entry
    # whose last stable offset passes its bound).
    return [TxnIndexEntry(txn.producer_id, txn.first_offset, txn.last_offset,
                          stable.get((txn.producer_id, txn.last_offset), 0)) for txn in retained]


def _row(spec: BucketCleanSpec) -> dict:
    return dict(topic=spec.keys.topic, partition=spec.keys.partition, base_offset=None, replaces=[], next_offset=None,
                path=None, size=0, bytes_read=0, records_read=0, records_retained=0, batches_emptied=0,
                checkpoint=None, map_entries=0, error=None, entry=None)


# -------------------------------------------------------------------------------------- driver

def compact_bucket(spark, options: CompactOptions, result: CompactResult,
                   progress: ProgressCallback | None) -> None:
    started = time.monotonic()
    assert isinstance(options.root, S3Root), "compaction.compact sends only object-store roots here"
    store = ObjectStore(options.root)
    now_ms = options.now_ms if options.now_ms is not None else int(time.time() * 1000)
    known = bucket_topics(store)
    compacted = bucket_compacted_topics(store, options.topics, known)
    specs: dict[tuple[str, int], BucketCleanSpec] = {}
    planned: list[PartitionCompaction] = []
    for topic, partitions, config in compacted:
        for p in range(partitions):
            part, spec = plan_bucket_partition(store, topic, p, config, now_ms=now_ms, force=options.force,
                                               run=result.run_id)
            result.partitions.append(part)
            if spec is not None:
                specs[(topic, p)] = spec
                planned.append(part)
    if not options.topics:  # every topic was looked at: the summary counts the others too
        names = {topic for topic, _n, _config in compacted}
        result.partitions += [PartitionCompaction(meta.name, p).skip(SkipReason.NOT_COMPACTED)
                              for meta in known.values() if meta.name not in names for p in range(meta.partitions)]
    if planned:
        sc = spark.sparkContext
        keys = list(specs)
        with spark_job_group(sc, f"topiclake-compact-{result.run_id}", describe_planned(planned), progress):
            rows = collect(sc.parallelize(keys, len(keys)).flatMap(CleanBucketPartition(specs)))
        for part in planned:
            commit_cleaned(store, part, specs[(part.topic, part.partition)], rows)
    result.duration_s = time.monotonic() - started


def bucket_compacted_topics(store: ObjectStore, topics: Sequence[str] = (),
                            known: dict | None = None) -> list[tuple[str, int, LogConfig]]:
    """compaction.compacted_topics for the topics registered in the bucket (topics/<topic>.json)."""
    known = bucket_topics(store) if known is None else known
    unknown = [t for t in topics if t not in known]
    if unknown:
        raise TopiclakeError(f"unknown topic(s) on {store.root}: {', '.join(unknown)}")
    return compacted_of([known[t] for t in topics] if topics else list(known.values()), named=bool(topics))


def commit_cleaned(store: ObjectStore, part: PartitionCompaction, spec: BucketCleanSpec, rows: list[dict]) -> None:
    """The partition's ONE manifest commit: the cleaned segments in place of those they replace,
    and the new cleaner checkpoint."""
    mine = [r for r in rows if r["topic"] == part.topic and r["partition"] == part.partition]
    errors = [r["error"] for r in mine if r["error"]]
    if errors or not mine:
        part.error = "; ".join(errors) or "the compaction task returned nothing"
        return  # objects already written are garbage: no manifest names them
    groups = [r for r in mine if r["entry"] is not None]
    cleaned = tuple(SegmentEntry(**r["entry"]) for r in groups)
    base = spec.view.manifest
    replaced = [e for e in base.segments if e.base_offset in {b for r in groups for b in r["replaces"]}]
    checkpoint = mine[0]["checkpoint"]

    def replace(newest: Manifest) -> Manifest | None:
        segments = newest.segments
        if not replaced:
            return newest.successor(leader_epoch=newest.leader_epoch, cleaner_offset=checkpoint)
        at = segments.index(replaced[0]) if replaced[0] in segments else -1
        if at < 0 or segments[at:at + len(replaced)] != tuple(replaced):
            return None  # retention or a merge replaced some of them meanwhile
        kept = segments[:at] + cleaned + segments[at + len(replaced):]
        return newest.successor(leader_epoch=newest.leader_epoch, segments=kept, cleaner_offset=checkpoint)

    crash_point("bucket-commit")
    if not replaced and base.cleaner_offset == checkpoint:
        committed: Manifest | None = base  # nothing to change
    else:
        try:
            committed = commit_change(store, spec.keys, base, replace)
        except TopiclakeError as exc:  # every attempt lost to other writers: this partition only fails
            part.error = f"{part.name}: not committed: {exc}; run again"
            log.error("%s", part.error)
            return
    if committed is None:
        part.error = (f"{part.name}: not committed: the manifest changed under it (retention or a merge replaced a "
                      f"segment it cleaned); run again")
        log.error("%s", part.error)
        return
    if committed is not base:
        post_notice(store, spec.keys, committed.version)
    part.checkpoint, part.map_entries = checkpoint, mine[0]["map_entries"]
    part.bytes_before = sum(e.size for e in replaced)
    part.bytes_after = sum(e.size for e in cleaned)
    part.records_read = sum(r["records_read"] for r in groups)
    part.records_retained = sum(r["records_retained"] for r in groups)
    part.segments_before, part.segments_after = len(replaced), len(cleaned)
    log.info("%s: compacted %d segments (%d -> %d bytes, %d records dropped) in manifest %d, checkpoint %d",
             part.name, len(replaced), part.bytes_before, part.bytes_after, part.records_dropped, committed.version,
             checkpoint)

