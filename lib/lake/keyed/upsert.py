"""Upsert tables: one row per key, the row of its newest change; a delete (tombstone) removes it.

An upsert table is partitioned by `key_bucket`, a stable hash of the key modulo N buckets (N fixed
when the table is created, in its configuration). A run merges in two RDD jobs:

1. Stage (the ingest tasks, executors): each task's decoded rows become changes (changes.extract),
   collapsed to the newest change per key (`newest_per_key`), written as one staging file per
   touched bucket under `<table>/_topiclake_staging/<run_id>/` (Delta never reads `_` directories;
   vacuum leaves them alone). The task returns one row per staging file.
2. Merge (one task per touched bucket, executors): the bucket's current files (from the snapshot
   the driver planned on) plus its staging files; per key the newest row wins, deleted winners are
   dropped; the survivors are written as one new Parquet file with the stats ingest writes. A
   bucket where nothing changes is left as it is.

The driver then makes ONE commit: remove actions for the replaced files, add actions, and the
group's offsets (delta.commit), with a precheck that every removed file is still in the snapshot
it commits on (an OPTIMIZE or DELETE in between stops the run, nothing committed).

Which change is newest (`newest_per_key`): within one topic partition, the higher offset, always
(an older offset never overwrites a newer one, so replaying an old range can never move a key
back). Across partitions (a key that moved partition, or a multi-topic table): the newer
timestamp, then the higher (topic, partition, offset) as a deterministic tie break.

All of it is pyarrow compute over columns: sort_indices, group_by, take; no per-record objects.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from . import tombstones
from .changes import ChangeSpec, Changes

KEY_BUCKET = "key_bucket"
KEY_BUCKET_TYPE = pa.int32()
DEFAULT_BUCKETS = 16
STAGING_DIR = "_topiclake_staging"
DELETED = "_topiclake_deleted"  # staging files only: True where the change deletes its key
_KEY_COLUMNS_META = b"topiclake.key_columns"
_POSITION = "_topiclake_position"
_SOURCE = "_topiclake_source"  # merge only: 0 what the bucket held, 1 this run's change
_STALE_STAGING_S = 24 * 3600  # staging dirs of killed runs older than this are removed by later runs


@dataclass(frozen=True, slots=True)
class UpsertSpec:
    """How a table is kept as an upsert table (picklable: it travels with the tasks)."""

    change: ChangeSpec = ChangeSpec()
    buckets: int = DEFAULT_BUCKETS


def upsert_schema(data: pa.Schema) -> pa.Schema:
    """The table schema of an upsert table: its data columns, then the bucket partition column."""
    return data.append(pa.field(KEY_BUCKET, KEY_BUCKET_TYPE))


# ------------------------------------------------------------------------------------------ hashing

_MULTIPLIER = np.uint64(0x100000001B3)  # FNV-1a's 64-bit prime, as a polynomial base


def key_hash(rows: pa.Table, key_columns: tuple[str, ...]) -> np.ndarray:
    """A stable 64-bit hash per row of its key columns (the same bytes give the same hash in every
    process and version: no per-process seed). Non-binary columns hash their text form, decimals
    without trailing zeros. Null leaves are skipped, so a record key that gains an optional field
    (a new key schema version) stays in its bucket: equal keys must hash equal, whatever schema
    version wrote them; unequal ones may share a bucket."""
    out = np.zeros(rows.num_rows, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for name in key_columns:
            for leaf in _leaves(rows.column(name)):
                hashes, valid = _binary_hash(leaf)
                out = np.where(valid, out * np.uint64(31) + hashes, out)
        return _mix(out)


def _leaves(column) -> list:
    """A key column's comparable parts: itself, or a struct's fields, depth first (a registry-typed
    key is a record)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not pa.types.is_struct(array.type):
        return [array]
    return [leaf for child in array.flatten() for leaf in _leaves(child)]


