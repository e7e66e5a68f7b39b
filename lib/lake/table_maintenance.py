"""The tables' own maintenance, as options of the retention job (jobs/retention.py):

- row retention: files of `record_date` partitions older than N days are removed in ONE Delta
  commit of remove actions through `delta.commit` (so it carries the writer guard and can never
  interleave with an ingest commit planned on an older snapshot). Whole partitions only, like
  Kafka's whole segments: no file is rewritten. Rows with a null record_date stay. A table not
  partitioned by record_date is reported and left alone.
- small-file compaction: `deltalake` optimize.compact (bin-packing into --target-file-bytes),
  committed with the next writer-guard version for the same reason;
- vacuum: files no longer referenced and older than --vacuum-hours go (full mode: orphans of
  crashed jobs too; a file a running ingest has written but not yet committed is younger than
  any sane retention and stays).
Group offsets (txn actions) live in the snapshot, so none of this moves them.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass
from typing import Sequence

from deltalake import DeltaTable
from deltalake.transaction import CommitProperties, RemoveAction, Transaction

from topiclake.segments.storage import StorageLayout

from . import delta
from .errors import LakeError
from .sql import discover_tables

log = logging.getLogger(__name__)

DATE_COLUMN = "record_date"


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
    from .ingest import resolve_table_uri

    if not names:
        return list(discover_tables(layout).values())
    return [resolve_table_uri(layout, n) for n in names]


def expire_rows(uri: str, days: int, *, now_ms: int, dry_run: bool = False) -> TableOutcome:
    """Remove every file of the record_date partitions older than `days` days, in one commit."""
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
    actions = [RemoveAction(f["path"], True, now_ms, f["size_bytes"], {DATE_COLUMN: str(f[f"partition.{DATE_COLUMN}"])})
               for f in old]
    metadata = {"topiclake": {"operation": "table-retention", "days": days, "before": out.cutoff,
                              "partitions": list(out.removed_partitions)}}
    out.version = delta.commit(uri, group="topiclake-maintenance", actions=actions, offsets=[], schema=None,
                               partition_by=table.metadata().partition_columns, metadata=metadata)
    log.info("table %s: removed %d files of dates before %s (version %d)", uri, len(old), cutoff, out.version)
    return out


def _as_date(value) -> dt.date:
    return value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))


def _guard(table: DeltaTable) -> CommitProperties:
    version = (table.transaction_version(delta.GUARD_APP_ID) or 0) + 1
    return CommitProperties(app_transactions=[Transaction(delta.GUARD_APP_ID, version)],
                            custom_metadata={"topiclake": '{"operation": "maintenance"}'})


def maintain_tables(layout: StorageLayout, options: TableMaintenanceOptions, *, now_ms: int | None = None,
                    dry_run: bool = False) -> list[TableOutcome]:
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    outcomes = []
    for uri in _resolve(layout, options.tables):
        try:
            out = TableOutcome(uri)
            if options.retention_days is not None:
                out = expire_rows(uri, options.retention_days, now_ms=now_ms, dry_run=dry_run)
            if options.optimize and not dry_run and out.error is None:
                table = DeltaTable(uri)
                out.optimize = table.optimize.compact(target_size=options.target_file_bytes,
                                                      commit_properties=_guard(table))
            if options.vacuum_hours is not None and out.error is None:
                table = DeltaTable(uri)
                out.vacuumed = len(table.vacuum(retention_hours=options.vacuum_hours, dry_run=dry_run,
                                                enforce_retention_duration=False, full=True))
        except (LakeError, OSError, Exception) as exc:  # one table's failure must not stop the others
            out = TableOutcome(uri, error=f"table {uri}: {type(exc).__name__}: {exc}")
            log.error("%s", out.error)
        outcomes.append(out)
    return outcomes
