"""What each lake job run did, kept where Prometheus and the console can read it after the job is gone.

The Spark jobs (ingest, backfill, compaction, retention) live for seconds to minutes, so nothing can
scrape them while they run. Each run leaves its figures in node_exporter's textfile collector
convention (docs/PIPELINE-METRICS.md says why):

- `<root>/metrics/<operation>-<table>.prom`: the last run of that operation on that table (for the
  log jobs: on that set of topics), `topiclake_pipeline_*` gauges in Prometheus' text format,
  replaced atomically (segments.atomic), so a scrape sees the previous run or this one, never half;
- `<root>/metrics/runs.jsonl`: one JSON line per run and table, appended, for plots over time
  (`pipeline_runs(root)`: the console's reader).

On an object-store root the same keys under its prefix (run_files.py: whole objects, lines added
with conditional puts).

A run that fails records its failure too (`recording` wraps each job; lake.jobs.command records what
fails before the job starts). Writing the metrics never fails a run: a problem is a warning.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from .run_files import METRICS_DIR, run_files

log = logging.getLogger(__name__)

HISTORY_FILE = "runs.jsonl"
TEXTFILE_SUFFIX = ".prom"
HISTORY_MAX_BYTES = 16 << 20  # then runs.jsonl becomes runs.jsonl.1 (one generation kept)
PREFIX = "topiclake_pipeline_"
QUALITY_RESULTS = ("pass", "fail", "none")
RUN_LABELS = ("operation", "table", "group")
ALL_TOPICS = "*"  # the `table` of a log job that ran over every topic
_RECORDED = "topiclake_run_recorded"  # set on an exception whose failure a run already recorded


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """The offsets a run covered in one topic-partition: [first, end)."""

    topic: str
    partition: int
    first: int
    end: int


@dataclass(slots=True)
class RunRecord:
    """One run of one operation on one table (or, for compaction and retention, one set of topics).

    rows: rows written to the table (ingest, backfill), records kept by compaction;
    files: Parquet files added (ingest, backfill), segments written (compaction) or deleted (retention);
    bytes: log bytes read (ingest, backfill, compaction) or deleted (retention)."""

    operation: str
    table: str
    group: str = ""
    run_id: str = ""
    success: bool = True
    end_time: float = 0.0  # seconds since the epoch
    duration_s: float = 0.0
    rows: int = 0
    files: int = 0
    bytes: int = 0
    quarantined: int = 0
    quality: str = "none"  # pass | fail | none (no suite ran: nothing new, or failed before it)
    offsets: list[OffsetRange] = field(default_factory=list)
    error: str | None = None

    def to_json(self) -> dict:
        out = asdict(self)
        out["offsets"] = [asdict(o) for o in self.offsets]
        return out

    @classmethod
    def from_json(cls, doc: dict) -> "RunRecord":
        return cls(**{**doc, "offsets": [OffsetRange(**o) for o in doc.get("offsets") or []]})


def topics_scope(topics: Sequence[str]) -> str:
    """The `table` of a log job (compaction, retention): the topics it was given, `*` for all."""
    return ",".join(sorted(topics)) if topics else ALL_TOPICS


def new_run_id() -> str:
    return uuid.uuid4().hex[:16]


def metrics_dir(root: Path) -> Path:
    return Path(root) / METRICS_DIR


def textfile_path(root: Path, operation: str, table: str) -> Path:
    """`<root>/metrics/<operation>-<table>.prom` of a directory root."""
    return metrics_dir(root) / textfile_name(operation, table)


def textfile_name(operation: str, table: str) -> str:
    """`<operation>-<table>.prom`; a table given as a path or URI is named by its last part, and
    characters a file name should not carry become `_`."""
    name = table.rstrip("/").rsplit("/", 1)[-1] or table
    return f"{operation}-{re.sub(r'[^A-Za-z0-9._,+*-]', '_', name)}{TEXTFILE_SUFFIX}"


def quality_result(report, failed_table: str | None = None, table: str | None = None) -> str:
    """pass/fail/none from a quality.QualityReport (None: no suite ran); `failed_table`: the
    table a QualityError named, which failed whatever its report says."""
    if failed_table is not None and failed_table == table:
        return "fail"
    if report is None:
        return "none"
    return "pass" if report.success else "fail"


def failed_quality_table(exc: BaseException | None) -> str | None:
    report = getattr(exc, "report", None)
    return getattr(report, "table", None)


# ------------------------------------------------------------------------------------- the textfile

def _families(record: RunRecord, last_success: float | None) -> list:
    from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily

    labels = [record.operation, record.table, record.group]

    def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(PREFIX + name, doc, labels=RUN_LABELS)
        family.add_metric(labels, value)
        return family

    quality = GaugeMetricFamily(PREFIX + "last_run_quality", "Quality gate of the last run: 1 for its result "
                                "(pass, fail, or none when no suite ran).", labels=(*RUN_LABELS, "result"))
    for result in QUALITY_RESULTS:
        quality.add_metric([*labels, result], 1 if record.quality == result else 0)
    first = GaugeMetricFamily(PREFIX + "last_run_offset_first", "First offset the last run covered.",
                              labels=(*RUN_LABELS, "topic", "partition"))
    end = GaugeMetricFamily(PREFIX + "last_run_offset_end", "Offset after the last one the last run covered "
                            "(the group's next offset after an ingest).", labels=(*RUN_LABELS, "topic", "partition"))
    for r in record.offsets:
        first.add_metric([*labels, r.topic, str(r.partition)], r.first)
        end.add_metric([*labels, r.topic, str(r.partition)], r.end)
    info = InfoMetricFamily(PREFIX + "last_run", "The last run's id.", labels=RUN_LABELS)
    info.add_metric(labels, {"run_id": record.run_id})
    families = [
        gauge("last_run_timestamp_seconds", "When the last run ended (Unix time).", record.end_time),
        gauge("last_run_success", "1 if the last run succeeded, 0 if it failed.", 1 if record.success else 0),
        gauge("last_run_duration_seconds", "Wall time of the last run.", record.duration_s),
        gauge("last_run_rows", "Rows the last run wrote (compaction: records kept).", record.rows),
        gauge("last_run_files", "Files the last run added (compaction: segments written; retention: deleted).",
              record.files),
        gauge("last_run_bytes", "Log bytes the last run read (retention: deleted).", record.bytes),
        gauge("last_run_quarantined_rows", "Rows the last run sent to the quarantine table.", record.quarantined),
        quality, first, end, info,
    ]
    if last_success is not None:
        families.append(gauge("last_success_timestamp_seconds", "When the last successful run ended (Unix time).",
                              last_success))
    return families


def render_textfile(record: RunRecord, last_success: float | None) -> bytes:
    from prometheus_client.exposition import generate_latest

    return generate_latest(_Families(_families(record, last_success)))


class _Families:
    """A prometheus_client collector registry of fixed families (what generate_latest takes)."""

    def __init__(self, families: Iterable):
        self._families = list(families)

    def collect(self):
        return iter(self._families)


def _previous_success(files, name: str) -> float | None:
    """The last successful run's end time, from the textfile this run replaces."""
    text = files.read(name)
    if text is None:
        return None
    for family in parse_families(text, source=f"{files}/{name}"):
        if family.name == PREFIX + "last_success_timestamp_seconds" and family.samples:
            return family.samples[0].value
    return None