def bucket_of(rows: pa.Table, key_columns: tuple[str, ...], buckets: int) -> np.ndarray:
    return (key_hash(rows, key_columns) % np.uint64(buckets)).astype(np.int32)


def _binary_hash(column) -> tuple[np.ndarray, np.ndarray]:
    """(hash of each value's bytes, whether the value is not null)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_decimal(array.type):  # 1.50 and 1.500 are one key: a widened scale must not move it
        array = pc.replace_substring_regex(pc.replace_substring_regex(
            pc.cast(array, pa.string()), r"(\.[0-9]*?)0+$", r"\1"), r"\.$", "")
    elif not (pa.types.is_binary(array.type) or pa.types.is_string(array.type)):
        array = pc.cast(array, pa.string())
    if pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type):
        array = array.cast(pa.binary())
    n = len(array)
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32, count=n + 1, offset=array.offset * 4).astype(np.int64)
    data_buffer = array.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    first, last = offsets[0], offsets[-1]
    lengths = np.diff(offsets)
    with np.errstate(over="ignore"):
        if last > first:
            starts = offsets[:-1] - first
            within = np.arange(last - first, dtype=np.int64) - np.repeat(starts, lengths)
            powers = np.cumprod(np.full(int(lengths.max()), _MULTIPLIER, dtype=np.uint64)) // _MULTIPLIER
            powers[0] = 1  # [1, p, p^2, ...] modulo 2^64
            terms = data[first:last].astype(np.uint64) * powers[within]
            sums = np.concatenate([np.zeros(1, np.uint64), np.cumsum(terms, dtype=np.uint64)])
            hashes = sums[offsets[1:] - first] - sums[offsets[:-1] - first]
        else:
            hashes = np.zeros(n, np.uint64)
        hashes = hashes + lengths.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    valid = np.asarray(array.is_valid()) if array.null_count else np.ones(n, dtype=bool)
    return hashes, valid


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit reaches the low bits the bucket is taken from."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(27))
        x = x * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


# ------------------------------------------------------------------------------------ newest change

def newest_per_key(rows: pa.Table, key_columns: tuple[str, ...]) -> pa.Table:
    """The newest row per key (see the module docstring for the order)."""
    if rows.num_rows <= 1:
        return rows
    rows, keys, added = _groupable_keys(rows, key_columns)
    newest = _newest(rows, keys)
    return newest.drop_columns(added) if added else newest


def _newest(rows: pa.Table, keys: list[str]) -> pa.Table:
    if _one_partition(rows):  # a task's records, or a single-partition topic: offsets decide
        return _last_of_groups(rows, keys, ["offset"])
    rows = _last_of_groups(rows, keys + ["topic", "partition"], ["offset"])
    if _unique(rows, keys):  # every key in one partition only, as Kafka's partitioner puts them
        return rows
    return _last_of_groups(rows, keys, ["timestamp", "topic", "partition", "offset"])


def _groupable_keys(rows: pa.Table, key_columns: tuple[str, ...]) -> tuple[pa.Table, list[str], list[str]]:
    """Arrow groups by no struct: a struct key column is grouped by its fields, added as temporary
    columns; (rows, the key column names to group by, the temporary ones)."""
    keys, added = [], []
    for name in key_columns:
        column = rows.column(name)
        if not pa.types.is_struct(column.type):
            keys.append(name)
            continue
        for leaf in _leaves(column):
            temporary = f"_topiclake_key_{len(added)}"
            rows = rows.append_column(temporary, leaf)
            keys.append(temporary)
            added.append(temporary)
    return rows, keys, added


def _unique(rows: pa.Table, keys: list[str]) -> bool:
    if len(keys) == 1:
        return pc.count_distinct(rows.column(keys[0]), mode="all").as_py() == rows.num_rows
    return rows.select(keys).group_by(keys).aggregate([]).num_rows == rows.num_rows


def _one_partition(rows: pa.Table) -> bool:
    return all(pc.count_distinct(rows.column(c)).as_py() == 1 and rows.column(c).null_count == 0
               for c in ("topic", "partition"))


def _last_of_groups(rows: pa.Table, keys: list[str], order: list[str]) -> pa.Table:
    """Per group of `keys`, the row that sorts last by `order`."""
    ordered = rows if _ascending(rows, order) else rows.take(
        pc.sort_indices(rows, [(c, "ascending", "at_start") for c in order]))
    positions = pa.table({**{k: ordered.column(k) for k in keys},
                          _POSITION: pa.array(np.arange(ordered.num_rows, dtype=np.int64))})
    last = positions.group_by(keys, use_threads=False).aggregate([(_POSITION, "max")])
    return ordered.take(last.column(f"{_POSITION}_max"))


def _ascending(rows: pa.Table, order: list[str]) -> bool:
    """A task's records are in offset order already: no sort needed."""
    if len(order) != 1 or rows.column(order[0]).null_count:
        return False
    values = rows.column(order[0]).to_numpy()
    return bool(np.all(values[1:] >= values[:-1]))


