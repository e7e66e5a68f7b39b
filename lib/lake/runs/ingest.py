"""Ingest: Kafka segment files -> Delta tables, exactly once.

1. Plan on the driver: per partition, from the group's committed offset (a txn version in the
   table) to the last stable offset; tasks of about `target_task_bytes` (log/plan.py).
2. Executors decode and write Parquet files into the table directories and return one row of
   metadata per file (tasks.py, reading with log/decode.py); no record reaches the driver.
3. The driver validates each table's new files (quality/gate.py, great-expectations; a failing
   suite stops the run before any commit), then makes ONE Delta commit per table with all its
   files and the partitions' new offsets (table/delta.py). A crash before that leaves the table as it was.
4. The group's offsets are mirrored into the broker's __consumer_offsets (mirror.py), best effort.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from topiclake.security.client_config import PLAINTEXT, ClientSecurity

from ..errors import LakeError
from ..keyed import table_kind
from ..keyed.changes import DEBEZIUM
from ..keyed.staging import remove_staging
from ..keyed.table_kind import KEY_BUCKET, UpsertSpec, upsert_schema
from ..keyed.upsert import MergePlan, plan_merge
from ..log.offsets import EARLIEST, LATEST, parse_offset_spec
from ..log.plan import DEFAULT_TARGET_TASK_BYTES, PartitionPlan, confirm_reads
from ..log.roots import BucketLog, FileLog, log_root
from ..metrics import run_metrics
from ..quality import bucket_docs, gate
from ..spark.progress import ProgressCallback
from ..table import delta
from ..table.location import GROUP_PREFIX, root_table_uri, table_name
from ..table.schema import DATA_SCHEMA, DEFAULT_PARTITION_BY, PARTITION_SHORTHANDS, table_schema
from ..table.values import QUARANTINE_SCHEMA, ValueSchema, load_value_schema, quarantine_uri
from ..table.type_changes import widened_columns
from ..table.widening import widen_table
from ..typed import hooks as typed
from . import mirror
from .tasks import TaskWriter, run_tasks, task_suites_of, validate_merged_files, validate_new_files

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class IngestOptions:
    topics: tuple[str, ...]
    root: Path | Any  # a directory, or an object-store root (topiclake.store's S3Root)
    table: str | None = None  # a name under <root>/tables, or any location deltalake accepts
    group: str | None = None
    starting_offsets: str | None = None
    ending_offsets: str | None = None
    target_task_bytes: int = DEFAULT_TARGET_TASK_BYTES
    partition_by: tuple[str, ...] | None = None  # for new tables (None: by day); a table keeps its own
    allow_data_loss: bool = False
    schemas_dir: Path | None = None  # conf/schemas: <table>.json declares typed value columns
    expectations_dir: Path | None = None  # conf/expectations: <table>.json great-expectations suites
    bootstrap: str | None = None  # broker to mirror offsets to; None: registered brokers; "none": off
    mirror_timeout_s: float = mirror.DEFAULT_TIMEOUT_S
    data_docs: bool = False  # rebuild the great-expectations Data Docs site in this run
    client: ClientSecurity = PLAINTEXT  # how the mirror reaches a secured broker (--command-config, [client])
    registry: typed.RegistrySource | None = None  # typed tables: where the schemas are (None: _schemas in root)
    kind: str | None = None  # append | upsert for new tables (keyed/table_kind.py); None: settings, then cleanup.policy
    value_format: str | None = None  # raw | debezium (upsert tables)
    tables: dict[str, table_kind.TableSettings] = field(default_factory=dict)  # [tables.<name>] of the settings


@dataclass(frozen=True, slots=True)
class Pipeline:
    """One table fed by a consumer group from one or more topics."""

    table_uri: str
    group: str
    topics: tuple[str, ...]
    value_schema: ValueSchema | None = None
    typed: typed.TypedSpec | None = None  # columns from the schema registry's subjects for the topics
    upsert: UpsertSpec | None = None  # an upsert table (keyed/upsert.py); None: an append table

    @property
    def cdc(self):
        """A CDC table's plan (cdc.CdcSpec: its columns, from Debezium events), else None."""
        return self.upsert.change.cdc if self.upsert is not None else None

    @property
    def quarantines(self) -> bool:
        """Whether the table has a quarantine table for records it cannot take."""
        return self.value_schema is not None or self.typed is not None or self.upsert is not None

    @property
    def quarantines_keyless_only(self) -> bool:
        """A raw upsert table without typed columns quarantines only records without a key
        (keyed/changes.py): its quarantine table is made by the first such record, not up front."""
        return self.value_schema is None and self.typed is None and self.upsert is not None and (
            self.upsert.change.format == "raw")


