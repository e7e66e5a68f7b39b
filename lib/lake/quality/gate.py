"""The data-quality gate: a great-expectations suite per table, run by every ingest and backfill on
the rows it is about to commit, BEFORE the commit. A failing suite stops the run: nothing is
committed (the files are orphans for vacuum) and the group's offsets do not move.

Where the suite runs. Most expectations judge each row on its own (not null, in a set, between,
a regex...), and the one that does not, uniqueness, is keyed by (topic, partition, offset), which
the plan splits into disjoint tasks. So those run inside the executors, on each task's rows while
they are still in memory — judged with Arrow compute exactly as great-expectations' pandas engine
judges them (expectations.py; what it does not cover goes through great-expectations itself) —
and the driver merges the per-task results into great-expectations results (counts add up,
samples are concatenated): no second read of the data, no shuffle, no pandas in the tasks. The
executor adds one column, `offset_in_committed_range`: true when the row's offset lies in its
task's range, which is inside the range this run commits for the partition. Rows in their task's
range and unique within the task are unique across the run; every offset the table already holds
is below the run's start, so "each offset once" holds for the table.

Every other expectation (aggregates such as row counts or means, uniqueness of other columns, a
`mostly` below 1, a row_condition) runs on the driver with great-expectations' Spark engine over
the run's new Parquet files, read back: a few Spark jobs over the new rows only. The driver also
checks that the files it is about to commit hold exactly the rows the tasks validated.

Suites: `conf/expectations/<table>.json`, great-expectations' own suite JSON
(`{"expectations": [{"type": "expect_...", "kwargs": {...}}, ...]}`); without a file the
DEFAULT_SUITE below. Every run stores its validation result as great-expectations' results store
keeps it (`<root>/quality/results/<table>/<operation>-<run>/<time>/new-files.json`, a dot of the
table name as a directory, as great-expectations files it); the report is great-expectations' Data
Docs site built from those results under `<root>/quality/` (an index page plus one page per
validation; on a bucket too, bucket_docs.py), by `topiclake data-docs`, by a run given --data-docs,
and by any run whose suite fails or needs great-expectations on the driver. A run of row-local
expectations never loads great-expectations (or pandas): on 2 cores that import alone costs about
as much as the rest of a small run's driver.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import re
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import LakeError
from . import expectations as arrow_expectations

log = logging.getLogger(__name__)

IN_RANGE = "offset_in_committed_range"
SITE = "topiclake"
RESULT_FORMAT = "SUMMARY"
INDEXED_VALIDATIONS = 100  # newest validations linked from <root>/quality/index.html
_SAMPLE = 20  # unexpected values kept per expectation, as great-expectations' SUMMARY keeps

#: The contract every table keeps unless its own suite says otherwise.
DEFAULT_SUITE: dict = {"expectations": [
    {"type": "expect_compound_columns_to_be_unique", "kwargs": {"column_list": ["topic", "partition", "offset"]}},
    {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "offset"}},
    {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "partition"}},
    {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "timestamp"}},
    {"type": "expect_column_values_to_be_in_set", "kwargs": {"column": IN_RANGE, "value_set": [True]}},
]}

#: Expectations that judge every row by itself: run per task, their counts add up.
ROW_LOCAL = frozenset({
    "expect_column_values_to_not_be_null", "expect_column_values_to_be_null",
    "expect_column_values_to_be_in_set", "expect_column_values_to_not_be_in_set",
    "expect_column_values_to_be_between",
    "expect_column_values_to_match_regex", "expect_column_values_to_not_match_regex",
    "expect_column_values_to_match_regex_list", "expect_column_values_to_not_match_regex_list",
    "expect_column_value_lengths_to_be_between", "expect_column_value_lengths_to_equal",
    "expect_column_pair_values_to_be_equal", "expect_column_pair_values_a_to_be_greater_than_b",
    "expect_column_pair_values_to_be_in_set", "expect_multicolumn_sum_to_equal",
    "expect_select_column_values_to_be_unique_within_record",
})
#: Uniqueness expectations and their column argument: per task when keyed by the offset.
UNIQUENESS = {"expect_compound_columns_to_be_unique": "column_list",
              "expect_multicolumn_values_to_be_unique": "column_list",
              "expect_column_values_to_be_unique": "column"}
OFFSET_KEY = frozenset({"topic", "partition", "offset"})

_POSITION = "topiclake_position"  # meta key: an expectation's place in its suite

_GLOB = re.compile(r"([*?\[\]{}\\])")


class QualityError(LakeError):
    """A suite failed: the run committed nothing."""

    def __init__(self, report: "QualityReport"):
        super().__init__(report.table)
        self.report = report

    def __str__(self) -> str:  # when shown: a bucket's page is built after the raise (bucket_docs.once_per_run)
        report = self.report
        return (f"data quality check failed for table {report.table} ({report.operation} run {report.run_id}); "
                f"nothing was committed. Failed: {'; '.join(report.failures)}. Report: {report.path or report.results}")


@dataclass(slots=True)
class QualityReport:
    table: str
    operation: str
    run_id: str
    success: bool
    evaluated: int
    path: str | None  # the Data Docs page of this validation, when this run built it
    results: str | None  # the stored validation result (JSON, great-expectations' format); None: not stored
    suite_source: str  # the suite file, or "default"
    failures: list[str] = field(default_factory=list)
    site_due: ResultKey | None = None  # a bucket's page to build once per job run (bucket_docs.once_per_run)

    def describe(self, *, quarantined: int = 0) -> str:
        """One line; a run that sent records to quarantine says so rather than "passed": the suite
        judged only the records the table takes."""
        later = "built once every table is checked" if self.site_due else "topiclake data-docs"
        where = self.path or (f"{self.results} (Data Docs: {later})" if self.results else "result not stored")
        if quarantined and self.success:
            return (f"quality: {quarantined} record{'s' if quarantined != 1 else ''} quarantined to "
                    f"{self.table}_quarantine (its error column says why); the other records met the "
                    f"{self.evaluated} expectations of suite {self.suite_source}: {where}")
        state = "passed" if self.success else "FAILED"
        return f"quality {state} ({self.evaluated} expectations, suite {self.suite_source}): {where}"


@dataclass(frozen=True, slots=True)
class Suite:
    """A table's suite, split into what each task runs on its rows and what the driver runs."""

    expectations: tuple[dict, ...]
    source: str  # the suite file, or "default"

    @classmethod
    def load(cls, expectations_dir: Path | None, table: str) -> "Suite":
        doc, source = load_suite(expectations_dir, table)
        return cls(tuple(doc["expectations"]), source)

    @property
    def per_task(self) -> list[int]:
        return [i for i, e in enumerate(self.expectations) if runs_per_task(e)]

    @property
    def on_driver(self) -> list[int]:
        return [i for i, e in enumerate(self.expectations) if not runs_per_task(e)]

    def task_document(self) -> str | None:
        """What the executors get (JSON), None when every expectation runs on the driver."""
        chosen = [self.expectations[i] for i in self.per_task]
        return json.dumps({"expectations": chosen}) if chosen else None