def parse_families(text: str, *, source: str) -> list:
    """The metric families of a Prometheus text; [] (with a warning) when it does not parse."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        return list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError) as exc:
        log.warning("ignoring %s: not Prometheus text (%s)", source, exc)
        return []


# --------------------------------------------------------------------------------------- recording

def record_run(root, record: RunRecord) -> str:
    """Write the run's textfile (atomically) and append it to the run history; where it went.
    `root`: a directory, or an object-store root (S3Root)."""
    files = run_files(root)
    name = textfile_name(record.operation, record.table)
    last_success = record.end_time if record.success else _previous_success(files, name)
    files.replace(name, render_textfile(record, last_success))
    line = (json.dumps(record.to_json(), sort_keys=True, separators=(",", ":")) + "\n").encode()
    files.append(HISTORY_FILE, line, HISTORY_MAX_BYTES)
    return f"{files}/{name}"


def record_quietly(root, records: Sequence[RunRecord]) -> None:
    """Record, but never let the metrics fail (or hide the error of) the run itself."""
    if root is None:
        return
    for record in records:
        try:
            record_run(root, record)
        except Exception as exc:  # noqa: BLE001 - the run's own outcome matters more than its metrics
            log.warning("could not record the %s run of %s in %s: %s", record.operation, record.table,
                        run_files(root), exc)


@contextmanager
def recording(root, records_of: Callable[[BaseException | None], Sequence[RunRecord]]) -> Iterator[None]:
    """Record the run around the block: `records_of(None)` once it succeeded, `records_of(exc)`
    when it raised (the exception goes on, marked as recorded for lake.jobs.command)."""
    try:
        yield
    except BaseException as exc:
        records = _safely(records_of, exc)
        record_quietly(root, records)
        if records:
            mark_recorded(exc)
        raise
    record_quietly(root, _safely(records_of, None))


def _safely(records_of, exc) -> Sequence[RunRecord]:
    try:
        return records_of(exc)
    except Exception as error:  # noqa: BLE001 - a partial result that cannot be described is not recorded
        log.warning("could not describe the run for its metrics: %s", error)
        return []


def mark_recorded(exc: BaseException) -> None:
    try:
        setattr(exc, _RECORDED, True)
    except AttributeError:  # an exception type with __slots__
        pass


def was_recorded(exc: BaseException) -> bool:
    return bool(getattr(exc, _RECORDED, False))


def failure(operation: str, table: str, group: str, exc: BaseException, *, run_id: str | None = None,
            started: float | None = None, offsets: Sequence[OffsetRange] = (), quality: str = "none") -> RunRecord:
    """A failed run's record (nothing it did counts: a failed lake job commits nothing)."""
    now = time.time()
    return RunRecord(operation=operation, table=table, group=group, run_id=run_id or new_run_id(), success=False,
                     end_time=now, duration_s=max(0.0, now - started) if started is not None else 0.0,
                     quality=quality, offsets=list(offsets), error=_one_line(exc))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