@dataclass(slots=True)
class PartitionOutcome:
    plan: PartitionPlan
    files: int = 0
    records: int = 0  # rows written: an append table's rows (an upsert table's changes are in its merge)
    records_read: int = 0  # the data records this run read (control records and aborted transactions left out)
    bytes_read: int = 0
    dropped_control: int = 0
    dropped_aborted: int = 0
    quarantined: int = 0
    quarantine_committed: int | None = None  # the quarantine table's txn version when planning


@dataclass(slots=True)
class TableOutcome:
    pipeline: Pipeline
    partitions: list[PartitionOutcome]
    version: int | None = None  # the Delta version committed by this run; None: nothing to commit
    quality: gate.QualityReport | None = None  # None: no new files to validate
    mirror: mirror.MirrorResult | None = None
    merge: MergePlan | None = None  # upsert tables: what the merge replaces
    notes: list[str] = field(default_factory=list)  # what the run did not do as asked, and why


@dataclass(slots=True)
class IngestResult:
    run_id: str
    tables: list[TableOutcome] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def records(self) -> int:
        return sum(p.records for t in self.tables for p in t.partitions)

    @property
    def records_read(self) -> int:
        return sum(p.records_read for t in self.tables for p in t.partitions)

    @property
    def bytes_read(self) -> int:
        return sum(p.bytes_read for t in self.tables for p in t.partitions)


def pipelines_for(options: IngestOptions) -> list[Pipeline]:
    delta.serve_root(options.root)  # an object-store root's tables are opened with its server and keys
    if options.table is not None:  # every topic into the one table
        targets = [(root_table_uri(options.root, options.table), tuple(options.topics))]
    else:
        targets = [(root_table_uri(options.root, topic), (topic,)) for topic in options.topics]
    return [Pipeline(uri, options.group or GROUP_PREFIX + table_name(uri), topics,
                     load_value_schema(options.schemas_dir, table_name(uri))) for uri, topics in targets]


def _table_schema(pipeline: Pipeline, partition_by: Sequence[str]) -> pa.Schema:
    if pipeline.upsert is not None:
        return upsert_schema(_data_schema(pipeline))
    schema = table_schema(tuple(partition_by))
    if pipeline.value_schema is None and pipeline.typed is None:
        return schema
    return pa.schema(list(_data_schema(pipeline)) + [schema.field(name) for name in partition_by])


def _data_schema(pipeline: Pipeline) -> pa.Schema:
    """The columns stored in the data files (the typed ones included; a CDC table's are after's
    fields and the CDC metadata, keyed/cdc.py)."""
    if pipeline.cdc is not None:
        return pipeline.cdc.schema
    data = DATA_SCHEMA
    if pipeline.value_schema is None and pipeline.typed is None:
        return data
    for f in (pipeline.typed.columns if pipeline.typed is not None else pipeline.value_schema.arrow):
        data = data.append(f)
    return data