def runs_per_task(expectation: dict) -> bool:
    kwargs = expectation.get("kwargs", {})
    if kwargs.get("row_condition") or kwargs.get("mostly", 1) != 1:
        return False  # a filter written for one engine; a tolerance that only the total can judge
    kind = expectation.get("type")
    if kind in UNIQUENESS:
        columns = kwargs.get(UNIQUENESS[kind])
        columns = {columns} if isinstance(columns, str) else set(columns or ())
        return OFFSET_KEY <= columns
    return kind in ROW_LOCAL


def quality_dir(root: Path) -> Path:
    return Path(root).resolve() / "quality"


def load_suite(expectations_dir: Path | None, table: str) -> tuple[dict, str]:
    """(suite document, where it came from)."""
    if expectations_dir is not None:
        path = Path(expectations_dir) / f"{table}.json"
        if path.is_file():
            try:
                doc = json.loads(path.read_text())
            except ValueError as exc:
                raise LakeError(f"expectation suite {path}: not JSON: {exc}") from None
            if not isinstance(doc, dict) or not isinstance(doc.get("expectations"), list) or \
                    not all(isinstance(e, dict) for e in doc["expectations"]):
                raise LakeError(f"expectation suite {path}: expected an object with an \"expectations\" list")
            return doc, str(path)
    return DEFAULT_SUITE, "default"


