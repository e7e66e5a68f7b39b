"""The tasks of ingest and backfill: planned byte ranges in, Parquet files in the table
directories out, one row of metadata per file back to the driver, as one Spark job (`run_tasks`);
then the quality gate over what they wrote (`validate_new_files`, `validate_merged_files`).

Per task (executors): the byte range decoded with read_committed (log/decode.py), the table
columns added, typed columns decoded (conf/schemas or the registry) with bad values sent to the
quarantine table, the per-task expectations judged (quality/gate.py), then split by partition value
and one Parquet file written per value; an upsert table's task stages its changes per key bucket
instead (keyed/staging.py). The file name is unique per task attempt (a retried or speculative
attempt never overwrites a file another attempt may still be writing); files of failed attempts
are never committed, and `vacuum(full=True)` removes them.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from typing import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ..keyed.extract import extract
from ..keyed.staging import stage_changes
from ..keyed.table_kind import KEY_BUCKET
from ..log.decode import read_task
from ..log.plan import Task
from ..quality import gate
from ..spark.progress import ProgressCallback, spark_job_group
from ..spark.session import collect
from ..table.files import file_stats, write_parquet
from ..table.location import table_filesystem, table_name
from ..table.schema import DATA_SCHEMA, RECORD_DATE, RECORD_HOUR, TIMESTAMP_TYPE
from ..table.values import ERROR_COLUMN, ValueSchema, decode_values, quarantine_uri

#: What comes back: one row per written file, plus one per task with `path` null (its counters).
RESULT_SCHEMA = pa.schema([
    ("table_uri", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
    ("path", pa.string()), ("size", pa.int64()), ("partition_values", pa.string()),
    ("modification_time", pa.int64()), ("num_records", pa.int64()),
    ("min_offset", pa.int64()), ("max_offset", pa.int64()), ("stats", pa.string()),
    ("bytes_read", pa.int64()), ("records_read", pa.int64()),
    ("dropped_control", pa.int64()), ("dropped_aborted", pa.int64()), ("quarantined", pa.int64()),
    ("failed", pa.int64()),  # records that became no row (bad value, no key), quarantined now or by an earlier run
    ("quality", pa.string()),  # the task's great-expectations outcome (gate.validate_rows)
])


class TaskWriter:
    """What one task does: decode, read_committed, table columns, quality, Parquet files (picklable:
    Spark ships it to the executors inside PlannedTasks)."""

    def __init__(self, *, run_id: str, ingested_at_us: int, partition_by: dict[str, list[str]],
                 value_schemas: dict[str, str] | None = None,
                 quarantine_from: dict[tuple[str, str, int], int] | None = None,
                 task_suites: dict[str, str] | None = None, compression: str = "snappy",
                 typed_specs: dict | None = None, upserts: dict | None = None, root=None):
        self.run_id = run_id
        self.ingested_at_us = ingested_at_us
        self.partition_by = partition_by  # table uri -> partition columns
        # table uri -> declared value schema (JSON); such tables send bad values to quarantine
        self.value_schemas = value_schemas or {}
        # (table uri, topic, partition) -> first offset the quarantine table does not hold yet
        self.quarantine_from = quarantine_from or {}
        # table uri -> the expectations each task runs on its rows (gate.Suite.task_document)
        self.task_suites = task_suites or {}
        self.compression = compression
        self.typed_specs = typed_specs or {}  # table uri -> typed.TypedSpec (schema registry columns)
        self.upserts = upserts or {}  # table uri -> table_kind.UpsertSpec: the task stages changes (keyed/staging.py)
        self.root = root  # an object-store root (S3Root): its tables' files are written with its server and keys

    def for_tasks(self, tasks: list[dict]) -> "PlannedTasks":
        return PlannedTasks(self, tasks)

    def run_task(self, task: dict) -> list[dict]:
        uri = task["table_uri"]
        records, counters = read_task(task)
        table = self._table_columns(task, records)
        outputs = [(uri, table)]
        if uri in self.value_schemas or uri in self.typed_specs:
            good, bad = self._typed(task, table)
            counters["failed"] = bad.num_rows
            bad = self._not_quarantined_yet(task, bad)
            outputs = [(uri, good), (quarantine_uri(uri), bad)]
            counters["quarantined"] = bad.num_rows
        if uri in self.task_suites:  # the rows of this table's files, before they are written
            counters["quality"] = gate.validate_rows(outputs[0][1], self.task_suites[uri], table=uri,
                                                min_offset=task["min_offset"], max_offset=task["max_offset"])
        rows = []
        if uri in self.upserts:
            rows, outputs = self._stage_changes(task, outputs, counters)
        for target, data in outputs:
            for part_values, part in _split(data, self.partition_by.get(target, self.partition_by[uri])):
                rows.append(self._write(task, target, part_values, part))
        rows.append({"table_uri": uri, "topic": task["topic"], "partition": task["partition"], **counters})
        return rows

    def _stage_changes(self, task: dict, outputs: list, counters: dict) -> tuple[list[dict], list]:
        """An upsert table's task: its records as changes, staged per key bucket (keyed/staging.py). One
        result row per staging file; what is left to write the usual way (the quarantine)."""
        uri = task["table_uri"]
        spec = self.upserts[uri]
        changes = extract(spec.change, outputs[0][1])
        quarantined = [data for target, data in outputs[1:]]
        if changes.quarantine.num_rows:
            counters["failed"] = counters.get("failed", 0) + changes.quarantine.num_rows
            fresh = self._not_quarantined_yet(task, changes.quarantine)
            quarantined.append(fresh)
            counters["quarantined"] = counters.get("quarantined", 0) + fresh.num_rows
        staged = stage_changes(changes, buckets=spec.buckets, table_uri=uri, run_id=self.run_id,
                               task_name=f"{task['topic']}-{task['partition']}-{task['min_offset']:020d}",
                               compression=self.compression, root=self.root)
        rows = [{"table_uri": uri, "topic": task["topic"], "partition": task["partition"], "path": path,
                 "size": 0, "partition_values": json.dumps({KEY_BUCKET: str(bucket)}), "modification_time": 0,
                 "num_records": count, "min_offset": task["min_offset"], "max_offset": task["max_offset"],
                 "stats": None} for bucket, path, count in staged]
        if not quarantined:
            return rows, []
        table = pa.concat_tables(quarantined, promote_options="permissive") if len(quarantined) > 1 else quarantined[0]
        return rows, [(quarantine_uri(uri), table)]

    def _typed(self, task: dict, table: pa.Table) -> tuple[pa.Table, pa.Table]:
        """(rows with their typed columns, rows for the quarantine table with the error)."""
        if task["table_uri"] in self.typed_specs:  # columns from the schema registry
            from ..typed.rows import decode_rows

            good, bad = decode_rows(self.typed_specs[task["table_uri"]], table, task["topic"])
        else:  # columns declared in conf/schemas
            schema = ValueSchema.from_json(self.value_schemas[task["table_uri"]]).arrow
            typed, errors = decode_values(table.column("value"), schema)
            ok = pc.is_null(errors)
            good = table.filter(ok)
            for field_ in schema:
                good = good.append_column(field_, typed.column(field_.name).filter(ok))
            bad = table.append_column(ERROR_COLUMN, errors).filter(pc.invert(ok))
        return good, bad

    def _not_quarantined_yet(self, task: dict, bad: pa.Table) -> pa.Table:
        """The quarantine rows below `quarantine_from` are there already (a crashed run's, or the
        ingest's when this is a backfill)."""
        first = self.quarantine_from.get((task["table_uri"], task["topic"], task["partition"]), 0)
        return bad.filter(pc.greater_equal(bad.column("offset"), first))

    def _table_columns(self, task: dict, records: pa.Table) -> pa.Table:
        n = records.num_rows
        ts = records.column("timestamp").cast(TIMESTAMP_TYPE)
        columns = {
            "topic": pa.repeat(pa.scalar(task["topic"], pa.string()), n),
            "partition": pa.repeat(pa.scalar(task["partition"], pa.int32()), n),
            "offset": records.column("offset"),
            "timestamp": ts,
            "timestamp_type": records.column("timestamp_type").cast(pa.int8()),
            "key": records.column("key"),
            "value": records.column("value"),
            "headers": records.column("headers").cast(DATA_SCHEMA.field("headers").type),
            "ingested_at": pa.repeat(pa.scalar(self.ingested_at_us, TIMESTAMP_TYPE), n),
        }
        return pa.table(columns, schema=DATA_SCHEMA)

    def _write(self, task: dict, target: str, part_values: dict[str, str], part: pa.Table) -> dict:
        fs, base = table_filesystem(target, self.root)
        prefix = "".join(f"{k}={v}/" for k, v in part_values.items())
        name = (f"{prefix}part-{task['topic']}-{task['partition']}-{task['min_offset']:020d}-"
                f"{self.run_id}-{uuid.uuid4().hex[:12]}.{self.compression}.parquet")
        fs.create_dir(f"{base}/{prefix}".rstrip("/"), recursive=True)
        write_parquet(part, f"{base}/{name}", filesystem=fs, compression=self.compression)
        info = fs.get_file_info(f"{base}/{name}")
        offsets = part.column("offset")
        return {
            "table_uri": target, "topic": task["topic"], "partition": task["partition"],
            "path": name, "size": info.size, "partition_values": json.dumps(part_values),
            "modification_time": int(info.mtime_ns // 1_000_000) if info.mtime_ns else int(time.time() * 1000),
            "num_records": part.num_rows,
            "min_offset": pc.min(offsets).as_py(), "max_offset": pc.max(offsets).as_py(),
            "stats": file_stats(part),
        }


class PlannedTasks:
    """The function of an RDD job over the task numbers `0..len(tasks)-1`, one number per Spark
    partition: the planned tasks travel with the function. A task is a dict: table_uri, topic,
    partition, path, inode, start, end (byte range), min_offset, max_offset, aborted (a list of
    {producer_id, first_offset, last_offset}) and, in cluster mode, epochs ([epoch, start offset]
    entries)."""

    def __init__(self, writer: TaskWriter, tasks: list[dict]):
        self.writer = writer
        self.tasks = tasks

    def __call__(self, numbers: Iterator[int]) -> Iterator[dict]:
        for index in numbers:
            yield from self.writer.run_task(self.tasks[index])


def run_tasks(spark, tasks: Sequence[Task], writer: TaskWriter, *, description: str, job_group: str,
              progress: ProgressCallback | None = None) -> pa.Table:
    """Run the tasks as one Spark job, one Spark partition per task; the file metadata rows.

    A plain RDD job: its source is the task numbers, each task's work a Python function, its
    result a few small rows. No Spark SQL (whose first use costs a second or two of set-up and code
    generation in every new application) and no data passes through the JVM."""
    if not tasks:
        return RESULT_SCHEMA.empty_table()
    ordered = sorted(tasks, key=lambda t: -t.bytes)  # big tasks first: the stragglers start early
    planned = [t.as_dict() for t in ordered]
    sc = spark.sparkContext
    with spark_job_group(sc, job_group, description, progress):
        numbers = sc.parallelize(range(len(planned)), len(planned))  # partition i holds the one number i
        rows = collect(numbers.mapPartitions(writer.for_tasks(planned)))
    return pa.Table.from_pylist(rows, schema=RESULT_SCHEMA)


def task_suites_of(suites: dict[str, gate.Suite]) -> dict[str, str]:
    """What the executors validate per task, by table."""
    documents = {uri: suite.task_document() for uri, suite in suites.items()}
    return {uri: doc for uri, doc in documents.items() if doc is not None}


def validate_new_files(spark, rows: pa.Table, uri: str, suite: gate.Suite, *, schema, ranges, root,
                       operation: str, run_id: str, data_docs: bool = False) -> gate.QualityReport | None:
    """The quality gate over the files the tasks wrote into table `uri` (run_tasks rows)."""
    mine = rows.filter(pc.equal(rows.column("table_uri"), uri))
    files = mine.filter(pc.is_valid(mine.column("path")))
    outcomes = mine.column("quality").drop_null().to_pylist()
    return gate.validate(spark, suite=suite, table_uri=uri, table=table_name(uri),
                         files=files.column("path").to_pylist(),
                         file_records=pc.sum(files.column("num_records")).as_py() or 0, task_outcomes=outcomes,
                         schema=schema, ranges=ranges, root=root, operation=operation, run_id=run_id,
                         data_docs=data_docs)


def validate_merged_files(spark, rows: pa.Table, uri: str, suite: gate.Suite, *, files, schema, ranges,
                          root, operation: str, run_id: str, data_docs: bool) -> gate.QualityReport | None:
    """validate_new_files for an upsert merge's new files (`files`: its add actions), by ingest or backfill."""
    mine = rows.filter(pc.equal(rows.column("table_uri"), uri))
    outcomes = mine.column("quality").drop_null().to_pylist()
    validated = sum(json.loads(o)["rows"] for o in outcomes)
    return gate.validate(spark, suite=suite, table_uri=uri, table=table_name(uri),
                         files=[a.path for a in files], file_records=validated,
                         task_outcomes=outcomes, schema=schema, ranges=ranges,
                         root=root, operation=operation, run_id=run_id, data_docs=data_docs)


def _split(table: pa.Table, partition_by: list[str]) -> Iterator[tuple[dict[str, str], pa.Table]]:
    """(partition values, the rows with them) for each distinct value, partition columns dropped."""
    if table.num_rows == 0:
        return
    if not partition_by:
        yield {}, table
        return
    if partition_by not in ([RECORD_DATE], [RECORD_DATE, RECORD_HOUR]):
        raise ValueError(f"unsupported partition columns {partition_by}")
    # One integer per row orders the partitions: the day, or the day's hour (hours since the epoch).
    unit = "h" if RECORD_HOUR in partition_by else "D"
    micros = pc.cast(pc.cast(table.column("timestamp"), pa.int64()), pa.float64())  # exact below 2**53 us
    slots = pc.cast(pc.floor(pc.divide(micros, _MICROS_PER[unit])), pa.int64())  # floor: 1969 too
    values = pc.unique(slots).to_pylist()
    if len(values) == 1:  # the common case: no copy
        yield _partition_values(values[0], unit), table
        return
    for value in sorted(values):
        yield _partition_values(value, unit), table.filter(pc.equal(slots, pa.scalar(value, pa.int64())))


def _partition_values(slot: int, unit: str) -> dict[str, str]:
    if unit == "D":
        return {RECORD_DATE: (_EPOCH_DAY + dt.timedelta(days=slot)).isoformat()}
    day, hour = divmod(slot, 24)
    return {RECORD_DATE: (_EPOCH_DAY + dt.timedelta(days=day)).isoformat(), RECORD_HOUR: str(hour)}


_EPOCH_DAY = dt.date(1970, 1, 1)
_MICROS_PER = {"D": 86_400_000_000.0, "h": 3_600_000_000.0}