def _check_schema(pipeline: Pipeline, table, partition_by: Sequence[str]) -> None:
    """Typed columns are fixed when a table is created: a declared schema must match it."""
    if table is None or pipeline.typed is not None or _is_cdc(pipeline.upsert):
        return  # registry and CDC columns evolve (typed.plan and cdc_plan keep the old ones)
    have = [f.name for f in table.schema().fields]
    want = _table_schema(pipeline, partition_by).names
    if have != want:
        raise LakeError(f"table {pipeline.table_uri} has columns {have}, but the declared schema gives {want}; "
                        "changing the typed columns of an existing table is not supported")


def ingest(spark, options: IngestOptions, *, progress: ProgressCallback | None = None) -> IngestResult:
    """`spark`: a SparkSession, or a function that starts one; it is called only once the plan
    holds something to read (a run with nothing new never starts Spark). The run is recorded for
    Prometheus and the console (run_metrics), whether it succeeds or fails."""
    result = IngestResult(run_metrics.new_run_id())
    started_at = time.time()
    records_of = lambda exc: run_records(result, options, exc, started=started_at)  # noqa: E731
    with run_metrics.recording(log_root(options.root).metrics_root, records_of):
        _ingest(spark, options, result, progress)
    return result


def ingest_targets(table: str | None, topics: Sequence[str], group: str | None) -> list[tuple[str, str]]:
    """(table name, group) of each table an ingest of `topics` writes (for a run that failed
    before it planned)."""
    names = [table_name(table)] if table is not None else list(topics)
    return [(name, group or GROUP_PREFIX + name) for name in names]


def run_records(result: IngestResult, options: IngestOptions, exc: BaseException | None, *,
                started: float) -> list[run_metrics.RunRecord]:
    """What the run did per table; after a failure, a table that committed still counts as done."""
    if not result.tables:
        return [] if exc is None else [
            run_metrics.failure("ingest", name, group, exc, run_id=result.run_id, started=started)
            for name, group in ingest_targets(options.table, options.topics, options.group)]
    failed_quality = run_metrics.failed_quality_table(exc)
    records = []
    for t in result.tables:
        name = table_name(t.pipeline.table_uri)
        offsets = [run_metrics.OffsetRange(p.plan.topic, p.plan.partition, p.plan.start_offset, p.plan.end_offset)
                   for p in t.partitions]
        quality_result = run_metrics.quality_result(t.quality, failed_quality, name)
        if exc is not None and t.version is None:
            records.append(run_metrics.failure("ingest", name, t.pipeline.group, exc, run_id=result.run_id,
                                               started=started, offsets=offsets, quality=quality_result))
            continue
        now = time.time()
        records.append(run_metrics.RunRecord(
            operation="ingest", table=name, group=t.pipeline.group, run_id=result.run_id, success=True, end_time=now,
            duration_s=now - started, rows=_rows_written(t),
            files=sum(p.files for p in t.partitions), bytes=sum(p.bytes_read for p in t.partitions),
            quarantined=sum(p.quarantined for p in t.partitions), quality=quality_result, offsets=offsets))
    return records


@dataclass(slots=True)
class _RunPlan:
    """What the run's tasks need to know of every table (TaskWriter's maps, by table URI)."""

    starting: Any
    ending: Any
    quality_root: Any = None  # where validation results are stored: a directory (Path) or an S3Root
    suites: dict[str, gate.Suite] = field(default_factory=dict)
    partition_by: dict[str, list[str]] = field(default_factory=dict)
    value_schemas: dict[str, str] = field(default_factory=dict)
    quarantine_from: dict[tuple[str, str, int], int] = field(default_factory=dict)


