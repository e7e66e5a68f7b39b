"""Backfill by offset range: re-read offsets [from, to) of one topic partition from the log and
replace exactly those rows of the table in ONE commit.

- New files come from the same executor path as ingest (tasks.py), so a backfilled row is
  byte-for-byte what ingest writes (apart from ingested_at).
- Files holding only rows of the range are removed; files straddling it (rows of other
  offsets, partitions or topics) are rewritten without the range's rows, on the executors.
- The group's offsets do not move, and the range is clamped to them: offsets the group has not
  ingested yet belong to the next ingest run (backfilling them would duplicate them).
- Running the same backfill twice leaves the same rows: the second run replaces the first's.
- The table's quality suite (quality/gate.py) runs on the new files before the commit; a failure
  commits nothing.
- Upsert tables (keyed/upsert.py): the backfill replays [from, the group's committed offset) through
  the merge (offsets decide, so no key moves back to an older value; every later change, deletes
  included, is replayed too, so a deleted key cannot come back) and commits the replaced buckets
  with the writer guard; replaying twice leaves the same rows. The quality suite judges the
  merged files, as an ingest's.
- Records the backfill cannot take (a bad value, no key) are in the quarantine table since
  their ingest, so it writes none there; when more of the range fail than the quarantine table
  holds, the backfill reads them otherwise than the ingest did: it stops, committing nothing.
- Cluster mode: the range is read with the partition's leader epochs like an ingest (a fenced
  leader's bytes are never backfilled); while a takeover leaves offsets of the range undecided the
  backfill refuses to start, and a takeover during it that undid what was read commits nothing.

The commit goes through delta-spark (table/delta_spark.py), so Delta's history names it as delta-spark
names a replaceWhere: WRITE, mode Overwrite, the range as its predicate (delta-rs would call a
commit that removes files an Append). It carries the writer guard; when it loses a race it
retries only if the snapshot still has exactly the files this run planned to replace (an ingest
that appended elsewhere is fine).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import Schema as DeltaSchema

from ..errors import ConcurrentWriterError, DataLossError, LakeError, UsageError
from ..keyed import table_kind
from ..keyed.changes import DEBEZIUM
from ..keyed.staging import remove_staging
from ..keyed.table_kind import KEY_BUCKET
from ..keyed.upsert import plan_merge
from ..log.offsets import EARLIEST, LATEST, OffsetSpec
from ..log.plan import DEFAULT_TARGET_TASK_BYTES, PartitionPlan, cut_tasks
from ..log.roots import BucketLog, log_root
from ..log.scan import scan_partition
from ..log.source import list_partition
from ..metrics import run_metrics
from ..quality import bucket_docs, gate
from ..spark.progress import ProgressCallback
from ..spark.session import collect
from ..table import delta, delta_spark
from ..table.files import file_stats, plain_layout, plain_type
from ..table.location import GROUP_PREFIX, root_table_uri, table_filesystem, table_name
from ..table.values import quarantine_uri, typed_columns_of
from ..table.type_changes import widened_columns
from ..table.widening import widen_table
from ..typed import hooks as typed_hooks
from .tasks import TaskWriter, run_tasks, task_suites_of, validate_merged_files, validate_new_files


@dataclass(frozen=True, slots=True)
class BackfillOptions:
    root: Path | Any  # a directory, or an object-store root (topiclake.store's S3Root)
    table: str
    topic: str
    partition: int
    from_offset: int
    to_offset: int  # exclusive
    group: str | None = None  # whose offsets bound the range (default topiclake-ingest-<table>)
    target_task_bytes: int = DEFAULT_TARGET_TASK_BYTES
    expectations_dir: Path | None = None  # conf/expectations: <table>.json great-expectations suites
    data_docs: bool = False  # rebuild the great-expectations Data Docs site in this run


@dataclass(slots=True)
class BackfillResult:
    table_uri: str
    topic: str
    partition: int
    start: int
    end: int
    version: int | None = None
    records: int = 0
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    rewritten: list[str] = field(default_factory=list)
    quality: gate.QualityReport | None = None
    duration_s: float = 0.0
    bytes_read: int = 0  # of the log
    run_id: str = ""
    group: str = ""
    requested: tuple[int, int] | None = None  # [from, to) as asked; clamped to `ingested`
    ingested: tuple[int, int] | None = None
    upsert: bool = False  # an upsert table: [start, end) replayed through the merge up to the committed offset
    changed: str = ""  # an upsert table's merge: the rows it inserted, updated and deleted


@dataclass(frozen=True, slots=True)
class BackfillRange:
    """The range a backfill will replace, checked against what the group has ingested."""

    table_uri: str
    table: object  # the DeltaTable it was checked against
    group: str
    start: int
    end: int  # exclusive
    ingested: tuple[int, int]  # [first, committed) the group has ingested of the partition
    files: object  # source.PartitionFiles (a directory root)
    bucket_plan: PartitionPlan | None = None  # an object-store root: the range's read plan (log/bucket.py)

    def tasks(self, start: int, end: int, target_bytes: int) -> list:
        """The tasks reading [start, end) of the partition."""
        if self.bucket_plan is not None:
            assert (start, end) == (self.start, self.end), "a bucket's plan is of the checked range"
            return list(self.bucket_plan.tasks)
        return list(cut_tasks(scan_partition(self.files, start), start, end, table_uri=self.table_uri,
                              target_bytes=target_bytes))

    def confirm(self, end: int) -> None:
        """After the tasks ran: no takeover undid what they read (segments.leader_reads)."""
        read = self.bucket_plan if self.bucket_plan is not None else self.files
        if read.epochs is not None:
            read.epochs.confirm(read.directory, end)


def check_range(options: BackfillOptions) -> BackfillRange:
    """Before Spark starts: the table exists and [from, to) is a range the group has ingested.
    An inverted range, or one wholly outside the ingested offsets, is a UsageError saying which;
    a range partly outside is clamped (format_result says so)."""
    source = log_root(options.root)
    delta.serve_root(options.root)  # an object-store root's tables are opened with its server and keys
    uri = root_table_uri(options.root, options.table)
    table = delta.load_table(uri)
    if table is None:
        raise UsageError(f"backfill: no Delta table at {uri}", hint="check --table and --data")
    topic, partition, lo, hi = options.topic, options.partition, options.from_offset, options.to_offset
    what = f"{topic}-{partition} offsets [{lo}, {hi})"
    if lo >= hi:
        raise UsageError(f"backfill range [{lo}, {hi}) is {'inverted' if lo > hi else 'empty'}: "
                         "--from (inclusive) must be below --to (exclusive)")
    group = options.group or GROUP_PREFIX + table_name(uri)
    committed = delta.group_offset(table, group, topic, partition)
    if committed is None:
        raise UsageError(f"backfill of {what}: group {group!r} has ingested nothing of {topic}-{partition} "
                         f"into {table_name(uri)}; only ingested offsets can be backfilled",
                         hint="run the ingest first, or name the ingest's group with --group")
    first = delta.group_starts(table, group).get(f"{topic}:{partition}", 0)
    ingested = f"group {group!r} has ingested [{first}, {committed})"
    if lo >= committed:
        raise UsageError(f"backfill of {what} is past what was ingested: {ingested}",
                         hint="the next ingest run reads those offsets")
    if hi <= first:
        raise UsageError(f"backfill of {what} is before what was ingested: {ingested} (it began at {first})")
    start, end = max(lo, first), min(hi, committed)
    if isinstance(source, BucketLog):
        if table_kind.recorded(table).spec is not None:
            raise UsageError(f"backfill of {what}: upsert tables on an object-store root are not supported yet")
        plan = source.plan(topic, partition, table_uri=uri, committed=start, starting=OffsetSpec(EARLIEST),
                           ending=OffsetSpec(LATEST, {(topic, partition): end}),
                           target_task_bytes=options.target_task_bytes, allow_data_loss=False)
        if plan.undecided_from is not None and plan.undecided_from < end:
            raise UsageError(f"backfill of {what}: a leader takeover has not decided offsets from "
                             f"{plan.undecided_from} yet; run it again in a moment")
        if plan.end_offset < end:
            raise DataLossError(topic, partition, plan.end_offset, end)
        return BackfillRange(uri, table, group, start, end, (first, committed), None, plan)
    files = list_partition(source.layout, topic, partition)
    if start < files.log_start_offset:
        raise DataLossError(topic, partition, start, min(end, files.log_start_offset))
    if files.epochs is not None:  # the range is replaced whole: every offset of it must be decided
        files.epochs.require_decided(files.directory, end)
    return BackfillRange(uri, table, group, start, end, (first, committed), files)


def backfill(spark, options: BackfillOptions, *, progress: ProgressCallback | None = None,
             checked: BackfillRange | None = None) -> BackfillResult:
    """Replace [from, to) of one partition in the table; the run is recorded (run_metrics)."""
    run_id, started_at = run_metrics.new_run_id(), time.time()
    result = None

    def records(exc: BaseException | None) -> list[run_metrics.RunRecord]:
        return [run_record(options, result, exc, run_id=run_id, started=started_at)]

    with run_metrics.recording(log_root(options.root).metrics_root, records):
        result = _backfill(spark, options, progress, checked, run_id)
    return result


def run_record(options: BackfillOptions, result: BackfillResult | None, exc: BaseException | None, *,
               run_id: str, started: float) -> run_metrics.RunRecord:
    name = table_name(options.table)
    quality_result = run_metrics.quality_result(result.quality if result else None,
                                                run_metrics.failed_quality_table(exc), name)
    if exc is not None or result is None:
        return run_metrics.failure("backfill", name, options.group or GROUP_PREFIX + name, exc, run_id=run_id,
                                   started=started, quality=quality_result, offsets=[run_metrics.OffsetRange(
                                       options.topic, options.partition, options.from_offset, options.to_offset)])
    now = time.time()
    return run_metrics.RunRecord(
        operation="backfill", table=name, group=result.group, run_id=run_id, success=True, end_time=now,
        duration_s=now - started, rows=result.records, files=len(result.added), bytes=result.bytes_read,
        quality=quality_result,
        offsets=[run_metrics.OffsetRange(result.topic, result.partition, result.start, result.end)])


def _backfill(spark, options: BackfillOptions, progress: ProgressCallback | None, checked: BackfillRange | None,
              run_id: str) -> BackfillResult:
    started = time.monotonic()
    checked = checked or check_range(options)
    uri, table, group, start, end = checked.table_uri, checked.table, checked.group, checked.start, checked.end
    topic, partition = options.topic, options.partition
    result = BackfillResult(uri, topic, partition, start, end, run_id=run_id, group=group,
                            requested=(options.from_offset, options.to_offset), ingested=checked.ingested)

    kind = table_kind.recorded(table)
    if kind.spec is not None:
        return _backfill_upsert(spark, options, checked, kind.spec, result, run_id, progress, started)
    partition_by = table.metadata().partition_columns
    source = log_root(options.root)
    bucket, quality_root = (options.root if source.is_bucket else None), source.metrics_root
    tasks = checked.tasks(start, end, options.target_task_bytes)
    suite = _suite(options, uri)
    registry_spec = typed_hooks.backfill_spec(options.root, table, (topic,))  # registry-typed columns
    typed = typed_columns_of(table) if registry_spec is None else None
    # Typed columns as the table has them; bad values are already in the quarantine table for
    # ingested offsets, so the backfill sends none there (quarantine_from = end).
    writer = TaskWriter(run_id=run_id, ingested_at_us=int(time.time() * 1000) * 1000, partition_by={uri: partition_by},
                        value_schemas={uri: typed.to_json()} if typed else None,
                        quarantine_from={(uri, topic, partition): end}, task_suites=task_suites_of({uri: suite}),
                        typed_specs={uri: registry_spec} if registry_spec is not None else None,
                        root=bucket)
    rows = run_tasks(spark, tasks, writer, description=f"topiclake backfill {topic}-{partition}@[{start},{end})",
                     job_group=f"topiclake-backfill-{run_id}", progress=progress)
    checked.confirm(end)
    check_failures_quarantined(rows, uri, topic, partition, start, end)
    new_files = [r for r in rows.to_pylist() if r["path"] is not None]
    result.records = sum(r["num_records"] for r in new_files)
    result.bytes_read = sum(r["bytes_read"] or 0 for r in rows.to_pylist() if r["path"] is None)  # tasks' counters
    with bucket_docs.once_per_run(quality_root, lambda: [result.quality]):  # a bucket's Data Docs site
        result.quality = validate_new_files(spark, rows, uri, suite, schema=table.schema(),
                                            ranges={(topic, partition): (start, end)}, root=quality_root,
                                            operation="backfill", run_id=run_id, data_docs=options.data_docs)

    grown = typed_hooks.full_schema(registry_spec, partition_by) if registry_spec is not None else None
    if grown is not None and widened_columns(table, grown):  # the files to replace are the rewritten ones
        widen_table(spark, uri, grown, partition_by, reason=f"backfill run {run_id}")
        table = delta.open_table(uri)
    inside, straddling = _overlapping(delta.active_files(table), topic, partition, start, end, partition_by)
    planned = {f["path"] for f in inside + straddling}
    outcomes = _rewrite(spark, uri, straddling, topic, partition, start, end, run_id, bucket)
    untouched = {o["source"] for o in outcomes if o["unchanged"]}
    rewrites = [o for o in outcomes if o["path"] is not None]
    now_ms = int(time.time() * 1000)
    actions = [delta_spark.remove_json(f["path"], f["size_bytes"], f["partition_values"], now_ms)
               for f in inside + straddling if f["path"] not in untouched]
    actions += [delta_spark.add_json(r["path"], r["size"], json.loads(r["partition_values"]), r["modification_time"],
                                     r["stats"]) for r in new_files + rewrites]

    def still_planned(version: int) -> None:
        now = _overlapping(delta.active_files(delta.open_table(uri, version)), topic, partition, start, end,
                           partition_by)
        if {f["path"] for f in now[0] + now[1]} != planned:
            raise ConcurrentWriterError(f"table {uri}: another writer changed the files of {topic!r} partition "
                                        f"{partition} offsets [{start}, {end}) during the backfill; run it again")

    result.version = delta_spark.commit_replace(
        spark, uri, actions=actions, partition_by=partition_by, precheck=still_planned,
        predicate=range_predicate(topic, partition, start, end), new_schema_json=_grown_schema(table, grown),
        metadata={"topiclake": {"operation": "backfill", "run_id": run_id, "topic": topic, "partition": partition,
                                "range": [start, end]}})
    result.added = [r["path"] for r in new_files]
    result.removed = sorted(planned - untouched)
    result.rewritten = [r["path"] for r in rewrites]
    result.duration_s = time.monotonic() - started
    return result


def _backfill_upsert(spark, options: BackfillOptions, checked: BackfillRange, spec, result: BackfillResult,
                     run_id: str, progress, started: float) -> BackfillResult:
    """Replay [start, committed) of the partition through the merge (see the module docstring)."""
    uri, table, topic, partition = checked.table_uri, checked.table, options.topic, options.partition
    start, end = checked.start, checked.ingested[1]
    result.end, result.upsert = end, True
    tasks = checked.tasks(start, end, options.target_task_bytes)
    data_schema = pa.schema([f.with_type(plain_type(f.type)) for f in pa.schema(table.schema().to_arrow())
                             if f.name != KEY_BUCKET])
    suite = _suite(options, uri)
    registry_spec = typed_hooks.backfill_spec(options.root, table, (topic,))  # registry-typed columns
    typed = typed_columns_of(table) if registry_spec is None else None
    if spec.change.format == DEBEZIUM:  # its columns are after's fields, not declared typed columns
        spec, registry_spec = _cdc_spec(options.root, table, topic, spec, tasks)
        typed = None
    writer = TaskWriter(run_id=run_id, ingested_at_us=int(time.time() * 1000) * 1000,
                        partition_by={uri: [KEY_BUCKET]}, value_schemas={uri: typed.to_json()} if typed else None,
                        quarantine_from={(uri, topic, partition): end}, upserts={uri: spec},
                        task_suites=task_suites_of({uri: suite}),
                        typed_specs={uri: registry_spec} if registry_spec is not None else None)
    rows = run_tasks(spark, tasks, writer, description=f"topiclake backfill {topic}-{partition}@[{start},{end})",
                     job_group=f"topiclake-backfill-{run_id}", progress=progress)
    checked.confirm(end)
    staged = rows.filter(pc.is_valid(rows.column("path")))
    counters = rows.filter(pc.is_null(rows.column("path")))  # the records read, not the changes they collapse to
    read, control, aborted = (pc.sum(counters.column(c)).as_py() or 0
                              for c in ("records_read", "dropped_control", "dropped_aborted"))
    result.records = read - control - aborted
    try:
        check_failures_quarantined(rows, uri, topic, partition, start, end)
        plan = plan_merge(spark, uri, staged.select(["path", "partition_values"]).to_pylist(),
                          data_schema=data_schema, run_id=run_id, job_group=f"topiclake-backfill-{run_id}")
        with bucket_docs.once_per_run(options.root, lambda: [result.quality]):
            result.quality = validate_merged_files(spark, rows, uri, suite, files=plan.adds,
                                                   schema=table.schema(), ranges={(topic, partition): (start, end)},
                                                   root=options.root, operation="backfill", run_id=run_id,
                                                   data_docs=options.data_docs)
        if not plan.empty:
            result.version = delta.commit(
                uri, group=checked.group, actions=plan.removes + plan.adds, offsets=[], schema=None,
                partition_by=[KEY_BUCKET], precheck=plan.precheck, transactions=plan.transactions,
                metadata={"topiclake": {"operation": "backfill", "run_id": run_id, "topic": topic,
                                        "partition": partition, "range": [start, end], "kind": "upsert"}})
            plan.committed(uri)
            result.changed = plan.describe()
            result.added = [a.path for a in plan.adds]
            result.removed = sorted(plan.removed_paths)
    finally:
        remove_staging(uri, run_id)
    result.duration_s = time.monotonic() - started
    return result


def _suite(options: BackfillOptions, uri: str) -> gate.Suite:
    """The table's quality suite, checked before any work."""
    suite = gate.Suite.load(options.expectations_dir, table_name(uri))
    gate.check_suite(suite, table_name(uri))
    if suite.on_driver or options.data_docs:
        gate.load_in_background()
    return suite