# ------------------------------------------------------------------------------ stage 1: executors

def staging_dir(run_id: str) -> str:
    return f"{STAGING_DIR}/{run_id}"


def stage_changes(changes: Changes, *, buckets: int, table_uri: str, run_id: str, task_name: str,
                  compression: str) -> list[tuple[int, str, int]]:
    """Write a task's changes, newest per key, as one staging file per bucket; (bucket, relative
    path, rows) per file."""
    deleted = changes.deleted if isinstance(changes.deleted, pa.Array) else pa.array(changes.deleted)
    rows = changes.rows.append_column(DELETED, deleted.cast(pa.bool_()))
    rows = newest_per_key(rows, changes.key_columns)
    if rows.num_rows == 0:
        return []
    bucket = pa.array(bucket_of(rows, changes.key_columns, buckets))
    rows = rows.replace_schema_metadata({_KEY_COLUMNS_META: json.dumps(list(changes.key_columns)).encode()})
    fs, base = pafs.FileSystem.from_uri(table_uri)
    out = []
    for b in pc.unique(bucket).to_pylist():
        part = rows.filter(pc.equal(bucket, b))
        path = f"{staging_dir(run_id)}/bucket-{b}/{task_name}-{uuid.uuid4().hex[:12]}.{compression}.parquet"
        fs.create_dir(f"{base}/{path.rsplit('/', 1)[0]}", recursive=True)
        pq.write_table(part, f"{base}/{path}", filesystem=fs, compression=compression)
        out.append((b, path, part.num_rows))
    return out


# ------------------------------------------------------------------------------ stage 2: executors