def _ingest(spark, options: IngestOptions, result: IngestResult, progress: ProgressCallback | None) -> None:
    started = time.monotonic()
    run_id = result.run_id
    source = log_root(options.root)
    run = _RunPlan(starting=parse_offset_spec(options.starting_offsets, default=EARLIEST, allow_time=True),
                   ending=parse_offset_spec(options.ending_offsets, default=LATEST, allow_time=False),
                   quality_root=source.metrics_root)
    registry = typed.RunSchemaRegistry(options.root, options.registry)
    for pipeline in pipelines_for(options):
        outcome = _plan_table(pipeline, options, source, registry, run)
        if outcome is not None:
            result.tables.append(outcome)

    tasks = [task for t in result.tables for p in t.partitions for task in p.plan.tasks]
    if tasks and callable(spark):
        spark = spark()
    ingested_at_us = int(time.time() * 1000) * 1000  # whole milliseconds: exact in Delta stats
    rows = run_tasks(spark, tasks, TaskWriter(run_id=run_id, ingested_at_us=ingested_at_us,
                                              partition_by=run.partition_by, value_schemas=run.value_schemas,
                                              quarantine_from=run.quarantine_from,
                                              typed_specs=typed.specs_of(result.tables),
                                              task_suites=task_suites_of(run.suites),
                                              upserts={t.pipeline.table_uri: t.pipeline.upsert for t in result.tables
                                                       if t.pipeline.upsert is not None},
                                              root=options.root if source.is_bucket else None),
                     description=_describe(result), job_group=f"topiclake-ingest-{run_id}", progress=progress)
    confirm_reads(p.plan for t in result.tables for p in t.partitions)  # no takeover undid what was read
    try:
        _merge_validate_commit(spark, options, result, rows, run, progress)
    finally:  # an upsert table's staged changes are spent once its run commits or fails
        for outcome in result.tables:
            if outcome.pipeline.upsert is not None:
                remove_staging(outcome.pipeline.table_uri, run_id)
    bootstrap, found_in = mirror.find_bootstrap(source.layout, options.bootstrap,
                                                protocol=options.client.security_protocol)
    for outcome in result.tables:
        outcome.mirror = mirror.mirror_offsets(bootstrap, outcome.pipeline.group, _group_offsets(outcome),
                                               source=found_in, timeout_s=options.mirror_timeout_s,
                                               security=options.client)
    result.duration_s = time.monotonic() - started


def _plan_table(pipeline: Pipeline, options: IngestOptions, source: FileLog | BucketLog,
                registry: typed.RunSchemaRegistry, run: _RunPlan) -> TableOutcome | None:
    """One table's kind, columns, quality suite and partitions' read plans (into `run` what its
    tasks need); None: a CDC table with no event yet to plan its columns from."""
    uri = pipeline.table_uri
    table = delta.load_table(uri)
    under_root = ("://" not in uri and isinstance(source, FileLog)
                  and Path(uri).parent == Path(source.layout.tables_dir).resolve())
    name = table_name(uri) if under_root else uri  # as `topiclake rebuild` takes it
    upsert = table_kind.resolve(source.topic, name, pipeline.topics, table, kind=options.kind,
                                value_format=options.value_format, settings=options.tables.get(table_name(uri)))
    cdc = _is_cdc(upsert)
    # A CDC table's columns are after's fields, not typed columns that typed.plan would keep.
    pipeline = registry.typed_pipeline(pipeline, None if cdc else table)
    if table is None:
        upsert = table_kind.with_typed_key(upsert, pipeline.typed)
    pipeline = dataclasses.replace(pipeline, upsert=upsert)
    table_kind.heal(table, pipeline.upsert, pipeline.topics)
    notes: list[str] = []  # for the summary
    if pipeline.upsert is not None:
        run.partition_by[uri] = [KEY_BUCKET]
        run.partition_by[quarantine_uri(uri)] = []  # rows that are no change: few, by no key
    else:
        asked = list(options.partition_by if options.partition_by is not None else DEFAULT_PARTITION_BY)
        run.partition_by[uri] = table.metadata().partition_columns if table is not None else asked
        if options.partition_by is not None and asked != run.partition_by[uri]:
            # A note, not an error: the run is right as it is, and a scheduled pipeline that names the
            # partitioning of the tables it creates must not stop at one created otherwise.
            spec = next((k for k, v in PARTITION_SHORTHANDS.items() if list(v) == asked), ",".join(asked))
            note = (f"--partition-by {spec} is not applied: an existing table "
                    f"keeps the partitioning it was created with ({', '.join(run.partition_by[uri]) or 'none'}); "
                    f"to change it, write a new table (--table NAME)")
            notes.append(note)
    _check_schema(pipeline, table, run.partition_by[uri])
    suite = run.suites[uri] = gate.Suite.load(options.expectations_dir, table_name(uri))
    gate.check_suite(suite, table_name(uri))
    if suite.on_driver or options.data_docs:
        gate.load_in_background()  # needed once the tasks are done
    tps = [(t, p) for t in pipeline.topics for p in source.partitions(t)]
    committed = delta.committed_offsets(table, pipeline.group, tps)
    plans = [source.plan(t, p, table_uri=uri, committed=committed[(t, p)], starting=run.starting, ending=run.ending,
                         target_task_bytes=options.target_task_bytes, allow_data_loss=options.allow_data_loss)
             for t, p in tps]
    if cdc:
        if table is None and not any(plan.tasks for plan in plans):
            log.warning("table %s: no Debezium change events yet to plan its columns and key from; "
                        "the first run that reads one creates it", uri)
            return None
        pipeline = _with_cdc_plan(pipeline, table, plans)
    outcome = TableOutcome(pipeline, [PartitionOutcome(plan) for plan in plans], notes=notes)
    if pipeline.quarantines:
        if pipeline.value_schema is not None and not cdc:  # a CDC table's declared types go to plan_cdc
            run.value_schemas[uri] = pipeline.value_schema.to_json()
        quarantined = delta.committed_offsets(delta.load_table(quarantine_uri(uri)), pipeline.group, tps)
        for part in outcome.partitions:
            part.quarantine_committed = quarantined[(part.plan.topic, part.plan.partition)]
            run.quarantine_from[(uri, part.plan.topic, part.plan.partition)] = max(
                part.plan.start_offset, part.quarantine_committed or 0)
    return outcome