def check_failures_quarantined(rows: pa.Table, uri: str, topic: str, partition: int, start: int, end: int) -> None:
    """Stop when the tasks failed more records of the range (bad values, no key: their `failed`
    counters) than the quarantine table holds: the ingest took them, so this backfill reads
    them otherwise, and committing would silently drop their rows."""
    counters = rows.filter(pc.and_(pc.equal(rows.column("table_uri"), uri), pc.is_null(rows.column("path"))))
    failed = pc.sum(counters.column("failed")).as_py() or 0
    if not failed:
        return
    held = 0
    quarantine = delta.load_table(quarantine_uri(uri))
    if quarantine is not None:
        import pyarrow.dataset as ds

        in_range = ((ds.field("topic") == topic) & (ds.field("partition") == partition)
                    & (ds.field("offset") >= start) & (ds.field("offset") < end))
        offsets = quarantine.to_pyarrow_dataset().to_table(columns=["offset"], filter=in_range).column("offset")
        held = len(pc.unique(offsets))
    if failed > held:
        raise LakeError(f"backfill of {topic}-{partition} offsets [{start}, {end}) into {table_name(uri)}: {failed} "
                        f"records failed to decode or had no key, but its quarantine table holds only {held} of "
                        "them (the ingest read them otherwise); nothing committed")


