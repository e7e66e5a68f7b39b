"""The Delta tables of the root, read with delta-rs (`deltalake`): no Spark, no JVM.

Per table: its versions and history, rows, freshness (the newest commit), the topics that feed
it and, per ingest group, the offset ranges its commits read (topiclake's commitInfo `ranges`,
merged) next to the group's committed offset (the txn action), with the gaps between them: the
cheap part of `topiclake coverage` (which also explains gaps from the log, with Spark). And the
quality results stored under <root>/quality/results for the table's suite. The root: a directory
or a bucket (storage.py).
"""

from __future__ import annotations

import datetime
import json
import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from topiclake.lake.table import delta

from .storage import BucketRoot, DirectoryRoot

QUARANTINE_SUFFIX = "_quarantine"
HISTORY_SHOWN = 50


@dataclass
class PartitionRanges:
    topic: str
    partition: int
    committed: int | None  # the group's next offset (txn version)
    ranges: list[tuple[int, int]]  # [start, end) read by the group's commits, merged

    @property
    def gaps(self) -> list[tuple[int, int]]:
        """Offsets between the first range and the committed offset that no commit read."""
        out, at = [], self.ranges[0][0] if self.ranges else None
        for start, end in self.ranges:
            if at is not None and start > at:
                out.append((at, start))
            at = max(at or end, end)
        if at is not None and self.committed is not None and self.committed > at:
            out.append((at, self.committed))
        return out


@dataclass
class TableSummary:
    name: str
    path: str  # the table's directory or s3:// location
    version: int = -1
    rows: int | None = None
    last_commit_ms: int | None = None
    topics: set[str] = field(default_factory=set)
    error: str | None = None

    @property
    def freshness_s(self) -> float | None:
        return None if self.last_commit_ms is None else max(time.time() - self.last_commit_ms / 1000, 0)


@dataclass
class TableDetail:
    summary: TableSummary
    history: list[dict]
    groups: dict[str, list[PartitionRanges]]
    columns: list[tuple[str, str]]
    quality: list[dict]


def _history(table, limit: int | None) -> list[dict]:
    return sorted(table.history(limit), key=lambda c: c.get("version", -1), reverse=True)


def _topics_of(history: list[dict]) -> set[str]:
    return {key.rpartition(":")[0] for c in history for key in (delta.topiclake_info(c).get("ranges") or {})}


def summary(root: DirectoryRoot | BucketRoot, name: str) -> TableSummary:
    from deltalake.exceptions import DeltaError

    out = TableSummary(name, root.table_uri(name))
    try:
        table = delta.open_table(out.path)
        out.version = table.version()
        topics, out.last_commit_ms, out.rows = _facts(table)
        out.topics = set(topics)
    except (DeltaError, OSError, ValueError) as exc:
        out.error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return out


_FACTS: dict[tuple[str, int], tuple[frozenset[str], int | None, int]] = {}
_FACTS_KEPT = 512


def _facts(table) -> tuple[frozenset[str], int | None, int]:
    """(topics, newest commit time, rows) of the table's current version, read once per version:
    the topics need the whole history, which a long-lived table makes long. (The latest version
    only: delta-rs's history of a time-travelled table mislabels versions.)"""
    key = (table.table_uri, table.version())
    if key not in _FACTS:
        history = _history(table, None)
        if len(_FACTS) >= _FACTS_KEPT:
            _FACTS.pop(next(iter(_FACTS)))
        _FACTS[key] = (frozenset(_topics_of(history)), history[0].get("timestamp") if history else None,
                       row_count(table))
    return _FACTS[key]


def row_count(table) -> int:
    """Rows of the table's current version: the sum of its files' record counts (Delta's stats),
    else the Parquet footers."""
    actions = table.get_add_actions(flatten=True)
    if "num_records" in actions.column_names and actions.column("num_records").null_count == 0:
        return int(sum(actions.column("num_records").to_pylist()))
    return table.to_pyarrow_dataset().count_rows()