def _merge_validate_commit(spark, options: IngestOptions, result: IngestResult, rows: pa.Table, run: _RunPlan,
                           progress: ProgressCallback | None) -> None:
    """After the tasks: upsert tables merged, then every table's quality suite, then the commits
    (a suite that fails commits nothing at all)."""
    run_id = result.run_id
    for outcome in result.tables:
        if outcome.pipeline.upsert is not None:
            if any(p.plan.tasks for p in outcome.partitions):  # the merge reads the widened files
                widen_registry_columns(spark, outcome.pipeline, [KEY_BUCKET], run_id=run_id)
            outcome.merge = merge_changes(spark, outcome, rows, run_id=run_id, progress=progress)
    with bucket_docs.once_per_run(run.quality_root, lambda: [t.quality for t in result.tables]):  # a bucket's site
        for outcome in result.tables:
            outcome.quality = _validate(spark, options, outcome, rows, run, run_id=run_id)
    for outcome in result.tables:
        uri = outcome.pipeline.table_uri
        _commit_table(spark, outcome, rows, run_id=run_id, partition_by=run.partition_by[uri],
                      quarantine_by=run.partition_by.get(quarantine_uri(uri)))


def _validate(spark, options: IngestOptions, outcome: TableOutcome, rows: pa.Table, run: _RunPlan, *,
              run_id: str) -> gate.QualityReport | None:
    """One table's quality gate: over its merged files (upsert) or its new files (append)."""
    uri = outcome.pipeline.table_uri
    if outcome.merge is not None:
        return validate_merged(spark, outcome, rows, run.suites[uri], root=run.quality_root,
                               run_id=run_id, data_docs=options.data_docs)
    return validate_new_files(
        spark, rows, uri, run.suites[uri], schema=_table_schema(outcome.pipeline, run.partition_by[uri]),
        ranges={(p.plan.topic, p.plan.partition): (p.plan.start_offset, p.plan.end_offset)
                for p in outcome.partitions},
        root=run.quality_root, operation="ingest", run_id=run_id, data_docs=options.data_docs)


