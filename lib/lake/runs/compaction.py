"""Kafka log compaction as a Spark job: one task per partition builds its key map and rewrites it,
the driver swaps the cleaned segments in.

    spark-submit jobs/compact.py [--topic T ...] [--data DIR|s3://bucket/prefix] [--config FILE] [--force]
        [--target-task-bytes N] [--now-ms MS] [--master M]
    topiclake compact ...same options...       # local Spark, progress bar, summary

Every partition of every topic whose cleanup.policy includes `compact` (the broker's
`__consumer_offsets` too), or of the `--topic`s given. Kafka's rules come from the pure modules
in topiclake.segments:

1. Driver (`plan_partition`): one header scan per partition (log/state.py) gives a LogSummary;
   `cleanable.log_to_clean` chooses the range [first dirty, first uncleanable): never the active
   segment, never past the last stable offset, min.compaction.lag.ms honoured, whole segments
   only. A partition is cleaned when Kafka's cleaner would pick it (dirty ratio >
   min.cleanable.dirty.ratio, or max.compaction.lag.ms overdue), or always with `--force`.
2. Executors, ONE task per partition (`RewritePartition`): the key map (`offset_map.build_offset_map`,
   as the single-process cleaner builds it) over the partition's mapped segments, then
   `cleaner.rewrite_log` with it; each cleaned group is written next to the log as `.cleaned`
   files with their indexes, from the batches in memory (`maintenance.write_cleaned_segment`:
   the last replaced segment's mtime, as Kafka does). Only metadata rows return to the driver.
   The split path (`split_partitions`), only when there are fewer partitions than task slots: a
   partition whose dirty range is above --target-task-bytes has its map built first by map tasks
   over byte ranges of its dirty segments, cut along batch boundaries, each pre-aggregated
   (`offset_map.task_offset_map`: the max offset per MD5 digest, one row per distinct key of the
   task, numpy columns); the driver merges them (`OffsetMap.merge`) and broadcasts the map to
   the partition's rewrite task. Otherwise splitting only adds a job, the shares' trip to the
   driver, a merge there and a broadcast (bench/README.md, "Where the compaction job's time goes").
3. Driver: `maintenance.replace_segments` (the crash-safe swap, under the partition lock; the
   old segments must be byte-for-byte what was cleaned; it takes the tasks' indexes, and indexes
   again only a segment it pads in its step 0) and then the cleaner checkpoint. The broker picks
   the new segments up on its next refresh.

Only the driver touches the log's segment list, and one compaction job at a time per partition
(a non-blocking flock on `.topiclake.cleaner.lock`; a busy partition is skipped and reported).

An object-store root (s3://bucket/prefix): the same rules, planning and summary, with a manifest
commit in place of the renames (runs/bucket_compaction.py).

Cluster mode (the partition has `leader-epochs/`; segments.leader_reads): the plan covers the valid
log only (a fenced leader's files are not in it, the active segment is the last segment of the
log, each segment is read up to its valid end), the map and rewrite tasks carry the epoch entries
and drop any batch a fenced leader wrote, the swap (maintenance.replace_segments) never renames a
file that is not part of the log, and before it the driver checks that no takeover moved the log
below what was read (`confirm`): if one did, the partition is not swapped and reports why.
"""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa

from topiclake.segments import filenames
from topiclake.segments.batch import iter_batches
from topiclake.segments.cleanable import log_to_clean
from topiclake.segments.cleaner import rewrite_log
from topiclake.segments.config import LogConfig
from topiclake.segments.errors import TopiclakeError
from topiclake.segments.leader_reads import ReadEpochs, valid_only
from topiclake.segments.log_summary import SegmentData
from topiclake.segments.maintenance import (crash_point, read_cleaner_offset, replace_segments,
                                            write_cleaned_segment, write_cleaner_offset)