# -- executor side ------------------------------------------------------------------------------

def validate_rows(rows: pa.Table, task_document: str, *, table: str, min_offset: int, max_offset: int) -> str:
    """Run the per-task expectations on one task's rows; the outcome as JSON for the driver:
    {"rows": n, "results": [great-expectations result dicts, in the document's order]}.

    Arrow compute judges what expectations.py supports; only the rest loads great-expectations
    (and pandas) into the executor."""
    expectations = json.loads(task_document)["expectations"]
    if rows.num_rows == 0:
        return json.dumps({"rows": 0, "results": None})
    offsets = rows.column("offset")
    in_range = pc.and_(pc.greater_equal(offsets, min_offset), pc.less_equal(offsets, max_offset))
    frame = rows.append_column(IN_RANGE, pc.fill_null(in_range, False))
    results: list[dict | None] = [None] * len(expectations)
    by_gx = []
    for i, expectation in enumerate(expectations):
        if arrow_expectations.supports(expectation, frame.schema):
            results[i] = arrow_expectations.evaluate(frame, expectation)
        else:
            by_gx.append(i)
    if by_gx:
        chosen = [expectations[i] for i in by_gx]
        for i, result in zip(by_gx, _validate_with_gx(frame, chosen, table=table)):
            results[i] = result
    return json.dumps({"rows": rows.num_rows, "results": results})


def _validate_with_gx(frame: pa.Table, expectations: list[dict], *, table: str) -> list[dict]:
    """great-expectations' pandas engine on the task's rows, results in `expectations`' order."""
    columns = _columns_used(expectations)
    frame = frame.select([c for c in frame.column_names if columns is None or c in columns])
    if "topic" in frame.column_names:  # one value per task: categorical, not a Python string per row
        frame = frame.set_column(frame.column_names.index("topic"), "topic", pc.dictionary_encode(frame["topic"]))
    result = _task_validator().validate(frame.to_pandas(), expectations, table=table)
    return [r.to_json_dict() for r in in_suite_order(result.results, len(expectations))]


class _TaskValidator:
    """One in-memory great-expectations context per executor process, reused by its tasks."""

    def __init__(self):
        gx = _import_gx()
        self._context = gx.get_context(mode="ephemeral", project_config=_project_config(None))
        self._batches = (self._context.data_sources.add_pandas(name="topiclake-task").add_dataframe_asset(name="rows")
                         .add_batch_definition_whole_dataframe("task"))

    def validate(self, frame, expectations: list[dict], *, table: str):
        batch = self._batches.get_batch(batch_parameters={"dataframe": frame})
        return batch.validate(_expectation_suite(table, expectations, "task suite"), result_format=RESULT_FORMAT)


_VALIDATOR: _TaskValidator | None = None


def _task_validator() -> _TaskValidator:
    global _VALIDATOR
    if _VALIDATOR is None:
        _VALIDATOR = _TaskValidator()
    return _VALIDATOR


# -- driver side --------------------------------------------------------------------------------