def _is_cdc(upsert: UpsertSpec | None) -> bool:
    """A table of Debezium change events (its columns planned or not yet)."""
    return upsert is not None and upsert.change.format == DEBEZIUM


def _with_cdc_plan(pipeline: Pipeline, table, plans: Sequence[PartitionPlan]) -> Pipeline:
    """A CDC table's pipeline with its columns and primary key planned on the driver (cdc_plan):
    from the registry for Avro (its typed spec), else from a sample of this run's events, read
    lazily; the declared conf/schemas types (schema-less JSON) go there, not to decode_values,
    which would read the envelope as the row."""
    from ..keyed.cdc_plan import plan_table, samples_of

    change = plan_table(pipeline.topics, table, pipeline.upsert.change, typed=pipeline.typed,
                        value_schema=pipeline.value_schema, samples=samples_of(plans))
    return dataclasses.replace(pipeline, upsert=dataclasses.replace(pipeline.upsert, change=change))


def _group_offsets(outcome: TableOutcome) -> dict[tuple[str, int], int]:
    """The group's offsets once this run is done: the new ones where it committed, else the
    planned ones (all partitions, so that an earlier missed mirror heals)."""
    committed = outcome.version is not None
    out = {}
    for p in outcome.partitions:
        offset = p.plan.end_offset if committed and p.plan.moves else p.plan.committed
        if offset is not None:
            out[(p.plan.topic, p.plan.partition)] = offset
    return out


def _describe(result: IngestResult) -> str:
    """The Spark UI's job description: which topic partitions and offsets this job reads."""
    parts = []
    for t in result.tables:
        ranges = " ".join(f"{p.plan.topic}-{p.plan.partition}@[{p.plan.start_offset},{p.plan.end_offset})"
                          for p in t.partitions if p.plan.tasks)
        parts.append(f"{table_name(t.pipeline.table_uri)} <- {ranges}")
    return "topiclake ingest: " + "; ".join(parts)


def merge_changes(spark, outcome: TableOutcome, rows: pa.Table, *, run_id: str,
                  progress: ProgressCallback | None = None) -> MergePlan:
    """Stage 2 of an upsert table (keyed/upsert.py): the staged changes merged into the touched buckets."""
    uri = outcome.pipeline.table_uri
    mine = rows.filter(pc.equal(rows.column("table_uri"), uri))
    staged = mine.filter(pc.is_valid(mine.column("path"))).select(["path", "partition_values"]).to_pylist()
    return plan_merge(spark, uri, staged, data_schema=_data_schema(outcome.pipeline), run_id=run_id,
                      job_group=f"topiclake-ingest-{run_id}", progress=progress)


def validate_merged(spark, outcome: TableOutcome, rows: pa.Table, suite: gate.Suite, *, root,
                    run_id: str, data_docs: bool) -> gate.QualityReport | None:
    """The quality gate of an upsert table: the per-task expectations judged each task's changes
    (before they were collapsed per key, so their row count is the tasks' own); the driver-side
    ones judge the merged files."""
    return validate_merged_files(spark, rows, outcome.pipeline.table_uri, suite, files=outcome.merge.adds,
                                 schema=_table_schema(outcome.pipeline, [KEY_BUCKET]),
                                 ranges={(p.plan.topic, p.plan.partition): (p.plan.start_offset, p.plan.end_offset)
                                         for p in outcome.partitions},
                                 root=root, operation="ingest", run_id=run_id, data_docs=data_docs)


