"""Segment retention (Kafka's deleteOldSegments) as a job, plus the tables' own maintenance.

    spark-submit jobs/retention.py [--topic T ...] [--data DIR] [--config FILE]
        [--protect-groups G1,G2] [--now-ms MS] [--dry-run]
        [--table NAME ...] [--table-retention-days N] [--optimize] [--target-file-bytes N]
        [--vacuum-hours H]
    topiclake retain ...same options...

Log side, per partition of every topic (or of the `--topic`s): the plan is
`segments.retention.deletable_segments` — log-start-offset breach, then retention.bytes, then
retention.ms (policy delete), whole segments only, oldest first, never past the high watermark
(the end of the last complete batch the broker wrote). `maintenance.delete_segments`
checkpoints the new log start offset and retires the files (`.deleted`, purged here after
file.delete.delay.ms); the broker picks the new start up on its next refresh (and at once for
ListOffsets and an out-of-range fetch): ListOffsets earliest answers it, and fetching below it is
OFFSET_OUT_OF_RANGE.

The active segment: when every segment is deletable, Kafka rolls first and deletes the old
active one. Only the broker may write or roll the active segment, so this job leaves it to the
broker: it deletes every closed segment and reports `active segment kept`; the broker rolls on
segment.ms / segment.bytes and the next run deletes the rolled segment.

`--protect-groups G1,G2`: a segment goes only once every protected group has committed past it
(its upper bound <= the group's offset). A group's offsets are the Delta txn versions
`<group>:<topic>:<partition>` in any table under <root>/tables (lake ingest groups), else the
offsets the broker committed for it in `__consumer_offsets` (read through the segment files).
A group with offsets for some partition of a topic and none for another partition protects that
partition entirely (it would read it from the start). What Kafka would have deleted but a group
holds back is reported with the group and its lag.

Cluster mode (the partition has `leader-epochs/`; segments.leader_reads): the plan is made over
the valid log, so the active segment is the last segment of the log (the current leader's, never
a file a fenced leader created later and named higher), the high watermark is where the valid log
ends (and stays below a takeover in progress), and `maintenance.delete_segments` retires only
segments of the log: a fenced leader's files stay where they are, untouched.

A tiered topic (remote.storage.enable, docs/ARCHIVE.md): the log keeps local.retention.*, and
its table, the rest of the history, loses the rows past retention.ms / retention.bytes
(history_retention.py).

Table side (table_maintenance.py), for the `--table`s, through delta-spark on the job's Spark
master (--master, or spark-submit's): rows older than --table-retention-days (by the record_date
partition, one DELETE that removes whole files), small-file compaction (--optimize: OPTIMIZE) and
VACUUM (--vacuum-hours).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from topiclake.archive.reader import TopicTables
from topiclake.segments.errors import TopiclakeError
from topiclake.segments.maintenance import delete_segments, purge_deleted
from topiclake.segments.retention import RetentionPlan, deletable_segments
from topiclake.segments.config import LogConfig
from topiclake.segments.storage import StorageLayout, TopicRegistry
from topiclake.store.root import LocalRoot

from ..log.group_offsets import OFFSETS_TOPIC, broker_committed_offsets
from ..errors import UsageError
from ..log.roots import BucketLog, log_root
from ..log.source import list_partition
from ..log.state import scan_state
from ..metrics import run_metrics
from ..table import delta
from ..table.location import discover_tables
from .history_retention import HistoryCut, cut_history
from .table_maintenance import TableMaintenanceOptions, TableOutcome, maintain_tables

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RetentionOptions:
    root: Path | Any  # a directory, or an object-store root (topiclake.store's S3Root): runs/bucket_retention.py
    topics: tuple[str, ...] = ()  # empty: every topic (internal ones too)
    protect_groups: tuple[str, ...] = ()
    now_ms: int | None = None
    dry_run: bool = False
    tables: TableMaintenanceOptions | None = None
    master: str | None = None  # the tables' maintenance runs on this Spark master (default: local[*])


def split_names(values: Sequence[str]) -> tuple[str, ...]:
    """Repeatable name options that may also be comma lists: ("a,b", "c") -> ("a", "b", "c")."""
    return tuple(v for arg in values for v in arg.split(",") if v)


def options_from_args(args) -> RetentionOptions:
    """The job's options from parsed command-line values (jobs/retention.py and `topiclake retain`
    share the flag names): config, data, topic, protect_groups, now_ms, dry_run, table,
    table_retention_days, optimize, target_file_bytes, vacuum_hours."""
    from topiclake.segments.settings import load_settings, storage_location
    from topiclake.store.root import LocalRoot

    tables = None
    if args.table_retention_days is not None or args.optimize or args.vacuum_hours is not None:
        tables = TableMaintenanceOptions(tables=split_names(args.table), retention_days=args.table_retention_days,
                                         optimize=args.optimize, target_file_bytes=args.target_file_bytes,
                                         vacuum_hours=args.vacuum_hours)
    root = storage_location(load_settings(args.config), args.data)
    return RetentionOptions(root=root.path if isinstance(root, LocalRoot) else root, topics=split_names(args.topic),
                            protect_groups=split_names(args.protect_groups), now_ms=args.now_ms, dry_run=args.dry_run,
                            tables=tables, master=getattr(args, "master", None))


@dataclass(slots=True)
class PartitionRetention:
    topic: str
    partition: int
    plan: RetentionPlan | None = None
    deleted: tuple[int, ...] = ()  # base offsets retired by this run (a dry run: that it would retire)
    deleted_bytes: int = 0
    log_start_offset: int | None = None  # after this run (a dry run: after a real one)
    high_watermark: int | None = None
    active_kept: bool = False  # Kafka would roll and delete the active segment too
    protect: dict[str, int | None] = field(default_factory=dict)  # group -> committed offset
    purged: int = 0
    error: str | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(slots=True)
class RetentionResult:
    partitions: list[PartitionRetention] = field(default_factory=list)
    tables: list[TableOutcome] = field(default_factory=list)
    history: list[HistoryCut] = field(default_factory=list)  # tiered topics' tables cut by retention.ms
    duration_s: float = 0.0
    dry_run: bool = False  # nothing was changed: the summary says what a real run would do

    @property
    def errors(self) -> list[str]:
        return ([p.error for p in self.partitions if p.error] + [t.error for t in self.tables if t.error]
                + [f"table {h.uri}: {h.error}" for h in self.history if h.error])


def group_offsets(layout: StorageLayout, groups: Sequence[str]) -> dict[str, dict[tuple[str, int], int]]:
    """group -> {(topic, partition): next offset to read}: Delta txn versions first, then the
    broker's committed offsets for what the tables do not know."""
    out = broker_committed_offsets(layout, groups)
    tables = discover_tables(layout)
    if not tables or not groups:
        return out
    tps = [(t.name, p) for t in TopicRegistry(layout).list() for p in range(t.partitions)]
    in_tables: dict[str, dict[tuple[str, int], int]] = {g: {} for g in groups}
    for uri in tables.values():
        table = delta.load_table(uri)
        if table is None:
            continue
        for group in groups:
            for tp, offset in delta.committed_offsets(table, group, tps).items():
                if offset is not None:  # one group feeding several tables: the furthest commit
                    in_tables[group][tp] = max(offset, in_tables[group].get(tp, offset))
    for group in groups:  # the Delta log is the source of truth for an ingest group
        out[group].update(in_tables[group])
    return out


