"""Executor side of ingest: the task function that turns planned byte ranges into Parquet files in
the table directory and returns one row of metadata per file.

Per task: map the planned byte range of the segment file, decode it columnar
(`topiclake.segments.arrow.decode_to_arrow`: batches in, Arrow columns out, no per-record Python
objects), drop control records and the records of aborted transactions (read_committed), add the
table columns, split by partition value and write one Parquet file per value. The file name is
unique per task attempt (a retried or speculative attempt never overwrites a file another
attempt may still be writing); files of failed attempts are never committed, and
`vacuum(full=True)` removes them.

Cluster mode: a task carries its partition's leader-epoch entries (`epochs`), and the decode drops
every batch a fenced leader wrote in its byte range (segments.arrow: per batch, before the kernel).
"""

from __future__ import annotations

import datetime as dt
import json
import mmap
import time
import uuid
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from topiclake.segments.arrow import decode_to_arrow
from topiclake.segments.leader_reads import ReadEpochs

from ..quality.gate import validate_rows
from ..table.schema import DATA_SCHEMA, RECORD_DATE, RECORD_HOUR, TIMESTAMP_TYPE
from ..table.values import ERROR_COLUMN, ValueSchema, decode_values, quarantine_uri
from .source import open_segment

#: What comes back: one row per written file, plus one per task with `path` null (its counters).
RESULT_SCHEMA = pa.schema([
    ("table_uri", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
    ("path", pa.string()), ("size", pa.int64()), ("partition_values", pa.string()),
    ("modification_time", pa.int64()), ("num_records", pa.int64()),
    ("min_offset", pa.int64()), ("max_offset", pa.int64()), ("stats", pa.string()),
    ("bytes_read", pa.int64()), ("records_read", pa.int64()),
    ("dropped_control", pa.int64()), ("dropped_aborted", pa.int64()), ("quarantined", pa.int64()),
    ("failed", pa.int64()),  # records that became no row (bad value, no key), quarantined now or by an earlier run
    ("quality", pa.string()),  # the task's great-expectations outcome (quality.validate_rows)
])

# Columns that rarely repeat: a dictionary would be built per file only to be abandoned.
_NO_DICTIONARY = frozenset({"offset", "timestamp", "value"})
_STATS_COLUMNS = ("topic", "partition", "offset", "timestamp", "timestamp_type", "ingested_at")
_NULL_COUNT_COLUMNS = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "ingested_at")


class TaskWriter:
    """What one task does: decode, read_committed, table columns, quality, Parquet files (picklable:
    Spark ships it to the executors inside PlannedTasks)."""

    def __init__(self, *, run_id: str, ingested_at_us: int, partition_by: dict[str, list[str]],
                 value_schemas: dict[str, str] | None = None,
                 quarantine_from: dict[tuple[str, str, int], int] | None = None,
                 task_suites: dict[str, str] | None = None, compression: str = "snappy",
                 typed_specs: dict | None = None, upserts: dict | None = None):
        self.run_id = run_id
        self.ingested_at_us = ingested_at_us
        self.partition_by = partition_by  # table uri -> partition columns
        # table uri -> declared value schema (JSON); such tables send bad values to quarantine
        self.value_schemas = value_schemas or {}
        # (table uri, topic, partition) -> first offset the quarantine table does not hold yet
        self.quarantine_from = quarantine_from or {}
        # table uri -> the expectations each task runs on its rows (quality.Suite.task_document)
        self.task_suites = task_suites or {}
        self.compression = compression
        self.typed_specs = typed_specs or {}  # table uri -> typed.TypedSpec (schema registry columns)
        self.upserts = upserts or {}  # table uri -> upsert.UpsertSpec: the task stages changes (upsert.py)

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
            counters["quality"] = validate_rows(outputs[0][1], self.task_suites[uri], table=uri,
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
        """An upsert table's task: its records as changes, staged per key bucket (upsert.py). One
        result row per staging file; what is left to write the usual way (the quarantine)."""
        from ..keyed.changes import extract
        from ..keyed.upsert import KEY_BUCKET, stage_changes

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
                               compression=self.compression)
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
        fs, base = pafs.FileSystem.from_uri(target)
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


def write_parquet(table: pa.Table, where, *, filesystem=None, compression: str = "snappy") -> None:
    """How every data file of a table is written (bench/ingest.py's Parquet-write limit too)."""
    pq.write_table(table, where, filesystem=filesystem, compression=compression,
                   use_dictionary=[c for c in table.column_names if c not in _NO_DICTIONARY])


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


def read_task(task: dict) -> tuple[pa.Table, dict]:
    """Decode one task's byte range and apply read_committed; returns the kept records and the
    task's counters."""
    with open_segment(task["path"], task["inode"]) as f:
        buf = mmap.mmap(f.fileno(), task["end"], access=mmap.ACCESS_READ)
    try:
        records = decode_to_arrow(buf, start=task["start"], end=task["end"], source=task["path"], validate=True,
                                  min_offset=task["min_offset"], max_offset=task["max_offset"],
                                  epochs=ReadEpochs.history_of(task.get("epochs")))
    finally:
        del buf  # views of the map may live in `records` until they are copied out by Arrow
    read = records.num_rows
    control = records.column("is_control")
    aborted = _aborted_mask(records, task["aborted"] or [])
    dropped_control = pc.sum(control.cast(pa.int64())).as_py() or 0
    dropped_aborted = pc.sum(pc.and_(aborted, pc.invert(control)).cast(pa.int64())).as_py() or 0
    # Filtering copies every column, keys and values included: only when something goes.
    kept = records.filter(pc.invert(pc.or_(control, aborted))) if dropped_control or dropped_aborted else records
    counters = {"bytes_read": task["end"] - task["start"], "records_read": read,
                "dropped_control": dropped_control, "dropped_aborted": dropped_aborted}
    return kept, counters


def _aborted_mask(records: pa.Table, aborted: list[dict]) -> pa.ChunkedArray:
    """True for records of aborted transactions: a transactional record of the producer inside
    one of its aborted ranges (a planner fact, from the ABORT markers)."""
    mask = pa.repeat(pa.scalar(False), records.num_rows)
    if not aborted or records.num_rows == 0:
        return mask
    offsets = records.column("offset")
    producers = records.column("producer_id")
    transactional = records.column("is_transactional")
    for r in aborted:
        hit = pc.and_(pc.equal(producers, r["producer_id"]),
                      pc.and_(pc.greater_equal(offsets, r["first_offset"]),
                              pc.less_equal(offsets, r["last_offset"])))
        mask = pc.or_(mask, pc.and_(hit, transactional))
    return mask


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


def file_stats(table: pa.Table) -> str:
    """Delta file statistics (numRecords, minValues, maxValues, nullCount) for data skipping.
    Timestamps in Delta stats are ISO-8601 with milliseconds; our timestamps are whole
    milliseconds, so the truncation loses nothing."""
    mins, maxs = {}, {}
    present = set(table.column_names)  # a CDC table has no key, value, timestamp_type... (cdc.py)
    for name in (n for n in _STATS_COLUMNS if n in present):
        col = table.column(name)
        if col.null_count == len(col):
            continue
        mm = pc.min_max(col)
        mins[name], maxs[name] = _stat_value(mm["min"].as_py()), _stat_value(mm["max"].as_py())
    nulls = {name: table.column(name).null_count for name in _NULL_COUNT_COLUMNS if name in present}
    return json.dumps({"numRecords": table.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls})


def _stat_value(value):
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    return value