from topiclake.segments.offset_map import OffsetMap, build_offset_map, task_offset_map
from topiclake.segments.storage import StorageLayout, TopicRegistry

from ..log.source import list_partition, open_segment
from ..log.state import PartitionState, scan_state
from ..metrics import run_metrics
from ..spark.progress import ProgressCallback, spark_job_group
from ..spark.session import collect
from .compaction_plan import (CompactOptions, CompactResult, MapTask, PartitionCompaction,
                              RewriteSpec, SegmentRef, SkipReason, chosen, compacted_of, describe_planned)

log = logging.getLogger(__name__)

CLEANER_LOCK = ".topiclake.cleaner.lock"



# ------------------------------------------------------------------------------------ planning

def compacted_topics(layout: StorageLayout, topics: Sequence[str] = ()) -> list[tuple[str, int, LogConfig]]:
    """(topic, partitions, config) of the named topics, or of every topic whose cleanup.policy
    includes compact. A named topic that is not compacted is an error (naming it)."""
    registry = TopicRegistry(layout)
    return compacted_of([registry.get(t) for t in topics] if topics else registry.list(), named=bool(topics))


def compacted_partitions(root, topics: Sequence[str] = ()) -> list[tuple[str, int]]:
    """(topic, partition) of compacted_topics under a directory or an object-store root (its
    errors before Spark starts)."""
    if isinstance(root, Path):
        found = compacted_topics(StorageLayout(root), topics)
    else:
        from topiclake.store.objects import ObjectStore

        from .bucket_compaction import bucket_compacted_topics

        found = bucket_compacted_topics(ObjectStore(root), topics)
    return [(topic, p) for topic, partitions, _config in found for p in range(partitions)]


def _cut(state: PartitionState, start: int, end: int, target: int) -> Iterator[tuple[str, int, int, int]]:
    """(path, inode, start position, end position) byte ranges of the segments holding [start,
    end), cut at batch boundaries into pieces of about `target` bytes."""
    for seg_summary in state.summary.segments_in(start, end):
        scan = state.segment(seg_summary.base_offset)
        if not len(scan.positions):
            continue
        piece_start = scan.positions[0]
        for i, pos in enumerate(scan.positions):
            if pos - piece_start >= target:
                yield scan.file.path, scan.file.inode, piece_start, pos
                piece_start = pos
            if scan.next_offsets[i] >= end:
                break
        yield scan.file.path, scan.file.inode, piece_start, scan.end


def plan_partition(layout: StorageLayout, topic: str, partition: int, config: LogConfig, *, now_ms: int,
                   force: bool, target_task_bytes: int) -> PartitionCompaction:
    out = PartitionCompaction(topic, partition)
    state = scan_state(list_partition(layout, topic, partition))
    if state is None:
        return out.skip(SkipReason.NO_SEGMENTS, "no segments")
    directory = Path(state.files.directory)
    checkpoint = read_cleaner_offset(directory)
    ltc = log_to_clean(state.summary, checkpoint, config, now_ms)
    if not chosen(out, ltc, config, force):
        return out
    epochs = state.files.epochs
    refs = tuple(SegmentRef(s.file.base_offset, s.file.path, s.file.inode,
                            s.valid_size(s is state.segments[-1], epochs is not None), s.file.size, s.index_bytes,
                            s.time_index_bytes, s.mtime_ms) for s in state.segments)
    entries = tuple(map(tuple, epochs.entries)) if epochs is not None else None
    out.epochs, out.read_end = epochs, state.high_watermark
    out.spec = RewriteSpec(topic, partition, str(directory), refs, ltc.first_dirty_offset,
                           ltc.first_uncleanable_offset, config.to_properties(), now_ms, state.aborted, entries)
    out.map_tasks = [MapTask(topic, partition, path, inode, start, end, ltc.first_dirty_offset,
                             ltc.first_uncleanable_offset, tuple(state.aborted), entries)
                     for path, inode, start, end in _cut(state, ltc.first_dirty_offset, ltc.first_uncleanable_offset,
                                                         target_task_bytes)]
    return out