def _protection(offsets: Mapping[str, Mapping[tuple[str, int], int]], topic: str,
                partition: int) -> dict[str, int | None]:
    """The protected groups that read `topic`, with their offset for this partition (None: none
    committed yet for it, so everything is protected)."""
    out: dict[str, int | None] = {}
    for group, committed in offsets.items():
        if any(t == topic for t, _p in committed):
            out[group] = committed.get((topic, partition))
    return out


def topic_tables(root) -> TopicTables:
    """The topics' tables under `root` (a LocalRoot or an S3Root), read afresh (no cache: one run)."""
    options = root.delta_storage_options() or None
    return TopicTables(lambda topic: (root.uri("tables", topic), options), ttl=0)


def with_archive(tables: TopicTables, meta, partition: int,
                 protect: dict[str, int | None]) -> tuple[LogConfig, dict[str, int | None]]:
    """The config and protections retention applies to a partition: with remote.storage.enable (the
    topic's table is its remote tier, docs/ARCHIVE.md) local.retention.*, and nothing the table does
    not hold yet goes (its ingest's next offset protects like a group's; no table: everything)."""
    config = meta.log_config
    if not config.remote_storage_enable:
        return config, protect
    return config.local_retention, {**protect, f"table {meta.name}": tables.archived_end(meta.name, partition)}


