"""The data-quality gate: a great-expectations suite per table, run by every ingest and backfill on
the files it is about to commit, BEFORE the commit. A failing suite stops the run: nothing is
committed (the files are orphans for vacuum) and the group's offsets do not move.

What is validated: the run's new Parquet files, read back with Spark (one validation per table
per run, so the cost is a few Spark jobs over the new rows only, not the table). The frame gets
one derived column, `offset_in_committed_range`: true when the row's offset lies in the range
this run commits for its topic partition ([planned start, new offset) for ingest, the
backfilled [from, to) for backfill). That is what makes checking only the new files enough for
"each offset once": every offset the table already holds is below the planned start, so new rows
inside the range can only clash with each other, which the uniqueness expectation catches.

Suites: `conf/expectations/<table>.json`, great-expectations' own suite JSON
(`{"expectations": [{"type": "expect_...", "kwargs": {...}}, ...]}`); without a file the
DEFAULT_SUITE below. The report is great-expectations Data Docs HTML under `<root>/quality/`
(an index page plus one page per validation, named after the table and the run).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence
from urllib.parse import unquote, urlparse

import pyarrow as pa

from .errors import LakeError

log = logging.getLogger(__name__)

IN_RANGE = "offset_in_committed_range"
SITE = "topiclake"

#: The contract every table keeps unless its own suite says otherwise.
DEFAULT_SUITE: dict = {"expectations": [
    {"type": "expect_compound_columns_to_be_unique", "kwargs": {"column_list": ["topic", "partition", "offset"]}},
    {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "offset"}},
    {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "partition"}},
    {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "timestamp"}},
    {"type": "expect_column_values_to_be_in_set", "kwargs": {"column": IN_RANGE, "value_set": [True]}},
]}

_GLOB = re.compile(r"([*?\[\]{}\\])")


class QualityError(LakeError):
    """A suite failed: the run committed nothing."""

    def __init__(self, report: "QualityReport"):
        self.report = report
        super().__init__(
            f"data quality check failed for table {report.table} ({report.operation} run {report.run_id}); "
            f"nothing was committed. Failed: {'; '.join(report.failures)}. Report: {report.path}")


@dataclass(slots=True)
class QualityReport:
    table: str
    operation: str
    run_id: str
    success: bool
    evaluated: int
    path: str | None  # the Data Docs page of this validation
    suite_source: str  # the suite file, or "default"
    failures: list[str] = field(default_factory=list)

    def describe(self) -> str:
        state = "passed" if self.success else "FAILED"
        return f"quality {state} ({self.evaluated} expectations, suite {self.suite_source}): {self.path}"


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
            if not isinstance(doc, dict) or not isinstance(doc.get("expectations"), list):
                raise LakeError(f"expectation suite {path}: expected an object with an \"expectations\" list")
            return doc, str(path)
    return DEFAULT_SUITE, "default"


def validate(spark, *, table_uri: str, table: str, files: Sequence[str], schema,
             ranges: Mapping[tuple[str, int], tuple[int, int]], root: Path, operation: str, run_id: str,
             expectations_dir: Path | None = None) -> QualityReport | None:
    """Validate the new files (paths relative to the table) before they are committed. Returns the
    report, None when there is nothing to validate; raises QualityError when the suite fails.
    `schema`: the table's schema, a pyarrow or a deltalake Schema."""
    if not files:
        return None
    suite_doc, source = load_suite(expectations_dir, table)
    with _adaptive(spark), _no_doctest_exit():
        frame = _frame(spark, table_uri, files, schema, ranges)
        columns = _columns_used(suite_doc)
        if columns is not None:  # only what the suite reads, cached once for its many metric jobs
            frame = frame.select(*[c for c in frame.columns if c in columns])
        frame = frame.persist()
        try:
            report = _run_suite(frame, suite_doc, source, table=table, operation=operation, run_id=run_id,
                                site_dir=quality_dir(root))
        finally:
            frame.unpersist()
    if not report.success:
        raise QualityError(report)
    log.info("table %s: %s", table, report.describe())
    return report


