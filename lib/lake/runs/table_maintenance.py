"""The tables' own maintenance, as options of the retention job (jobs/retention.py), run through
delta-spark as Spark jobs on the master the job was given (the executors rewrite and list files;
the driver only commits):

- row retention: `DELETE FROM <table> WHERE record_date < <cutoff>`: whole record_date partitions
  older than N days, which Delta removes by metadata alone (no file is rewritten, like Kafka's
  whole segments). Rows with a null record_date stay. A table not partitioned by record_date is
  reported and left alone. A dry run counts the files and rows from the snapshot.
- small-file compaction: `OPTIMIZE` (bin-packing into --target-file-bytes, Delta's
  spark.databricks.delta.optimize.maxFileSize);
- vacuum: `VACUUM ... RETAIN H HOURS`: files no longer referenced and older than --vacuum-hours go,
  orphans of crashed jobs too (a file a running ingest has written but not yet committed is younger
  than any sane retention and stays). A dry run lists them (`DRY RUN`).

delta-spark's conflict checks serialise these with the other writers: an ingest's commit only
appends, so neither side loses; a backfill that removes the same files as an OPTIMIZE fails on one
side and is run again. Each commit's userMetadata says which topiclake option made it. Group
offsets (txn actions) live in the snapshot, so none of this moves them.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Sequence

from deltalake import DeltaTable

from topiclake.segments.storage import StorageLayout

from ..errors import error_line
from ..sql.query import quote_name
from ..table import delta
from ..table.location import discover_tables, resolve_table_uri

log = logging.getLogger(__name__)

DATE_COLUMN = "record_date"
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
_MAX_FILE_SIZE = "spark.databricks.delta.optimize.maxFileSize"
_RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"


@dataclass(frozen=True, slots=True)
class TableMaintenanceOptions:
    tables: tuple[str, ...] = ()  # names under <root>/tables, or paths/URIs; empty: every table
    retention_days: int | None = None
    optimize: bool = False
    target_file_bytes: int | None = None
    vacuum_hours: int | None = None


@dataclass(slots=True)
class TableOutcome:
    uri: str
    removed_files: int = 0
    removed_rows: int = 0
    removed_partitions: tuple[str, ...] = ()
    cutoff: str | None = None
    optimize: dict | None = None
    vacuumed: int = 0
    version: int | None = None
    error: str | None = None

    def describe(self, *, dry_run: bool = False) -> str:
        """What was done (a dry run: what a real run would do)."""
        if self.error:
            return f"ERROR {self.error}"
        parts = []
        if self.cutoff is not None:
            parts.append(f"{'would remove' if dry_run else 'removed'} {self.removed_files} files "
                         f"({self.removed_rows} rows) of {len(self.removed_partitions)} dates before {self.cutoff}")
        if self.optimize is not None:
            parts.append(f"optimize: {self.optimize.get('numFilesRemoved', 0)} files -> "
                         f"{self.optimize.get('numFilesAdded', 0)}")
        if self.vacuumed:
            parts.append(f"{'would vacuum' if dry_run else 'vacuumed'} {self.vacuumed} files")
        return "; ".join(parts) or "nothing to do"


def _resolve(layout: StorageLayout, names: Sequence[str]) -> list[str]:
    if not names:
        return list(discover_tables(layout).values())
    return [resolve_table_uri(layout, n) for n in names]


def expire_rows(spark: Callable[[], object], uri: str, days: int, *, now_ms: int,
                dry_run: bool = False) -> TableOutcome:
    """Remove the record_date partitions older than `days` days, in one DELETE. `spark` gives the
    session (a dry run needs none)."""
    out = TableOutcome(uri)
    table = DeltaTable(uri)
    if DATE_COLUMN not in table.metadata().partition_columns:
        out.error = f"table {uri} is not partitioned by {DATE_COLUMN}: row retention needs it"
        return out
    cutoff = (dt.datetime.fromtimestamp(now_ms / 1000, dt.timezone.utc).date() - dt.timedelta(days=days))
    out.cutoff = cutoff.isoformat()
    files = delta.active_files(table).to_pylist()
    old = [f for f in files if f.get(f"partition.{DATE_COLUMN}") is not None
           and _as_date(f[f"partition.{DATE_COLUMN}"]) < cutoff]
    out.removed_files = len(old)
    out.removed_rows = sum(f.get("num_records") or 0 for f in old)
    out.removed_partitions = tuple(sorted({str(f[f"partition.{DATE_COLUMN}"]) for f in old}))
    if not old or dry_run:
        return out
    metadata = {"operation": "table-retention", "days": days, "before": out.cutoff,
                "partitions": list(out.removed_partitions)}
    session = spark()
    with _settings(session, {_USER_METADATA: json.dumps(metadata, sort_keys=True)}):
        # a table path and a computed date, no user text
        session.sql(f"DELETE FROM {_table(uri)} WHERE {DATE_COLUMN} < DATE '{out.cutoff}'").collect()  # noqa: S608
    out.version = DeltaTable(uri).version()
    log.info("table %s: removed %d files of dates before %s (version %d)", uri, len(old), cutoff, out.version)
    return out


def optimize(spark, uri: str, target_file_bytes: int | None) -> dict:
    """Bin-packing compaction; Delta's metrics (numFilesAdded, numFilesRemoved, ...)."""
    settings = {_USER_METADATA: json.dumps({"operation": "optimize"})}
    if target_file_bytes is not None:
        settings[_MAX_FILE_SIZE] = str(target_file_bytes)
    with _settings(spark, settings):
        row = spark.sql(f"OPTIMIZE {_table(uri)}").collect()[0]
    return row["metrics"].asDict()