# ----------------------------------------------------------------------------------------- reading

def pipeline_runs(root, *, operation: str | None = None, table: str | None = None,
                  limit: int | None = None) -> list[RunRecord]:
    """The recorded runs, oldest first (the rotated generation, then the current file): the
    console's throughput plots. Lines that do not parse (a torn last line) are skipped."""
    files = run_files(root)
    runs: list[RunRecord] = []
    for name in (HISTORY_FILE + ".1", HISTORY_FILE):
        for line in (files.read(name) or "").splitlines():
            try:
                run = RunRecord.from_json(json.loads(line))
            except (ValueError, TypeError):
                continue
            if (operation is None or run.operation == operation) and (table is None or run.table == table):
                runs.append(run)
    return runs[-limit:] if limit else runs


def last_run_families(root) -> list:
    """Every textfile's families merged by name (node_exporter's textfile collector does the
    same): one HELP/TYPE per family, as the text format requires. Temporary files of a write in
    progress (their names start with a dot) are left out."""
    merged: dict[str, object] = {}
    files = run_files(root)
    for name in files.names(TEXTFILE_SUFFIX):
        text = files.read(name)
        if text is None:  # removed between the listing and the read
            log.warning("skipping %s/%s: gone", files, name)
            continue
        for family in parse_families(text, source=f"{files}/{name}"):
            if family.name in merged:
                merged[family.name].samples.extend(family.samples)
            else:
                merged[family.name] = family
    return list(merged.values())