def _columns_used(suite_doc: dict) -> set[str] | None:
    """The columns the suite's expectations name; None (all columns) when one of them filters rows
    (row_condition) or names columns in a way not listed here."""
    used: set[str] = set()
    for e in suite_doc["expectations"]:
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
def _adaptive(spark):
    """Adaptive execution while validating: the ingest turns it off (each planned task must stay
    one Spark partition), but the suite's aggregations over a few new files would otherwise
    shuffle into spark.sql.shuffle.partitions (200) tiny tasks."""
    key = "spark.sql.adaptive.enabled"
    before = spark.conf.get(key, None)
    spark.conf.set(key, "true")
    try:
        yield
    finally:
        spark.conf.set(key, before) if before is not None else spark.conf.unset(key)


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


def _run_suite(frame, suite_doc: dict, source: str, *, table: str, operation: str, run_id: str,
               site_dir: Path) -> QualityReport:
    import great_expectations as gx
    from great_expectations.core.expectation_suite import ExpectationSuite
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    from great_expectations.data_context.types.base import (DataContextConfig, InMemoryStoreBackendDefaults,
                                                            ProgressBarsConfig)

    # In memory, except the one Data Docs site we want (no temporary site directories).
    context = gx.get_context(mode="ephemeral", project_config=DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        progress_bars=ProgressBarsConfig(globally=False),
        data_docs_sites={SITE: {
            "class_name": "SiteBuilder", "show_how_to_buttons": False,
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(site_dir)},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"}}}))
    try:
        expectations = [ExpectationConfiguration(type=e["type"], kwargs=e.get("kwargs", {}),
                                                  meta=e.get("meta")).to_domain_obj()
                        for e in suite_doc["expectations"]]
    except Exception as exc:  # noqa: BLE001  (GE raises many kinds for a bad expectation)
        raise LakeError(f"expectation suite {source} for table {table}: {exc}") from None
    suite = context.suites.add(ExpectationSuite(name=table, expectations=expectations))
    batch = (context.data_sources.add_spark(name="topiclake").add_dataframe_asset(name=table)
             .add_batch_definition_whole_dataframe("new-files"))
    definition = context.validation_definitions.add(gx.ValidationDefinition(name=f"{table}-{operation}", data=batch,
                                                                            suite=suite))
    checkpoint = context.checkpoints.add(gx.Checkpoint(
        name=f"{table}-{operation}", validation_definitions=[definition], result_format="SUMMARY",
        actions=[gx.checkpoint.UpdateDataDocsAction(name="data-docs", site_names=[SITE])]))
    outcome = checkpoint.run(batch_parameters={"dataframe": frame},
                             run_id=gx.RunIdentifier(run_name=f"{operation}-{run_id}"))
    identifier, result = next(iter(outcome.run_results.items()))
    urls = context.get_docs_sites_urls(resource_identifier=identifier, site_name=SITE)
    page = urls[0]["site_url"] if urls else None
    failures = [_describe_failure(r) for r in result.results if not r.success]
    return QualityReport(table=table, operation=operation, run_id=run_id, success=bool(outcome.success),
                         evaluated=len(result.results), path=_as_path(page), suite_source=source, failures=failures)


def _describe_failure(r) -> str:
    config = r.expectation_config
    kwargs = {k: v for k, v in config.kwargs.items() if k != "batch_id"}
    res = r.result or {}
    detail = ""
    if "unexpected_count" in res:
        detail = f": {res['unexpected_count']} unexpected rows"
        sample = res.get("partial_unexpected_list") or []
        if sample:
            detail += f", e.g. {sample[:3]}"
    messages = _exception_messages(r.exception_info)
    if messages:
        detail += f" (error: {messages[0]})"
    return f"{config.type}({', '.join(f'{k}={v}' for k, v in kwargs.items())}){detail}"


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