def _commit_table(spark, outcome: TableOutcome, rows: pa.Table, *, run_id: str, partition_by: list[str],
                  quarantine_by: list[str] | None = None) -> None:
    pipeline = outcome.pipeline
    by_partition = {(p.plan.topic, p.plan.partition): p for p in outcome.partitions}
    actions = _file_actions(rows, pipeline.table_uri, by_partition, count=outcome.merge is None)
    transactions = []
    if outcome.merge is not None:  # the staged files are counted above; the merge's files are committed
        actions, transactions = outcome.merge.removes + outcome.merge.adds, outcome.merge.transactions
    updates = [delta.OffsetUpdate(p.plan.topic, p.plan.partition, p.plan.committed, p.plan.end_offset)
               for p in outcome.partitions if p.plan.moves]
    if not updates and not actions and not transactions:
        log.info("table %s: nothing new for group %s", pipeline.table_uri, pipeline.group)
        return
    metadata = {"topiclake": {
        "operation": "ingest", "run_id": run_id, "group": pipeline.group,
        "offsets": {f"{u.topic}:{u.partition}": [u.expected, u.new] for u in updates},
        # the offsets this run read per partition: where a group began, for coverage reports
        "ranges": {f"{p.plan.topic}:{p.plan.partition}": [p.plan.start_offset, p.plan.end_offset]
                   for p in outcome.partitions if p.plan.moves},
        "lost": {f"{p.plan.topic}:{p.plan.partition}": list(p.plan.lost)
                 for p in outcome.partitions if p.plan.lost is not None},
    }}
    schema = _table_schema(pipeline, partition_by)
    # Registry and CDC columns grow with the files: new ones are committed with them (old rows null).
    evolve = bool(actions) and (pipeline.cdc is not None or pipeline.typed is not None)
    if evolve and pipeline.upsert is None:  # an upsert table's were widened before its merge
        widen_registry_columns(spark, pipeline, partition_by, run_id=run_id)
    if pipeline.quarantines:
        # First, so that a crash between the two commits leaves the quarantine ahead, never
        # behind: the rerun skips the offsets it already holds (quarantine_from).
        _commit_quarantine(outcome, rows, metadata, partition_by if quarantine_by is None else quarantine_by)
    if pipeline.upsert is not None:
        metadata["topiclake"]["kind"] = table_kind.UPSERT
    outcome.version = delta.commit(pipeline.table_uri, group=pipeline.group, actions=actions, offsets=updates,
                                   schema=schema, partition_by=partition_by, metadata=metadata, evolve=evolve,
                                   precheck=outcome.merge.precheck if outcome.merge is not None else None,
                                   configuration=table_kind.configuration(pipeline.upsert, pipeline.topics),
                                   transactions=transactions)
    if outcome.merge is not None:
        outcome.merge.committed(pipeline.table_uri)
    log.info("table %s: committed version %d (%d files, group %s)", pipeline.table_uri, outcome.version,
             len(actions), pipeline.group)


def widen_registry_columns(spark, pipeline: Pipeline, partition_by: list[str], *, run_id: str) -> None:
    """Registry columns a newer schema version widens (int -> long, ...): the table rewritten with
    the wider types first (table/widening.py). A CDC table keeps its columns' types (cdc_plan)."""
    if pipeline.typed is None or pipeline.cdc is not None:
        return
    table = delta.load_table(pipeline.table_uri)
    schema = _table_schema(pipeline, partition_by)
    if table is not None and widened_columns(table, schema):
        widen_table(spark, pipeline.table_uri, schema, partition_by, reason=f"ingest run {run_id}")


def _file_actions(rows: pa.Table, uri: str, by_partition: dict, *, count: bool) -> list:
    actions = []
    for row in rows.filter(pc.equal(rows.column("table_uri"), uri)).to_pylist():
        part = by_partition[(row["topic"], row["partition"])]
        if row["path"] is None:  # a task's counters
            part.bytes_read += row["bytes_read"]
            part.records_read += row["records_read"] - row["dropped_control"] - row["dropped_aborted"]
            part.dropped_control += row["dropped_control"]
            part.dropped_aborted += row["dropped_aborted"]
            part.quarantined += row["quarantined"] or 0
            continue
        if count:
            part.files += 1
            part.records += row["num_records"]
        actions.append(delta.add_action(row))
    return actions