def vacuum(spark, uri: str, hours: int, *, dry_run: bool) -> int:
    """Files deleted (a dry run: that would be deleted). The hours are the user's own choice, below
    Delta's 7-day guard too."""
    settings = {_USER_METADATA: json.dumps({"operation": "vacuum", "hours": hours}), _RETENTION_CHECK: "false"}
    statement = f"VACUUM {_table(uri)} RETAIN {hours} HOURS"
    with _settings(spark, settings), _jvm_stdout_silenced(spark):  # VACUUM prints its count on the JVM's stdout
        if dry_run:
            return len(spark.sql(statement + " DRY RUN").collect())
        spark.sql(statement).collect()
    done = next((h for h in DeltaTable(uri).history(2) if h.get("operation") == "VACUUM END"), {})
    return int((done.get("operationMetrics") or {}).get("numDeletedFiles", 0))


def _table(uri: str) -> str:
    return f"delta.{quote_name(uri)}"


@contextmanager
def _settings(spark, settings: dict[str, str]):
    """Session settings for one statement, put back afterwards."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


@contextmanager
def _jvm_stdout_silenced(spark):
    jvm = spark._jvm
    before = jvm.System.out
    jvm.System.setOut(jvm.java.io.PrintStream(jvm.java.io.OutputStream.nullOutputStream()))
    try:
        yield
    finally:
        jvm.System.setOut(before)


def _as_date(value) -> dt.date:
    return value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))


def maintain_tables(layout: StorageLayout, options: TableMaintenanceOptions, *, spark: Callable[[], object],
                    now_ms: int | None = None, dry_run: bool = False) -> list[TableOutcome]:
    """`spark`: a function that starts (or returns) the session the maintenance runs in."""
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    outcomes = []
    started: list = []

    def session():
        if not started:
            started.append(spark())
        return started[0]

    for uri in _resolve(layout, options.tables):
        try:
            out = TableOutcome(uri)
            if options.retention_days is not None:
                out = expire_rows(session, uri, options.retention_days, now_ms=now_ms, dry_run=dry_run)
            if options.optimize and not dry_run and out.error is None:
                out.optimize = optimize(session(), uri, options.target_file_bytes)
            if options.vacuum_hours is not None and out.error is None:
                out.vacuumed = vacuum(session(), uri, options.vacuum_hours, dry_run=dry_run)
        except Exception as exc:  # noqa: BLE001 - one table's failure must not stop the others
            out = TableOutcome(uri, error=f"table {uri}: {error_line(exc)}")
            log.error("%s", out.error)
        outcomes.append(out)
    return outcomes