def merge_bucket(job: dict) -> dict:
    """One bucket: current files + remembered deletes (tombstones.py) + staging files -> one new
    data file (or none) and, where the deletes changed, a new tombstone file. `data_changed` False:
    no change wins over what the bucket's files hold, so they stay."""
    from ..errors import ConcurrentWriterError
    from ..log.decode import file_stats, write_parquet
    from ..runs.backfill import plain_layout

    fs, base = pafs.FileSystem.from_uri(job["table_uri"])
    schema = pa.ipc.read_schema(pa.py_buffer(job["schema"]))  # the data columns, no partition column
    staged = [pq.read_table(f"{base}/{p}", filesystem=fs) for p in job["changes"]]
    key_columns = tuple(json.loads(staged[0].schema.metadata[_KEY_COLUMNS_META]))
    current = [_conform(plain_layout(pq.read_table(f"{base}/{p}", filesystem=fs)), schema) for p in job["current"]]
    held = sum(t.num_rows for t in current)
    remembered, deletes_held = [], 0
    if job["tombstones"] is not None:
        try:
            file = pq.read_table(f"{base}/{job['tombstones']}", filesystem=fs)
        except FileNotFoundError:  # superseded by a commit after this run planned: it cannot commit
            raise ConcurrentWriterError(f"table {job['table_uri']}: another writer changed key bucket {job['bucket']} "
                                        "since this merge planned; nothing was committed, run again") from None
        deletes_held = file.num_rows
        file = tombstones.unexpired(file, now_us=job["now_us"], retention_ms=job["retention_ms"])
        remembered = [_marked(_conform(plain_layout(file), schema), True, file.column(tombstones.REMEMBERED_AT))]
    changes = [_marked(_conform(plain_layout(t), schema), t.column(DELETED)) for t in staged]
    rows = pa.concat_tables([_marked(t, False) for t in current] + remembered + changes)
    old_rows = held + sum(t.num_rows for t in remembered)
    source = pa.array(np.concatenate([np.zeros(old_rows, np.int8), np.ones(rows.num_rows - old_rows, np.int8)]))
    winners = newest_per_key(rows.append_column(_SOURCE, source), key_columns)
    deleted = winners.column(DELETED)
    kept = winners.filter(pc.invert(deleted)).drop_columns([tombstones.REMEMBERED_AT])
    deletes = tombstones.stamped(winners.filter(deleted), now_us=job["now_us"])
    data_changed = _count_new(kept) > 0 or kept.num_rows != held
    deletes_changed = _count_new(deletes) > 0 or deletes.num_rows != deletes_held
    result = {"bucket": job["bucket"], "data_changed": data_changed, "add": None, "records": held,
              "tombstones": None}
    if deletes_changed:
        generation = tombstones.new_generation(job["tombstone_generation"])
        path = tombstones.path_of(job["bucket"], generation)
        fs.create_dir(f"{base}/{path.rsplit('/', 1)[0]}", recursive=True)
        pq.write_table(deletes.select(list(key_columns) + list(tombstones.KEPT_COLUMNS)), f"{base}/{path}",
                       filesystem=fs, compression="zstd")
        result["tombstones"] = generation
    if not data_changed:
        return result
    kept = kept.drop_columns([DELETED, _SOURCE])
    result["records"] = kept.num_rows
    if kept.num_rows:
        kept = kept.take(pc.sort_indices(kept, [("topic", "ascending"), ("partition", "ascending"),
                                                ("offset", "ascending")]))
        name = f"{KEY_BUCKET}={job['bucket']}/part-upsert-{job['run_id']}-{uuid.uuid4().hex[:12]}.snappy.parquet"
        fs.create_dir(f"{base}/{KEY_BUCKET}={job['bucket']}", recursive=True)
        write_parquet(kept, f"{base}/{name}", filesystem=fs)
        info = fs.get_file_info(f"{base}/{name}")
        result["add"] = {"path": name, "size": info.size,
                         "partition_values": json.dumps({KEY_BUCKET: str(job["bucket"])}),
                         "modification_time": int(time.time() * 1000), "num_records": kept.num_rows,
                         "stats": file_stats(kept)}
    return result


def _marked(rows: pa.Table, deleted, remembered_at=None) -> pa.Table:
    """`rows` with the merge's columns: DELETED (a bool, or a column), and REMEMBERED_AT (null
    but for remembered deletes)."""
    if isinstance(deleted, bool):
        deleted = pa.repeat(pa.scalar(deleted), rows.num_rows)
    if remembered_at is None:
        remembered_at = pa.nulls(rows.num_rows, pa.int64())
    return rows.append_column(DELETED, deleted).append_column(
        pa.field(tombstones.REMEMBERED_AT, pa.int64()), remembered_at)