def detail(root: DirectoryRoot | BucketRoot, name: str) -> TableDetail:
    table_summary = summary(root, name)
    if table_summary.error is not None:
        return TableDetail(table_summary, [], {}, [], [])
    table = delta.open_table(table_summary.path)
    history = _history(table, None)
    shown = []
    for commit in history[:HISTORY_SHOWN]:
        info = delta.topiclake_info(commit)
        metrics = commit.get("operationMetrics") or {}
        shown.append({"version": commit.get("version"), "when": iso(commit.get("timestamp")),
                      "operation": info.get("operation") or commit.get("operation"), "group": info.get("group"),
                      "run_id": info.get("run_id"), "ranges": info.get("ranges") or {},
                      "files": (metrics.get("num_added_files") or metrics.get("numFiles")
                                or metrics.get("numAddedFiles"))})
    import pyarrow as pa

    columns = [(f.name, str(f.type)) for f in pa.schema(table.schema().to_arrow())]
    return TableDetail(table_summary, shown, committed_ranges(table, history), columns,
                       quality_results(root, name))


def committed_ranges(table, history: list[dict]) -> dict[str, list[PartitionRanges]]:
    """Per group: every partition its commits read, the merged ranges and its committed offset."""
    read: dict[str, dict[tuple[str, int], list[tuple[int, int]]]] = {}
    for commit in history:
        info = delta.topiclake_info(commit)
        group = info.get("group")
        if not group:
            continue
        for key, (start, end) in (info.get("ranges") or {}).items():
            topic, _, partition = key.rpartition(":")
            read.setdefault(group, {}).setdefault((topic, int(partition)), []).append((int(start), int(end)))
    out = {}
    for group, partitions in sorted(read.items()):
        out[group] = [PartitionRanges(topic, partition,
                                      table.transaction_version(delta.app_id(group, topic, partition)),
                                      _merged(spans))
                      for (topic, partition), spans in sorted(partitions.items())]
    return out


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def quality_results(root: DirectoryRoot | BucketRoot, table: str, limit: int = 20) -> list[dict]:
    """The newest stored validations of the table's suite: when, success, expectations passed,
    and the Data Docs page of it when the site has been built (a directory root's only)."""
    site = root.quality_site()
    found = []
    for relative, text in root.quality_results():
        if ".".join(relative.parts[:-3]) != table:  # the suite is the table's name, its dots as directories
            continue
        try:
            outcome = json.loads(text)
        except ValueError:
            continue
        checks = outcome.get("results") or []
        page = site / "validations" / relative.with_suffix(".html") if site is not None else None
        found.append({"run": relative.parts[-3], "when": _result_time(relative.parts[-2]),
                      "success": outcome.get("success"),
                      "passed": sum(1 for r in checks if r.get("success")), "total": len(checks),
                      "failed": [r.get("expectation_config", {}).get("type") for r in checks if not r.get("success")],
                      "page": f"/quality/validations/{relative.with_suffix('.html').as_posix()}"
                      if page is not None and page.is_file() else None})
    return sorted(found, key=lambda r: r["when"], reverse=True)[:limit]


DATA_DOCS_ASSETS = ("static/",)


def data_docs_suite(relative: PurePosixPath) -> str | None:
    """The suite (= table) a Data Docs page is about, from its path in the site:
    validations/<suite dirs>/<run>/<time>/<batch>.html or expectations/<suite dirs>.html."""
    parts = relative.with_suffix("").parts
    if len(parts) > 4 and parts[0] == "validations":
        return ".".join(parts[1:-3])
    if len(parts) > 1 and parts[0] == "expectations":
        return ".".join(parts[1:])
    return None


def is_data_docs_asset(relative: str) -> bool:
    return relative.startswith(DATA_DOCS_ASSETS)


def _result_time(text: str) -> str:
    """great-expectations' run time directory name (20240501T120000.123456Z), readable."""
    try:
        parsed = datetime.datetime.strptime(text, "%Y%m%dT%H%M%S.%fZ")
    except ValueError:
        return text
    return parsed.strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit} ago"
    return f"{seconds:.0f} s ago"