def _cdc_spec(root: Path, table, topic: str, spec, tasks: list):
    """A CDC table's upsert spec with its columns and key planned (cdc_plan.plan_table), and the
    registry's typed spec its Avro events are decoded with first (None: JSON events). The range
    was ingested, so the table has every column its events carry; JSON events are sampled as an
    ingest samples them, for how their values convert (a Connect int64 is a JSON number, a
    decimal a base64 text, ...): the table's types alone do not say."""
    import dataclasses

    from ..keyed.cdc_plan import plan_table, task_samples
    from ..typed.plan import plan_typed

    registry = typed_hooks.RunSchemaRegistry(root, None)
    registry_spec = plan_typed(registry.state, (topic,)) if registry.state.subjects else None
    change = plan_table((topic,), table, spec.change, typed=registry_spec, samples=task_samples(tasks))
    return dataclasses.replace(spec, change=change), registry_spec


def range_predicate(topic: str, partition: int, start: int, end: int) -> str:
    """The rows a backfill replaces, in Spark SQL (the predicate its Delta history shows)."""
    return (f"topic = '{topic.replace(chr(39), chr(39) * 2)}' AND `partition` = {partition} "
            f"AND `offset` >= {start} AND `offset` < {end}")


def _grown_schema(table, grown: pa.Schema | None) -> str | None:
    """The table's new schema JSON when the registry's columns grew it, else None."""
    if grown is None:
        return None
    want = DeltaSchema.from_arrow(grown)
    if json.loads(want.to_json())["fields"] == json.loads(table.schema().to_json())["fields"]:
        return None
    return want.to_json()