# ----------------------------------------------------------------------------------- executors

def map_task(task: MapTask) -> tuple[tuple[str, int], np.ndarray, np.ndarray]:
    """On an executor: ((topic, partition), digest words, offsets), the max offset per digest of
    the keyed records of committed data in the task's share of the dirty range. Pre-aggregated,
    so one row per distinct key of the task travels, as numpy columns (plain RDD tasks: no
    DataFrame conversion on either side)."""
    with open_segment(task.path, task.inode) as f:
        data = os.pread(f.fileno(), task.end - task.start, task.start)
    source = f"{task.topic}-{task.partition} {task.path} (bytes {task.start}..{task.end})"
    batches = valid_only(iter_batches(data, source=source), ReadEpochs.history_of(task.epochs))
    share = task_offset_map(batches, start=task.dirty_start, end=task.dirty_end, aborted=task.aborted)
    return (task.topic, task.partition), share.words, share.offsets


def merge_task_maps(shares: Sequence[tuple[tuple[str, int], np.ndarray, np.ndarray]],
                    planned: Sequence["PartitionCompaction"]) -> dict[tuple[str, int], OffsetMap]:
    """The driver's reduce: each partition's map from its tasks' pre-aggregated shares (a
    partition whose dirty range has no keyed record gets an empty map: its keyless records and
    aborted data still go)."""
    by_partition: dict[tuple[str, int], list[OffsetMap]] = {}
    for key, words, offsets in shares:
        by_partition.setdefault(key, []).append(OffsetMap(words, offsets))
    return {(p.topic, p.partition): OffsetMap.merge(by_partition.get((p.topic, p.partition), ()),
                                                    latest_offset=p.spec.first_uncleanable_offset - 1)
            for p in planned}


class RewritePartition:
    """One task per partition: its key map -> `.cleaned` files + result rows. A partition of the
    split path gets the map broadcast (its map tasks' shares merged on the driver); one of the
    fused path builds it here, over the same mapped segments, as the single-process cleaner does."""

    def __init__(self, specs: dict[tuple[str, int], RewriteSpec], maps: dict[tuple[str, int], object]):
        self.specs = specs
        self.maps = maps  # (topic, partition) -> Broadcast of (words, offsets, latest_offset); fused: absent

    def __call__(self, key: tuple[str, int]) -> list[dict]:
        spec = self.specs[key]
        try:
            shared = self.maps.get(key)
            return self._rewrite(spec, None if shared is None else OffsetMap(*shared.value))
        except Exception as exc:  # reported per partition; the others still swap
            log.exception("rewrite of %s-%d failed", *key)
            return [dict(_empty_row(spec), error=f"{type(exc).__name__}: {exc}")]

    def _rewrite(self, spec: RewriteSpec, offset_map: OffsetMap | None) -> list[dict]:
        with ExitStack() as stack:
            segments = []
            for ref in spec.segments:
                f = stack.enter_context(open_segment(ref.path, ref.inode))
                data: bytes | memoryview = b""
                if ref.size:
                    m = mmap.mmap(f.fileno(), ref.size, access=mmap.ACCESS_READ)
                    stack.callback(_close_quietly, m)
                    data = memoryview(m)
                segments.append(SegmentData(ref.base_offset, data, ref.index_bytes, ref.time_index_bytes,
                                            ref.mtime_ms))
            epochs = ReadEpochs.history_of(spec.epochs)
            config = LogConfig.from_properties(spec.config)
            if offset_map is None:
                offset_map = build_offset_map(segments, start=spec.first_dirty_offset,
                                              end=spec.first_uncleanable_offset, aborted=spec.aborted,
                                              topic=spec.topic, partition=spec.partition, epochs=epochs)
            result = rewrite_log(segments, offset_map, first_uncleanable_offset=spec.first_uncleanable_offset,
                                 config=config, now_ms=spec.now_ms,
                                 aborted_txns=spec.aborted, topic=spec.topic, partition=spec.partition,
                                 epochs=epochs)
            rows = []
            for group in result.groups:
                path = filenames.segment_file(Path(spec.directory), group.base_offset,
                                              filenames.LOG_SUFFIX + filenames.CLEANED_SUFFIX)
                # indexed here, in parallel, from the batches in memory, rather than by the driver's swap
                indexed_next_offset = write_cleaned_segment(Path(spec.directory), group.base_offset, group.data,
                                                            config, group.last_modified_ms)
                rows.append(dict(topic=spec.topic, partition=spec.partition, base_offset=group.base_offset,
                                 replaces=list(group.replaces), next_offset=group.next_offset, path=str(path),
                                 size=len(group.data), bytes_read=group.stats.bytes_read,
                                 records_read=group.stats.records_read,
                                 records_retained=group.stats.records_retained,
                                 batches_emptied=group.stats.batches_emptied, checkpoint=result.checkpoint,
                                 map_entries=result.offset_map_entries, indexed_next_offset=indexed_next_offset,
                                 error=None))
            del segments, result
        return rows or [dict(_empty_row(spec), checkpoint=offset_map.end_offset)]