def validate(spark, *, suite: Suite, table_uri: str, table: str, files: Sequence[str], file_records: int,
             task_outcomes: Sequence[str], schema, ranges: Mapping[tuple[str, int], tuple[int, int]], root,
             operation: str, run_id: str, data_docs: bool = False) -> QualityReport | None:
    """Judge the run's new files (paths relative to the table, holding `file_records` rows)
    before they are committed, from the executors' per-task outcomes (validate_rows) and the
    driver-side expectations. Returns the report, None when there is nothing to validate; raises
    QualityError when the suite fails. `schema`: the table's, a pyarrow or a deltalake Schema.

    The validation result is stored, as great-expectations stores it, under `<root>/quality/results`
    (every run, pass or fail; on an object-store root the same keys). The Data Docs site is rebuilt
    from them when `data_docs`, when the suite fails, or (a directory) when great-expectations is loaded
    anyway for driver-side expectations (a bucket's once per job run: bucket_docs.once_per_run); else
    `topiclake data-docs` builds it (importing great-expectations costs 2 cores ~3 CPU-seconds)."""
    if not files:
        return None
    results: dict[int, dict] = {}
    extra_failures: list[str] = []
    per_task = suite.per_task
    if per_task:
        outcomes = [json.loads(o) for o in task_outcomes]
        validated = sum(o["rows"] for o in outcomes)
        if validated != file_records:  # a file nobody validated, or a validated row in no file
            extra_failures.append(f"the new files hold {file_records} rows, the tasks validated {validated}")
        for position, index in enumerate(per_task):
            results[index] = _merge(suite.expectations[index],
                                    [o["results"][position] for o in outcomes if o["results"] is not None])
    if suite.on_driver:
        with _no_doctest_exit():
            driver_result = _validate_frame(spark, suite, table=table, table_uri=table_uri, files=files, schema=schema,
                                            ranges=ranges)
        results.update(zip(suite.on_driver, (r.to_json_dict() for r in
                                             in_suite_order(driver_result.results, len(suite.on_driver)))))
    ordered = [results[i] for i in range(len(suite.expectations))]
    passed = sum(1 for r in ordered if r["success"])
    success = passed == len(ordered) and not extra_failures
    run_time = dt.datetime.now(dt.timezone.utc)
    run_name = f"{operation}-{run_id}"
    outcome = {
        "success": success, "results": ordered, "suite_name": table, "suite_parameters": {}, "id": None,
        "statistics": {"evaluated_expectations": len(ordered), "successful_expectations": passed,
                       "unsuccessful_expectations": len(ordered) - passed,
                       "success_percent": 100.0 * passed / len(ordered) if ordered else None},
        "meta": {"run_id": {"run_name": run_name, "run_time": run_time.isoformat()},
                 "validation_time": run_time.isoformat(), "batch_spec": {"data_asset_name": table}},
    }
    key = ResultKey(table, run_name, run_time)
    stored = store_result(outcome, key, root) if root is not None else None
    # A failure's page is built at once (the error points at it); on a directory, any run that loaded GX too.
    # A bucket's site is rebuilt whole: only when asked or on a failure, once per job run.
    wanted = data_docs or not success or (bool(suite.on_driver) and isinstance(root, Path))
    page = build_data_docs(root, key) if wanted and isinstance(root, Path) else None
    report = QualityReport(table=table, operation=operation, run_id=run_id, success=success, evaluated=len(ordered),
                           path=page, results=None if stored is None else str(stored), suite_source=suite.source,
                           failures=[_describe_failure(r) for r in ordered if not r["success"]] + extra_failures,
                           site_due=key if wanted and stored is not None and not isinstance(root, Path) else None)
    if not report.success:
        raise QualityError(report)
    log.info("table %s: %s", table, report.describe())
    return report