def cut_histories(root, metas, result: RetentionResult, *, now_ms: int, dry_run: bool) -> None:
    """retention.ms over each tiered topic's table (history_retention.py); a failed cut (a
    concurrent commit won, say) is reported and retried by the next run."""
    options = root.delta_storage_options() or None
    for meta in metas:
        uri = root.uri("tables", meta.name)
        try:
            cut = cut_history(meta, uri, options, now_ms=now_ms, dry_run=dry_run)
        except Exception as exc:  # noqa: BLE001 - delta-rs' errors have no common base worth naming
            cut = HistoryCut(meta.name, uri, error=f"{type(exc).__name__}: {exc}")
            log.error("retention.ms over the table of %s failed: %s", meta.name, exc)
        if cut is not None:
            result.history.append(cut)


def retain_partition(layout: StorageLayout, topic: str, partition: int, config, *, now_ms: int,
                     protect: dict[str, int | None], dry_run: bool) -> PartitionRetention:
    out = PartitionRetention(topic, partition, protect=protect)
    state = scan_state(list_partition(layout, topic, partition))
    if state is None:
        return out
    summary = state.summary
    out.high_watermark = summary.high_watermark
    out.log_start_offset = summary.log_start_offset
    floor = {g: (o if o is not None else summary.log_start_offset) for g, o in protect.items()}
    plan = deletable_segments(summary, config, now_ms, protect_offsets=floor if floor else None)
    out.plan = plan
    active = summary.active.base_offset
    bases = [d.base_offset for d in plan.deletions if d.base_offset != active]
    out.active_kept = len(bases) < len(plan.deletions)
    if bases:
        out.deleted = tuple(bases)
        out.deleted_bytes = sum(d.size for d in plan.deletions if d.base_offset in bases)
        new_start = min(plan.log_start_offset, active)
        if dry_run:  # what delete_segments would checkpoint: the start never moves back
            out.log_start_offset = max(summary.log_start_offset, new_start)
        else:
            out.log_start_offset = delete_segments(state.files.directory, bases, new_start)
    if not dry_run:
        out.purged = purge_deleted(state.files.directory, min_age_ms=config.file_delete_delay_ms)
    return out


def retain(options: RetentionOptions, *, spark_conf: dict[str, str] | None = None) -> RetentionResult:
    """The segments need no Spark; the tables' maintenance starts a session (on options.master)
    when it has something to run there. A real run is recorded (run_metrics); a dry run is not:
    it changed nothing, and its timestamp would say retention ran."""
    result = RetentionResult(dry_run=options.dry_run)
    run_id, started_at = run_metrics.new_run_id(), time.time()
    if options.dry_run:
        _retain(options, result, spark_conf)
        return result
    with run_metrics.recording(log_root(options.root).metrics_root,
                               lambda exc: [run_record(options, result, exc, run_id=run_id, started=started_at)]):
        _retain(options, result, spark_conf)
    return result


def run_record(options: RetentionOptions, result: RetentionResult, exc: BaseException | None, *, run_id: str,
               started: float) -> run_metrics.RunRecord:
    """`table` is the topics the run was given (`*`: all); files and bytes: the segments it deleted."""
    scope = run_metrics.topics_scope(options.topics)
    if exc is not None or result.errors:
        error = exc if exc is not None else TopiclakeError("; ".join(result.errors))
        return run_metrics.failure("retention", scope, "", error, run_id=run_id, started=started)
    deleted = [p for p in result.partitions if p.deleted]
    now = time.time()
    return run_metrics.RunRecord(
        operation="retention", table=scope, run_id=run_id, end_time=now, duration_s=now - started,
        files=sum(len(p.deleted) for p in deleted), bytes=sum(p.deleted_bytes for p in deleted),
        offsets=[run_metrics.OffsetRange(p.topic, p.partition, min(p.deleted), p.log_start_offset)
                 for p in deleted if p.log_start_offset is not None])