def _close_quietly(m: mmap.mmap) -> None:
    try:
        m.close()
    except BufferError:
        pass


def _empty_row(spec: RewriteSpec) -> dict:
    return dict(topic=spec.topic, partition=spec.partition, base_offset=None, replaces=[], next_offset=None,
                path=None, size=0, bytes_read=0, records_read=0, records_retained=0, batches_emptied=0,
                checkpoint=None, map_entries=0, indexed_next_offset=None, error=None)


_RESULT_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("base_offset", pa.int64()),
                            ("replaces", pa.list_(pa.int64())), ("next_offset", pa.int64()), ("path", pa.string()),
                            ("size", pa.int64()), ("bytes_read", pa.int64()), ("records_read", pa.int64()),
                            ("records_retained", pa.int64()), ("batches_emptied", pa.int64()),
                            ("checkpoint", pa.int64()), ("map_entries", pa.int64()),
                            ("indexed_next_offset", pa.int64()), ("error", pa.string())])


def _result_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=_RESULT_SCHEMA)


# -------------------------------------------------------------------------------------- driver

def _try_cleaner_lock(stack: ExitStack, directory: str) -> bool:
    f = stack.enter_context(open(Path(directory) / CLEANER_LOCK, "a+b"))
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def compact(spark, options: CompactOptions, *, progress: ProgressCallback | None = None) -> CompactResult:
    """Clean the compacted topics' partitions; the run is recorded (run_metrics)."""
    result = CompactResult(run_metrics.new_run_id(), named_topics=tuple(options.topics))
    started_at = time.time()
    with run_metrics.recording(options.root, lambda exc: [run_record(result, exc, started=started_at)]):
        _compact(spark, options, result, progress)
    return result


def run_record(result: CompactResult, exc: BaseException | None, *, started: float) -> run_metrics.RunRecord:
    """`table` is the topics the run was given (`*`: all); a partition that failed fails the run."""
    scope = run_metrics.topics_scope(result.named_topics)
    if exc is not None or result.errors:
        error = exc if exc is not None else TopiclakeError("; ".join(p.error for p in result.errors))
        return run_metrics.failure("compact", scope, "", error, run_id=result.run_id, started=started)
    cleaned = result.cleaned
    now = time.time()
    return run_metrics.RunRecord(
        operation="compact", table=scope, run_id=result.run_id, end_time=now, duration_s=now - started,
        rows=sum(p.records_retained for p in cleaned), files=sum(p.segments_after for p in cleaned),
        bytes=result.bytes_before, offsets=[run_metrics.OffsetRange(
            p.topic, p.partition, p.to_clean.first_dirty_offset, p.to_clean.first_uncleanable_offset)
            for p in cleaned if p.to_clean is not None])