def _count_new(rows: pa.Table) -> int:
    """How many of the winners came from this run's changes (not from what the bucket held)."""
    return pc.sum(pc.cast(pc.equal(rows.column(_SOURCE), 1), pa.int64())).as_py() or 0


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The data columns in the table's order and types; a column added after the file was written
    (a CDC table's new field, committed with this merge) is null in its rows."""
    for column in schema:
        if column.name not in table.column_names:
            table = table.append_column(column, pa.nulls(table.num_rows, column.type))
    return table.select(schema.names).cast(schema)


# ------------------------------------------------------------------------------------------ driver

@dataclass(slots=True)
class MergePlan:
    """What a merge commits: remove and add actions, the tombstone generations it moves
    (`transactions`), and the check that each bucket it changes still holds exactly the files and
    the tombstones the merge read, in the snapshot the commit lands on."""

    removes: list  # deltalake RemoveAction
    adds: list  # deltalake AddAction
    planned: dict[int, frozenset[str]]  # changed bucket -> the files the merge read (removed if rewritten)
    new_generations: dict[int, int] = field(default_factory=dict)  # bucket -> its new tombstone generation
    read_generations: dict[int, int] = field(default_factory=dict)  # changed bucket -> tombstone generation read
    buckets_touched: int = 0
    rewritten: int = 0  # buckets whose data files are replaced
    rows: int = 0  # rows the rewritten buckets hold now

    @property
    def removed_paths(self) -> frozenset[str]:
        return frozenset(a.path for a in self.removes)

    @property
    def transactions(self) -> list:
        """The txn actions that make the new tombstone generations current (deltalake Transaction)."""
        return [tombstones.transaction(b, g) for b, g in sorted(self.new_generations.items())]

    @property
    def empty(self) -> bool:
        return not (self.removes or self.adds or self.transactions)

    def precheck(self, snapshot) -> None:
        """Another writer's OPTIMIZE or DELETE removed a file the merge replaces, another writer (a
        backfill, another group feeding the table) added one to a bucket it changes, or another
        merge moved the bucket's tombstones: either way what the merge wrote is stale; nothing is
        committed. (delta.commit commits on exactly this snapshot, or retries and checks again.)"""
        from ..errors import ConcurrentWriterError
        from ..table import delta

        if not self.planned:
            return
        now: dict[int, set[str]] = {b: set() for b in self.planned}
        files = delta.active_files(snapshot)
        column = f"partition.{KEY_BUCKET}"
        if column in files.column_names:
            for path, bucket in zip(files.column("path").to_pylist(), files.column(column).to_pylist()):
                if bucket is not None and int(bucket) in now:
                    now[int(bucket)].add(path)
        generations = tombstones.generations(snapshot, self.planned)
        changed = sorted(b for b, paths in self.planned.items()
                         if now[b] != paths or generations[b] != self.read_generations.get(b, tombstones.NONE))
        if changed:
            raise ConcurrentWriterError(
                f"table {snapshot.table_uri}: another writer changed the files of key bucket(s) {changed} since "
                "this merge read them (an OPTIMIZE, DELETE, backfill or other ingest); nothing was committed, "
                "run again")

    def committed(self, table_uri: str) -> None:
        """After the commit: the tombstone files it superseded go."""
        if self.new_generations:
            tombstones.remove_superseded(table_uri, self.new_generations)

    @property
    def buckets_rewritten(self) -> int:
        return self.rewritten


def plan_merge(spark, table_uri: str, staged: list[dict], *, data_schema: pa.Schema, run_id: str,
               job_group: str | None = None, progress=None) -> MergePlan:
    """Stage 2: one Spark task per touched bucket. `staged`: stage-1 rows (path, partition_values).
    The current files and tombstones come from the table's snapshot now (None: a new table)."""
    from deltalake.transaction import RemoveAction

    from ..spark.progress import spark_job_group
    from ..spark.session import collect
    from ..table import delta

    by_bucket: dict[int, list[str]] = {}
    for row in staged:
        by_bucket.setdefault(int(json.loads(row["partition_values"])[KEY_BUCKET]), []).append(row["path"])
    snapshot = delta.load_table(table_uri)
    current: dict[int, list[dict]] = {}
    if snapshot is not None:
        _refuse_deletion_vectors(snapshot)
        for f in delta.active_files(snapshot).to_pylist():
            bucket = f.get(f"partition.{KEY_BUCKET}")
            if bucket is not None and int(bucket) in by_bucket:
                current.setdefault(int(bucket), []).append(f)
    generations = tombstones.generations(snapshot, by_bucket)
    retention_ms = tombstones.retention_ms(snapshot)
    schema = data_schema.serialize().to_pybytes()
    jobs = [{"table_uri": table_uri, "bucket": b, "changes": paths, "current": [f["path"] for f in current.get(b, [])],
             "tombstones": tombstones.path_of(b, generations[b]), "tombstone_generation": generations[b],
             "retention_ms": retention_ms, "now_us": time.time_ns() // 1000, "schema": schema, "run_id": run_id}
            for b, paths in sorted(by_bucket.items())]
    plan = MergePlan([], [], {}, buckets_touched=len(jobs))
    if not jobs:
        return plan
    sc = spark.sparkContext
    with spark_job_group(sc, job_group or f"topiclake-merge-{run_id}",
                         f"topiclake upsert merge: {len(jobs)} buckets of {table_uri}", progress):
        results = collect(sc.parallelize(jobs, len(jobs)).map(merge_bucket))
    now_ms = int(time.time() * 1000)
    for result in results:
        bucket = result["bucket"]
        if result["tombstones"] is not None:
            plan.new_generations[bucket] = result["tombstones"]
        if not result["data_changed"] and result["tombstones"] is None:
            continue
        plan.planned[bucket] = frozenset(f["path"] for f in current.get(bucket, []))
        plan.read_generations[bucket] = generations[bucket]
        if not result["data_changed"]:
            continue
        plan.rewritten += 1
        plan.rows += result["records"]
        for f in current.get(bucket, []):
            plan.removes.append(RemoveAction(f["path"], True, now_ms, f["size_bytes"], {KEY_BUCKET: str(bucket)}))
        if result["add"] is not None:
            plan.adds.append(delta.add_action(result["add"]))
    return plan


def _refuse_deletion_vectors(snapshot) -> None:
    """The merge reads a bucket's Parquet files whole: rows a deletion vector removed (a Spark
    DELETE or UPDATE on a table with `delta.enableDeletionVectors`) would come back."""
    from ..errors import UsageError

    if "deletionVectors" in (snapshot.protocol().writer_features or []):
        raise UsageError(
            f"table {snapshot.table_uri}: deletion vectors are enabled, and an upsert merge would bring back the rows "
            "they delete; purge them and turn them off first: REORG TABLE ... APPLY (PURGE), then ALTER TABLE ... "
            "SET TBLPROPERTIES ('delta.enableDeletionVectors' = false) and ALTER TABLE ... DROP FEATURE deletionVectors")


def remove_staging(table_uri: str, run_id: str) -> None:
    """After the commit (or a failed run): the run's staging files, and stale ones of killed runs."""
    if "://" in table_uri and not table_uri.startswith("file://"):
        return
    root = table_uri.removeprefix("file://")
    shutil.rmtree(f"{root}/{staging_dir(run_id)}", ignore_errors=True)
    import os

    staging = f"{root}/{STAGING_DIR}"
    try:
        entries = list(os.scandir(staging))
    except OSError:
        return
    for entry in entries:
        try:
            if time.time() - _last_written(entry.path) > _STALE_STAGING_S:
                shutil.rmtree(entry.path, ignore_errors=True)
        except OSError:
            continue


def _last_written(directory: str) -> float:
    """When a run last wrote into its staging directory (its newest file or directory): a run
    whose stage 1 runs for days keeps its early files."""
    import os

    newest = os.stat(directory).st_mtime
    for parent, _dirs, files in os.walk(directory):
        for path in [parent] + [os.path.join(parent, name) for name in files]:
            try:
                newest = max(newest, os.stat(path).st_mtime)
            except OSError:  # removed meanwhile
                continue
    return newest