def _merge(expectation: dict, parts: list[dict]) -> dict:
    """One expectation's result over the run from its per-task results (an ExpectationValidationResult's JSON)."""
    totals = Counter()
    sample: list = []
    counts: Counter = Counter()
    exception = {"raised_exception": False, "exception_message": None, "exception_traceback": None}
    for part in parts:
        result = part.get("result") or {}
        for key in ("element_count", "missing_count", "unexpected_count"):
            totals[key] += result.get(key) or 0
        sample.extend(result.get("partial_unexpected_list") or [])
        for entry in result.get("partial_unexpected_counts") or []:
            counts[json.dumps(entry["value"], sort_keys=True)] += entry["count"]
        info = part.get("exception_info") or {}
        if _exception_messages(info) and not exception["raised_exception"]:
            exception = {"raised_exception": True, "exception_message": "; ".join(_exception_messages(info)),
                         "exception_traceback": None}
    elements, missing, unexpected = totals["element_count"], totals["missing_count"], totals["unexpected_count"]
    present = elements - missing
    merged = {"element_count": elements, "missing_count": missing, "unexpected_count": unexpected,
              "missing_percent": 100.0 * missing / elements if elements else None,
              "unexpected_percent": 100.0 * unexpected / present if present else None,
              "unexpected_percent_total": 100.0 * unexpected / elements if elements else None,
              "unexpected_percent_nonmissing": 100.0 * unexpected / present if present else None,
              "partial_unexpected_list": sample[:_SAMPLE],
              "partial_unexpected_counts": [{"value": json.loads(v), "count": c}
                                            for v, c in counts.most_common(_SAMPLE)]}
    config = {"type": expectation["type"], "kwargs": expectation.get("kwargs", {}),
              "meta": expectation.get("meta") or {}}
    return {"success": all(p.get("success") for p in parts), "expectation_config": config, "result": merged,
            "exception_info": exception, "meta": {}}


@dataclass(frozen=True, slots=True)
class ResultKey:
    """Where great-expectations files a validation result: suite, run name, run time, batch."""

    suite: str
    run_name: str
    run_time: dt.datetime
    batch: str = "new-files"

    @property
    def parts(self) -> tuple[str, ...]:
        # great-expectations files a suite name's dots as directories ("shop.orders" -> shop/orders)
        # and finds a result only there.
        return (*self.suite.split("."), self.run_name, self.run_time.strftime("%Y%m%dT%H%M%S.%fZ"), self.batch)