def _commit_quarantine(outcome: TableOutcome, rows: pa.Table, metadata: dict, partition_by: list[str]) -> None:
    pipeline = outcome.pipeline
    uri = quarantine_uri(pipeline.table_uri)
    by_partition = {(p.plan.topic, p.plan.partition): p for p in outcome.partitions}
    actions = _file_actions(rows, uri, by_partition, count=False)
    updates = [delta.OffsetUpdate(p.plan.topic, p.plan.partition, p.quarantine_committed, p.plan.end_offset)
               for p in outcome.partitions
               if p.quarantine_committed is None or p.plan.end_offset > p.quarantine_committed]
    if pipeline.quarantines_keyless_only and not actions and all(
            p.quarantine_committed is None for p in outcome.partitions):
        return
    if actions or updates:
        schema = pa.schema(list(QUARANTINE_SCHEMA) + [table_schema(tuple(partition_by)).field(n)
                                                      for n in partition_by])
        delta.commit(uri, group=pipeline.group, actions=actions, offsets=updates, schema=schema,
                     partition_by=partition_by, metadata=metadata)


def _rows_written(outcome: TableOutcome) -> int:
    """An append table's new rows; an upsert table's rows its merge inserted, updated or deleted."""
    merge = outcome.merge
    if merge is None:
        return sum(p.records for p in outcome.partitions)
    return merge.inserted + merge.updated + merge.deleted if outcome.version is not None else 0


def format_summary(result: IngestResult) -> str:
    lines = [f"ingest run {result.run_id}: {result.records_read} records read ({result.bytes_read} bytes) "
             f"in {result.duration_s:.1f} s"]
    for t in result.tables:
        state = f"version {t.version}" if t.version is not None else "no commit (nothing new)"
        lines.append(f"  table {t.pipeline.table_uri} (group {t.pipeline.group}): {state}")
        lines += [f"    note: {note}" for note in t.notes]
        if t.quality is not None:
            lines.append(f"    {t.quality.describe(quarantined=sum(p.quarantined for p in t.partitions))}")
        if t.merge is not None and t.version is not None:
            lines.append(f"    {t.merge.describe()}")
        if t.mirror is not None and t.mirror.bootstrap is not None:
            lines.append(f"    {t.mirror.describe()}")
        for p in t.partitions:
            plan = p.plan
            written = f"{p.records} records in {p.files} files" if t.merge is None else f"{p.records_read} records read"
            line = f"    {plan.topic}-{plan.partition}: offsets [{plan.start_offset}, {plan.end_offset}) {written}"
            if p.dropped_control or p.dropped_aborted:
                line += f", dropped {p.dropped_control} control / {p.dropped_aborted} aborted"
            if p.quarantined:
                line += f", {p.quarantined} records quarantined"
            if plan.last_stable_offset < plan.log_end_offset:
                line += f", open transaction from {plan.last_stable_offset} (log end {plan.log_end_offset})"
            if plan.lost is not None:
                line += f", LOST [{plan.lost[0]}, {plan.lost[1]}) to retention"
            for r in plan.repaired:
                line += (f", LOST [{r.offset}, {r.lost_end}) of the damaged log to `topiclake repair-log` (it cut "
                         f"{r.file} at position {r.position}; offsets from {r.offset} on are records appended since)")
            if plan.fenced_batches:
                line += f", skipped {plan.fenced_batches} batches a fenced leader wrote"
            if plan.undecided_from is not None:
                line += f", a leader takeover is in progress: read only below offset {plan.undecided_from}"
            lines.append(line)
    return "\n".join(lines)


def run(options: IngestOptions, *, master: str | None = None, progress: ProgressCallback | None = None,
        spark_conf: dict[str, str] | None = None) -> IngestResult:
    """Entry point of jobs/ingest.py and `topiclake ingest`: the session, then the run."""
    from ..spark.session import get_session

    bucket = options.root if log_root(options.root).is_bucket else None  # its s3a settings, for driver-side checks
    return ingest(lambda: get_session("topiclake-ingest", master=master, conf=spark_conf, root=bucket), options,
                  progress=progress)