def _overlapping(files: pa.Table, topic: str, partition: int, start: int, end: int,
                 partition_by: list[str]) -> tuple[list[dict], list[dict]]:
    """(files wholly inside the range, files straddling it), from Delta file stats. A file
    without stats is assumed to straddle: it is rewritten, never dropped blindly."""
    inside, straddling = [], []
    for f in files.to_pylist():
        lo_t, hi_t, lo_p, hi_p = f.get("min.topic"), f.get("max.topic"), f.get("min.partition"), f.get("max.partition")
        lo_o, hi_o = f.get("min.offset"), f.get("max.offset")
        if None in (lo_t, hi_t, lo_p, hi_p, lo_o, hi_o):
            f["partition_values"] = _partition_values(f, partition_by)
            straddling.append(f)
            continue
        if not (lo_t <= topic <= hi_t and lo_p <= partition <= hi_p and lo_o < end and hi_o >= start):
            continue
        f["partition_values"] = _partition_values(f, partition_by)
        if lo_t == hi_t == topic and lo_p == hi_p == partition and lo_o >= start and hi_o < end:
            inside.append(f)
        else:
            straddling.append(f)
    return inside, straddling


def _partition_values(f: dict, partition_by: list[str]) -> dict[str, str | None]:
    out = {}
    for name in partition_by:
        value = f.get(f"partition.{name}")
        out[name] = None if value is None else (value.isoformat() if hasattr(value, "isoformat") else str(value))
    return out