def _compact(spark, options: CompactOptions, result: CompactResult, progress: ProgressCallback | None) -> None:
    if not isinstance(options.root, Path):  # an object-store root: manifest commits, not renames
        from .bucket_compaction import compact_bucket

        compact_bucket(spark, options, result, progress)
        return
    started = time.monotonic()
    layout = StorageLayout(options.root)
    now_ms = options.now_ms if options.now_ms is not None else int(time.time() * 1000)
    with ExitStack() as locks:
        planned: list[PartitionCompaction] = []
        configs: dict[str, LogConfig] = {}
        for topic, partitions, config in compacted_topics(layout, options.topics):
            configs[topic] = config
            for p in range(partitions):
                directory = layout.log_dir(topic, p)
                if directory.is_dir() and not _try_cleaner_lock(locks, str(directory)):
                    result.partitions.append(PartitionCompaction(topic, p).skip(
                        SkipReason.LOCKED, "another compaction job holds it"))
                    continue
                part = plan_partition(layout, topic, p, config, now_ms=now_ms, force=options.force,
                                      target_task_bytes=options.target_task_bytes)
                result.partitions.append(part)
                if part.spec is not None:
                    planned.append(part)
        if not options.topics:  # every topic was looked at: the summary counts the others too
            result.partitions += [PartitionCompaction(meta.name, p).skip(SkipReason.NOT_COMPACTED)
                                  for meta in TopicRegistry(layout).list() if meta.name not in configs
                                  for p in range(meta.partitions)]
        if planned:
            rows = _run(spark, planned, result.run_id, progress, options.target_task_bytes)
            for part in planned:
                _swap(part, rows, configs[part.topic])
    result.duration_s = time.monotonic() - started


def split_partitions(planned: Sequence[PartitionCompaction], slots: int,
                     target_task_bytes: int) -> list[PartitionCompaction]:
    """The partitions whose key map is built by map tasks over pieces of their dirty range (the
    split path); the others are cleaned whole by one task each (the fused path). Splitting costs
    a second job, the shares' trip to the driver, a merge there and a broadcast; it pays only
    where a partition's map would otherwise keep a task slot busy while others sit idle: fewer
    partitions than slots, and a dirty range above one task's share."""
    if len(planned) >= slots:
        return []
    return [p for p in planned if p.dirty_bytes > target_task_bytes]


def _run(spark, planned: Sequence[PartitionCompaction], run_id: str, progress: ProgressCallback | None,
         target_task_bytes: int) -> pa.Table:
    sc = spark.sparkContext
    split = split_partitions(planned, sc.defaultParallelism, target_task_bytes)
    for part in split:
        part.split = True
    tasks = sorted((t for p in split for t in p.map_tasks), key=lambda t: t.start - t.end)  # big first
    specs = {(p.topic, p.partition): p.spec for p in sorted(planned, key=lambda p: -p.dirty_bytes)}  # big first
    broadcasts = []
    try:
        with spark_job_group(sc, f"topiclake-compact-{run_id}", describe_planned(planned), progress):
            maps = {}
            if tasks:
                maps = merge_task_maps(collect(sc.parallelize(tasks, len(tasks)).map(map_task)), split)
            for m in maps.values():
                broadcasts.append(sc.broadcast((m.words, m.offsets, m.latest_offset)))
            rewrite = RewritePartition(specs, dict(zip(maps, broadcasts)))
            del maps
            keys = list(specs)
            rows = collect(sc.parallelize(keys, len(keys)).flatMap(rewrite))
        return _result_table(rows)
    finally:
        for b in broadcasts:
            b.destroy()


