"""Upsert tables: one row per key, the row of its newest change; a delete (tombstone) removes it.

An upsert table is partitioned by `key_bucket`, a stable hash of the key modulo N buckets (N fixed
when the table is created, in its configuration). A run merges in two RDD jobs:

1. Stage (the ingest tasks, executors; staging.py): each task's decoded rows become changes
   (extract.py), collapsed to the newest change per key (keys.newest_per_key), written as one
   staging file per touched bucket under `<table>/_topiclake_staging/<run_id>/` (Delta never reads
   `_` directories; vacuum leaves them alone). The task returns one row per staging file.
2. Merge (one task per touched bucket, executors; merge.py): the bucket's current files (from the
   snapshot the driver planned on) plus its staging files; per key the newest row wins, deleted
   winners are dropped; the survivors are written as one new Parquet file with the stats ingest
   writes. A bucket where nothing changes is left as it is.

The driver then makes ONE commit: remove actions for the replaced files, add actions, and the
group's offsets (delta.commit), with a precheck that every removed file is still in the snapshot
it commits on (an OPTIMIZE or DELETE in between stops the run, nothing committed).

This module is the driver's part: the merge planned (`plan_merge` runs stage 2 and returns the
MergePlan a commit carries). Which change is newest: keys.py. The table's kind and key buckets
(UpsertSpec): table_kind.py.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from deltalake.transaction import RemoveAction

from ..errors import ConcurrentWriterError, UsageError
from ..spark.progress import spark_job_group
from ..spark.session import collect
from ..table import delta
from . import tombstones
from .merge import merge_bucket
from .table_kind import KEY_BUCKET

if TYPE_CHECKING:
    import pyarrow as pa


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
    inserted: int = 0  # rows of keys the table did not hold
    updated: int = 0  # rows replaced by a newer change of their key
    deleted: int = 0  # rows a delete removed

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

    def describe(self) -> str:
        """What the merge changed, for a run's summary."""
        return (f"upsert: {self.inserted + self.updated + self.deleted} rows changed ({self.inserted} inserted, "
                f"{self.updated} updated, {self.deleted} deleted); {self.rewritten} of {self.buckets_touched} "
                f"touched key buckets rewritten ({self.rows} rows in them now)")


def plan_merge(spark, table_uri: str, staged: list[dict], *, data_schema: pa.Schema, run_id: str,
               job_group: str | None = None, progress=None) -> MergePlan:
    """Stage 2: one Spark task per touched bucket. `staged`: stage-1 rows (path, partition_values).
    The current files and tombstones come from the table's snapshot now (None: a new table)."""
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
             "retention_ms": retention_ms, "now_us": time.time_ns() // 1000, "schema": schema, "run_id": run_id,
             "root": delta.served_root(table_uri)}  # a bucket's server and keys, for the executors
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
        plan.inserted, plan.updated = plan.inserted + result["inserted"], plan.updated + result["updated"]
        plan.deleted += result["deleted"]
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
    if "deletionVectors" in (snapshot.protocol().writer_features or []):
        raise UsageError(
            f"table {snapshot.table_uri}: deletion vectors are enabled, and an upsert merge would bring back the rows "
            "they delete; purge them and turn them off first: REORG TABLE ... APPLY (PURGE), then ALTER TABLE ... "
            "SET TBLPROPERTIES ('delta.enableDeletionVectors' = false) and ALTER TABLE ... "
            "DROP FEATURE deletionVectors")