def store_result(outcome: dict, key: ResultKey, root) -> Path | str:
    """The validation result as great-expectations' results store (TupleFilesystemStoreBackend)
    keeps it, written atomically: Data Docs are built from these files at any later time. On an
    object-store root (an S3Root) the same key under its prefix, created once (If-None-Match)."""
    data = json.dumps(outcome, indent=2, sort_keys=True, default=str)
    if not isinstance(root, (str, Path)):
        from topiclake.store.objects import CREATE, ObjectStore

        parts = ("quality", "results", *key.parts[:-1], key.parts[-1] + ".json")
        ObjectStore(root).put("/".join(parts), data.encode(), mode=CREATE)
        return root.uri(*parts)
    path = quality_dir(Path(root)).joinpath("results", *key.parts).with_suffix(".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(data)
    os.replace(partial, path)
    return path


def build_data_docs(root: Path, key: ResultKey | None = None) -> str | None:
    """Rebuild the Data Docs site under <root>/quality from the stored results (great-expectations'
    SiteBuilder). Returns the page of `key`'s validation, or the site's index."""
    gx = _import_gx()  # the package first: its submodules import each other in a fixed order
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (ExpectationSuiteIdentifier,
                                                                           ValidationResultIdentifier)

    site_dir = quality_dir(root)
    with _no_doctest_exit():
        context = gx.get_context(mode="ephemeral", project_config=_project_config(site_dir))
    if key is None:
        context.build_data_docs(site_names=[SITE])
        index = site_dir / "index.html"
        return str(index) if index.is_file() else None
    identifier = ValidationResultIdentifier(
        expectation_suite_identifier=ExpectationSuiteIdentifier(name=key.suite),
        run_id=RunIdentifier(run_name=key.run_name, run_time=key.run_time), batch_identifier=key.batch)
    context.build_data_docs(site_names=[SITE], resource_identifiers=[identifier])
    urls = context.get_docs_sites_urls(resource_identifier=identifier, site_name=SITE)
    return _as_path(urls[0]["site_url"]) if urls else None


def _validate_frame(spark, suite: Suite, *, table: str, table_uri: str, files: Sequence[str], schema,
                    ranges: Mapping[tuple[str, int], tuple[int, int]]):
    """The driver-side expectations, with great-expectations' Spark engine over the new files."""
    expectations = [suite.expectations[i] for i in suite.on_driver]
    frame = _frame(spark, table_uri, files, schema, ranges)
    columns = _columns_used(expectations)
    if columns is not None:  # only what the suite reads, cached once for its many metric jobs
        frame = frame.select(*[c for c in frame.columns if c in columns])
    frame = frame.persist()
    try:
        gx = _import_gx()
        context = gx.get_context(mode="ephemeral", project_config=_project_config(None))
        batch = (context.data_sources.add_spark(name="topiclake").add_dataframe_asset(name=table)
                 .add_batch_definition_whole_dataframe("new-files").get_batch(batch_parameters={"dataframe": frame}))
        return batch.validate(_expectation_suite(table, expectations, suite.source), result_format=RESULT_FORMAT)
    finally:
        frame.unpersist()


def _import_gx():
    if _loader is not None and _loader is not threading.current_thread():
        _loader.join()
    # No usage statistics: jobs run on machines without internet, and a data pipeline phones no one.
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    with _no_doctest_exit():
        import great_expectations as gx

    return gx


_loader: threading.Thread | None = None


def load_in_background() -> None:
    """Start importing great-expectations (and pandas under it: seconds) now, in a thread, while
    the SparkSession starts and the tasks run: the driver needs it only once they are done, to
    merge the tasks' results and publish Data Docs. Call it after pyspark is imported."""
    global _loader
    if _loader is None and "great_expectations" not in sys.modules:
        _loader = threading.Thread(target=_import_quietly, name="topiclake-load-great-expectations", daemon=True)
        _loader.start()


def _import_quietly() -> None:
    try:
        _import_gx()
    except BaseException as exc:  # noqa: BLE001 - the import is tried again, and reported, where it is needed
        log.debug("loading great-expectations in the background failed: %s", exc)


def _project_config(site_dir: Path | None):
    """In memory, except, when publishing, the Data Docs site under `site_dir` and the validation
    results it indexes (`site_dir/results`, one JSON per validation, so index.html lists the
    latest INDEXED_VALIDATIONS runs of every table, not only this one)."""
    from great_expectations.data_context.types.base import (DataContextConfig, InMemoryStoreBackendDefaults,
                                                            ProgressBarsConfig)

    defaults = InMemoryStoreBackendDefaults(init_temp_docs_sites=False)
    sites = {}
    if site_dir is not None:
        defaults.stores[defaults.validation_results_store_name]["store_backend"] = {
            "class_name": "TupleFilesystemStoreBackend", "base_directory": str(site_dir / "results")}
        sites = {SITE: {
            "class_name": "SiteBuilder", "show_how_to_buttons": False,
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(site_dir)},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder",
                                   "validation_results_limit": INDEXED_VALIDATIONS}}}
    return DataContextConfig(store_backend_defaults=defaults, progress_bars=ProgressBarsConfig(globally=False),
                             data_docs_sites=sites)


def _expectation_suite(table: str, expectations: Sequence[dict], source: str):
    from great_expectations.core.expectation_suite import ExpectationSuite
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    try:
        domain = [ExpectationConfiguration(type=e["type"], kwargs=e.get("kwargs", {}),
                                           meta={**(e.get("meta") or {}), _POSITION: i}).to_domain_obj()
                  for i, e in enumerate(expectations)]
    except Exception as exc:  # noqa: BLE001  (GE raises many kinds for a bad expectation)
        raise LakeError(f"expectation suite {source} for table {table}: {exc}") from None
    return ExpectationSuite(name=table, expectations=domain)


def in_suite_order(results, count: int) -> list:
    """great-expectations returns a suite's results in an order of its own (grouped by metric),
    not the suite's: put them back by the position each expectation carries in its meta."""
    ordered = [None] * count
    for result in results:
        meta = result.expectation_config.meta or {}
        ordered[meta.pop(_POSITION)] = result
    if any(r is None for r in ordered):
        raise LakeError(f"great-expectations returned {len(results)} results for {count} expectations")
    return ordered


def check_suite(suite: Suite, table: str) -> None:
    """Fail before any work when an expectation is unknown or malformed. What the tasks judge with
    Arrow (expectations.supports) needs no great-expectations for that."""
    if all(arrow_expectations.supports(e) for e in suite.expectations):
        return
    _import_gx()
    _expectation_suite(table, suite.expectations, suite.source)