def _rewrite(spark, uri: str, straddling: list[dict], topic: str, partition: int, start: int, end: int,
             run_id: str, root=None) -> list[dict]:
    """Rewrite straddling files without the range's rows, one Spark task per file (`root`: the
    object-store root the table is under, None on a directory root)."""
    if not straddling:
        return []
    jobs = [(uri, f["path"], json.dumps(f["partition_values"]), topic, partition, start, end, run_id, root)
            for f in straddling]
    return collect(spark.sparkContext.parallelize(jobs, len(jobs)).map(rewrite_file))


def rewrite_file(job: tuple) -> dict:
    """Executor side: copy one file without the rows of (topic, partition, [start, end)).
    `unchanged`: the file holds none of them (its stats only said it might): keep it as it is;
    `path` None: nothing is left, the file is only removed."""
    uri, path, partition_values, topic, partition, start, end, run_id, root = job
    fs, base = table_filesystem(uri, root)
    data = plain_layout(pq.read_table(f"{base}/{path}", filesystem=fs))
    in_range = pc.and_(pc.and_(pc.equal(data["topic"], topic), pc.equal(data["partition"], partition)),
                       pc.and_(pc.greater_equal(data["offset"], start), pc.less(data["offset"], end)))
    kept = data.filter(pc.invert(pc.fill_null(in_range, False)))
    if kept.num_rows == data.num_rows:
        return {"source": path, "unchanged": True, "path": None}
    if kept.num_rows == 0:
        return {"source": path, "unchanged": False, "path": None}
    directory, _, _ = path.rpartition("/")
    name = f"{directory + '/' if directory else ''}part-rewrite-{run_id}-{uuid.uuid4().hex[:12]}.snappy.parquet"
    pq.write_table(kept, f"{base}/{name}", filesystem=fs, compression="snappy")
    info = fs.get_file_info(f"{base}/{name}")
    return {"source": path, "unchanged": False, "path": name, "size": info.size, "partition_values": partition_values,
            "modification_time": int(time.time() * 1000), "stats": file_stats(kept),
            "num_records": kept.num_rows}


def format_result(result: BackfillResult) -> str:
    clamped = ""
    if result.upsert:
        clamped = (f"\n  upsert table: replayed from {result.start} to the committed offset {result.end} through the "
                   f"merge (later changes and deletes included), so no key moved back"
                   + (f"\n  {result.changed}" if result.changed else ""))
    elif result.requested and result.requested != (result.start, result.end):
        first, committed = result.ingested
        clamped = (f"\n  requested [{result.requested[0]}, {result.requested[1]}): only [{first}, {committed}) is "
                   f"ingested, the rest was left out")
    return (f"backfill {result.topic}-{result.partition} offsets [{result.start}, {result.end}) into "
            f"{result.table_uri}: version {result.version}, {result.records} records"
            f"{' read, ' if result.upsert else ' in '}{len(result.added)} new "
            f"files; removed {len(result.removed)} files, rewrote {len(result.rewritten)} "
            f"({result.duration_s:.1f} s)" + clamped + (f"\n  {result.quality.describe()}" if result.quality else ""))