def _retain(options: RetentionOptions, result: RetentionResult, spark_conf: dict[str, str] | None) -> None:
    started = time.monotonic()
    now_ms = options.now_ms if options.now_ms is not None else int(time.time() * 1000)
    source = log_root(options.root)
    if isinstance(source, BucketLog):
        _retain_bucket(source, options, result, now_ms)
        result.duration_s = time.monotonic() - started
        return
    layout = StorageLayout(options.root)
    registry = TopicRegistry(layout)
    metas = [registry.get(t) for t in options.topics] if options.topics else registry.list()
    offsets = group_offsets(layout, options.protect_groups) if options.protect_groups else {}
    root = LocalRoot(Path(options.root).resolve())
    tables = topic_tables(root)
    for meta in metas:
        for p in range(meta.partitions):
            protect = _protection(offsets, meta.name, p) if meta.name != OFFSETS_TOPIC else {}
            config, protect = with_archive(tables, meta, p, protect)
            try:
                result.partitions.append(retain_partition(layout, meta.name, p, config, now_ms=now_ms,
                                                          protect=protect, dry_run=options.dry_run))
            except TopiclakeError as exc:
                result.partitions.append(PartitionRetention(meta.name, p, error=f"{meta.name}-{p}: {exc}"))
                log.error("retention of %s-%d failed: %s", meta.name, p, exc)
    cut_histories(root, metas, result, now_ms=now_ms, dry_run=options.dry_run)
    if options.tables is not None:
        from ..spark.session import get_session

        result.tables = maintain_tables(
            layout, options.tables, now_ms=now_ms, dry_run=options.dry_run,
            # long_queries: on a local master the rewriting runs in the driver JVM, which then keeps C2
            spark=lambda: get_session("topiclake-table-maintenance", master=options.master, conf=spark_conf,
                                      long_queries=True))
    result.duration_s = time.monotonic() - started


def _retain_bucket(source: BucketLog, options: RetentionOptions, result: RetentionResult, now_ms: int) -> None:
    """_retain on an object-store root: manifest commits (runs/bucket_retention.py)."""
    from .bucket_retention import bucket_group_offsets, retain_bucket_partition

    if options.tables is not None:
        raise UsageError("table maintenance (--table-retention-days, --optimize, --vacuum-hours) on an object-store "
                         "root is not supported yet", hint="run `topiclake retain` without them on a bucket")
    topics = source.topics()
    unknown = [t for t in options.topics if t not in topics]
    if unknown:
        raise UsageError(f"unknown topics under {source.root}: {', '.join(unknown)}")
    metas = [topics[t] for t in options.topics] if options.topics else list(topics.values())
    offsets = bucket_group_offsets(source, options.protect_groups) if options.protect_groups else {}
    tables = topic_tables(source.root)
    for meta in metas:
        for p in range(meta.partitions):
            config, protect = with_archive(tables, meta, p, _protection(offsets, meta.name, p))
            out = PartitionRetention(meta.name, p, protect=protect)
            try:
                result.partitions.append(retain_bucket_partition(source, meta.name, p, config, now_ms=now_ms,
                                                                 protect=out.protect, dry_run=options.dry_run, out=out))
            except TopiclakeError as exc:
                result.partitions.append(PartitionRetention(meta.name, p, error=f"{meta.name}-{p}: {exc}"))
                log.error("retention of %s-%d failed: %s", meta.name, p, exc)
    cut_histories(source.root, metas, result, now_ms=now_ms, dry_run=options.dry_run)


def format_summary(result: RetentionResult) -> str:
    deleted = [p for p in result.partitions if p.deleted]
    verb = "would delete" if result.dry_run else "deleted"
    header = (f"{sum(len(p.deleted) for p in deleted)} segments ({sum(p.deleted_bytes for p in deleted)} bytes) "
              f"in {len(deleted)} partitions")
    lines = [f"retention (dry run: nothing changed): would delete {header} in {result.duration_s:.1f} s"
             if result.dry_run else f"retention: deleted {header} in {result.duration_s:.1f} s"]
    for p in result.partitions:
        if p.error:
            lines.append(f"  {p.name}: ERROR {p.error}")
            continue
        if p.plan is None:
            continue
        parts = []
        if p.deleted:
            reasons = sorted({d.reason.value for d in p.plan.deletions if d.base_offset in p.deleted})
            parts.append(f"{verb} {len(p.deleted)} segments ({p.deleted_bytes} bytes; {', '.join(reasons)}), "
                         f"log start offset {'would be ' if result.dry_run else ''}{p.log_start_offset}")
        if p.active_kept:
            parts.append("active segment kept (the broker rolls it; the next run deletes it)")
        if p.plan.held_back:
            needed = p.plan.held_back[-1].upper_bound
            lags = ", ".join(f"{g} at {p.protect.get(g)} (lag {needed - (p.protect.get(g) or 0)} offsets behind "
                             f"{needed})" for g in p.plan.blocking_groups)
            parts.append(f"held back {len(p.plan.held_back)} segments for {lags or 'protected groups'}")
        if parts:
            lines.append(f"  {p.name}: " + "; ".join(parts))
    for t in result.tables:
        lines.append(f"  table {t.uri}: {t.describe(dry_run=result.dry_run)}")
    for h in result.history:
        lines.append(f"  table {h.uri}: {h.describe(dry_run=result.dry_run)}")
    return "\n".join(lines)