def _columns_used(expectations: Sequence[dict]) -> set[str] | None:
    """The columns the expectations name; None (all columns) when one of them filters rows
    (row_condition) or names columns in a way not listed here."""
    used: set[str] = set()
    for e in expectations:
        kwargs = e.get("kwargs", {})
        if kwargs.get("row_condition"):
            return None
        for key, value in kwargs.items():
            if key in ("column", "column_A", "column_B"):
                used.add(value)
            elif key in ("column_list", "column_set"):
                used.update(value)
        if not ({"column", "column_A", "column_list", "column_set"} & kwargs.keys()) and \
                not e["type"].startswith("expect_table_row_count"):
            return None  # a table-level expectation over all columns (e.g. column order)
    return used


@contextlib.contextmanager
def _no_doctest_exit():
    """great-expectations imports pyspark.sql.connect, whose dependency check takes a `__main__`
    without `__file__` (python -c, an embedded interpreter) for a doctest run and calls
    sys.exit(0) when grpc is incomplete: the job would stop, status 0, without committing. An
    interactive marker (sys.ps1) for the duration of the validation stops it from guessing so."""
    main = sys.modules.get("__main__")
    guess = main is not None and getattr(main, "__spec__", None) is None and not hasattr(main, "__file__")
    if not guess or hasattr(sys, "ps1"):
        yield
        return
    sys.ps1 = ""
    try:
        yield
    finally:
        del sys.ps1


def _frame(spark, table_uri: str, files: Sequence[str], schema,
           ranges: Mapping[tuple[str, int], tuple[int, int]]):
    from deltalake import Schema as DeltaSchema
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    # Delta's schema JSON is Spark's StructType JSON: the files are read with the table's types.
    delta_schema = DeltaSchema.from_arrow(schema) if isinstance(schema, pa.Schema) else schema
    struct = StructType.fromJson(json.loads(delta_schema.to_json()))
    paths = [_GLOB.sub(r"\\\1", f"{table_uri.rstrip('/')}/{f}") for f in files]
    frame = spark.read.schema(struct).option("basePath", table_uri).parquet(*paths)
    bounds = spark.createDataFrame([(t, p, lo, hi) for (t, p), (lo, hi) in ranges.items()],
                                   "topic STRING, partition INT, range_start BIGINT, range_end BIGINT")
    in_range = (F.col("offset") >= F.col("range_start")) & (F.col("offset") < F.col("range_end"))
    return (frame.join(F.broadcast(bounds), ["topic", "partition"], "left")
            .withColumn(IN_RANGE, F.coalesce(in_range, F.lit(False)))
            .drop("range_start", "range_end"))


def _describe_failure(r: dict) -> str:
    """One failed expectation (great-expectations' result JSON) in a line."""
    config = r["expectation_config"]
    kwargs = {k: v for k, v in config["kwargs"].items() if k != "batch_id"}
    res = r.get("result") or {}
    detail = ""
    if "unexpected_count" in res:
        detail = f": {res['unexpected_count']} unexpected rows"
        sample = res.get("partial_unexpected_list") or []
        if sample:
            detail += f", e.g. {sample[:3]}"
    messages = _exception_messages(r.get("exception_info"))
    if messages:
        detail += f" (error: {messages[0]})"
    return f"{config['type']}({', '.join(f'{k}={v}' for k, v in kwargs.items())}){detail}"


def _exception_messages(info) -> list[str]:
    """GE reports errors flat ({raised_exception, exception_message}) or per metric {id: {...}}."""
    if not isinstance(info, dict):
        return []
    if "raised_exception" in info:
        return [str(info.get("exception_message"))] if info.get("raised_exception") else []
    return [m for v in info.values() for m in _exception_messages(v)]


def _as_path(url: str | None) -> str | None:
    if url is None:
        return None
    parsed = urlparse(url)
    return unquote(parsed.path) if parsed.scheme == "file" else url