def _swap(part: PartitionCompaction, rows: pa.Table, config: LogConfig) -> None:
    mine = [r for r in rows.to_pylist() if r["topic"] == part.topic and r["partition"] == part.partition]
    errors = [r["error"] for r in mine if r["error"]]
    spec = part.spec
    directory = Path(spec.directory)
    if errors or not mine:
        part.error = "; ".join(errors) or "the rewrite task returned nothing"
        _remove_cleaned(r["path"] for r in mine)
        return
    groups = [r for r in mine if r["path"] is not None]
    refs = {ref.base_offset: ref for ref in spec.segments}
    old = [b for r in groups for b in r["replaces"]]
    part.checkpoint = mine[0]["checkpoint"]
    part.map_entries = mine[0]["map_entries"]
    try:
        if part.epochs is not None:  # no takeover moved the log below what the tasks read
            part.epochs.confirm(directory, part.read_end)
        if groups:
            replace_segments(directory, old, [r["path"] for r in groups], config,
                             expected={b: (refs[b].inode, refs[b].file_size) for b in old},
                             indexed={r["base_offset"]: (r["size"], r["indexed_next_offset"]) for r in groups
                                      if r["indexed_next_offset"] is not None})
        crash_point("swapped-all")
        write_cleaner_offset(directory, part.checkpoint)
    except TopiclakeError as exc:
        part.error = f"{part.name}: swap failed: {exc}"
        part.checkpoint = None
        _remove_cleaned(r["path"] for r in groups)
        log.error("%s", part.error)
        return
    part.bytes_before = sum(refs[b].size for b in old)
    part.bytes_after = sum(os.stat(filenames.log_file(directory, r["base_offset"])).st_size for r in groups)
    part.records_read = sum(r["records_read"] for r in groups)
    part.records_retained = sum(r["records_retained"] for r in groups)
    part.segments_before, part.segments_after = len(old), len(groups)
    log.info("%s: compacted %d segments (%d -> %d bytes, %d records dropped), checkpoint %d", part.name, len(old),
             part.bytes_before, part.bytes_after, part.records_dropped, part.checkpoint)


def _remove_cleaned(paths) -> None:
    for path in paths:
        if path:
            Path(path).unlink(missing_ok=True)


def format_summary(result: CompactResult) -> str:
    """A line per cleaned or failed partition. Skipped ones: one line per partition of the named
    topics (--topic); otherwise one line counting them by reason."""
    lines = [f"compact run {result.run_id}: {len(result.cleaned)} partitions cleaned, "
             f"{result.bytes_before} -> {result.bytes_after} bytes in {result.duration_s:.1f} s"]
    skipped = Counter()
    for p in result.partitions:
        if p.error is not None:
            lines.append(f"  {p.name}: ERROR {p.error}")
        elif p.checkpoint is not None:
            lines.append(f"  {p.name}: {p.segments_before} -> {p.segments_after} segments, {p.bytes_before} -> "
                         f"{p.bytes_after} bytes, {p.records_read} records read, {p.records_dropped} dropped, "
                         f"{p.map_entries} keys{f' (key map from {len(p.map_tasks)} tasks)' if p.split else ''}, "
                         f"cleaner checkpoint {p.checkpoint}")
        elif result.named_topics:
            lines.append(f"  {p.name}: skipped ({p.skipped})")
        else:
            skipped[p.skip_reason] += 1
    if skipped:
        counts = ", ".join(f"{n} {reason.value}" for reason, n in sorted(skipped.items(), key=lambda kv: -kv[1]))
        lines.append(f"  skipped {sum(skipped.values())} partitions: {counts}")
    return "\n".join(lines)


def run(options: CompactOptions, *, master: str | None = None, progress: ProgressCallback | None = None,
        spark_conf: dict[str, str] | None = None) -> CompactResult:
    """Entry point of jobs/compact.py and `topiclake compact`."""
    from ..spark.session import get_session

    spark = get_session("topiclake-compact", master=master, conf=spark_conf)
    return compact(spark, options, progress=progress)
