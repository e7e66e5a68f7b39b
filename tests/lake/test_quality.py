"""The great-expectations gate: suites run on the new files before the commit; a failing suite
commits nothing; every run stores its validation result under <root>/quality/results, and the
Data Docs site is built from them."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from topiclake.cli import app
from topiclake.lake.errors import LakeError
from topiclake.lake.quality.gate import DEFAULT_SUITE, QualityError, Suite, load_suite
from topiclake.lake.runs import ingest as ingest_module
from topiclake.lake.runs.backfill import BackfillOptions, backfill
from topiclake.lake.runs.ingest import IngestOptions, format_summary, ingest
from topiclake.lake.table.delta import app_id

from tests.support.lake import read_table

GROUP = "topiclake-ingest-orders"


def test_default_suite_passes_and_stores_its_result(spark, root, topic_writer):
    """Every run stores great-expectations' validation result; without --data-docs the run never
    loads great-expectations, and `topiclake data-docs` later builds the site from the results
    (a table name with a dot included: great-expectations files it as directories)."""
    w = topic_writer("shop.orders", partitions=2)
    w.produce(0, [b"a", b"b"])
    w.produce(1, [b"c"])
    result = ingest(spark, IngestOptions(topics=("shop.orders",), root=root))
    report = result.tables[0].quality
    assert report.success and report.evaluated == len(DEFAULT_SUITE["expectations"])
    assert report.suite_source == "default" and report.path is None
    stored = Path(report.results)
    assert stored.is_file() and root.resolve() / "quality" / "results" / "shop" / "orders" in stored.parents
    doc = json.loads(stored.read_text())
    assert doc["success"] and doc["suite_name"] == "shop.orders" and doc["statistics"]["evaluated_expectations"] == 5
    assert [r["expectation_config"]["type"] for r in doc["results"]] == [e["type"] for e in DEFAULT_SUITE["expectations"]]
    assert doc["results"][0]["result"]["element_count"] == 3
    assert str(stored) in format_summary(result) and "topiclake data-docs" in format_summary(result)
    assert not (root / "quality" / "index.html").exists()

    w.produce(0, [b"d"])
    again = ingest(spark, IngestOptions(topics=("shop.orders",), root=root, data_docs=True)).tables[0].quality
    page = Path(again.path)
    assert page.is_file() and page.suffix == ".html" and root.resolve() / "quality" in page.parents
    assert str(page) in again.describe()

    built = CliRunner().invoke(app, ["data-docs", "--data", str(root)])
    assert built.exit_code == 0, built.output
    index = root.resolve() / "quality" / "index.html"
    assert built.output.strip() == f"Data Docs of 2 validations: {index}"
    runs = [f"ingest-{r.run_id}" for r in (report, again)]
    assert all(run in index.read_text() for run in runs), "the index links every run's page"
    assert "could not be retrieved" not in built.output
    assert len(list((root / "quality" / "results").rglob("*.json"))) == 2
    assert len(list((root / "quality" / "validations").rglob("*.html"))) == 2


def test_data_docs_without_any_validation_says_so(tmp_path):
    result = CliRunner().invoke(app, ["data-docs", "--data", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output.strip() == (f"error: no validation results under {tmp_path.resolve()}/quality/results: "
                                     "ingest or backfill a table first")
    missing = CliRunner().invoke(app, ["data-docs", "--data", str(tmp_path / "nope")])
    assert missing.exit_code == 1 and "does not exist" in missing.output and "Traceback" not in missing.output


def _inject(monkeypatch, extra_file):
    """Make run_tasks return one more file row: `extra_file(uri, rows) -> (relative path, row)`."""
    real = ingest_module.run_tasks

    def run_tasks(spark, tasks, writer, **kwargs):
        rows = real(spark, tasks, writer, **kwargs)
        files = [r for r in rows.to_pylist() if r["path"] is not None]
        if files:
            rows = pa.concat_tables([rows, pa.Table.from_pylist([extra_file(files[0])], schema=rows.schema)])
        return rows

    monkeypatch.setattr(ingest_module, "run_tasks", run_tasks)


def _copy(row: dict, source: Path) -> dict:
    """A copy of a Parquet file next to the original, as a new file row."""
    directory, _, _ = row["path"].rpartition("/")
    name = f"{directory + '/' if directory else ''}part-injected-{uuid.uuid4().hex[:8]}.snappy.parquet"
    uri = Path(row["table_uri"])
    shutil.copy(source, uri / name)
    return {**row, "path": name, "size": (uri / name).stat().st_size}


def test_duplicated_offsets_block_the_commit(spark, root, topic_writer):
    w = topic_writer("orders")
    w.produce(0, [b"a", b"b", b"c"])
    w.append_bytes(0, w.path(0).read_bytes())  # a broken writer repeated the batch: offsets 0-2 twice
    with pytest.raises(QualityError, match=r"expect_compound_columns_to_be_unique\(.*\): 6 unexpected rows") \
            as failure:
        ingest(spark, IngestOptions(topics=("orders",), root=root))
    assert "nothing was committed" in str(failure.value)
    page = Path(failure.value.report.path)
    assert page.is_file() and str(page) in str(failure.value)
    assert page.parent.parent.name in (root / "quality" / "index.html").read_text()  # listed on the index
    assert not (root / "tables" / "orders" / "_delta_log").exists()  # the table was never created


def test_files_no_task_validated_block_the_commit(spark, root, topic_writer, monkeypatch):
    w = topic_writer("orders")
    w.produce(0, [b"a", b"b"])
    ingest(spark, IngestOptions(topics=("orders",), root=root))
    uri = root / "tables" / "orders"
    old_file = next(uri.rglob("*.parquet"))  # offsets 0-1: already in the table
    w.produce(0, [b"c"])
    _inject(monkeypatch, lambda row: _copy(row, old_file))
    with pytest.raises(QualityError, match="the new files hold 2 rows, the tasks validated 1"):
        ingest(spark, IngestOptions(topics=("orders",), root=root))
    table, data = read_table(uri)
    assert table.version() == 0 and sorted(data["offset"].to_pylist()) == [0, 1]
    assert table.transaction_version(app_id(GROUP, "orders", 0)) == 2

    monkeypatch.undo()
    ingest(spark, IngestOptions(topics=("orders",), root=root))  # the clean rerun is exactly once
    assert sorted(read_table(uri)[1]["offset"].to_pylist()) == [0, 1, 2]


def test_driver_side_expectations_judge_the_whole_run(spark, root, topic_writer, tmp_path):
    """Expectations a task cannot judge alone (a row count, a tolerance) run with Spark over the
    new files; their verdict and the per-task ones land in one report."""
    w = topic_writer("orders", partitions=2)
    w.produce(0, [b"a", b"b"])
    w.produce(1, [b"c", None])
    suites = tmp_path / "expectations"
    suites.mkdir()
    suite = [*DEFAULT_SUITE["expectations"],
             {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "value", "mostly": 0.7}},
             {"type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 1, "max_value": 3}}]
    (suites / "orders.json").write_text(json.dumps({"expectations": suite}))
    assert Suite.load(suites, "orders").on_driver == [5, 6]
    with pytest.raises(QualityError, match=r"expect_table_row_count_to_be_between\(.*\)") as failure:
        ingest(spark, IngestOptions(topics=("orders",), root=root, expectations_dir=suites))
    assert failure.value.report.evaluated == 7 and len(failure.value.report.failures) == 1

    suite[-1]["kwargs"]["max_value"] = 4
    (suites / "orders.json").write_text(json.dumps({"expectations": suite}))
    result = ingest(spark, IngestOptions(topics=("orders",), root=root, expectations_dir=suites))
    assert result.tables[0].quality.success and result.records == 4


def test_suite_split_between_tasks_and_driver():
    unique = "expect_compound_columns_to_be_unique"
    suite = Suite(({"type": unique, "kwargs": {"column_list": ["topic", "partition", "offset"]}},
                   {"type": unique, "kwargs": {"column_list": ["partition", "offset"]}},  # across topics
                   {"type": "expect_column_values_to_be_unique", "kwargs": {"column": "key"}},
                   {"type": "expect_column_values_to_be_between", "kwargs": {"column": "offset", "min_value": 0}},
                   {"type": "expect_column_values_to_be_between",
                    "kwargs": {"column": "offset", "min_value": 0, "row_condition": "partition == 1"}},
                   {"type": "expect_column_mean_to_be_between", "kwargs": {"column": "offset", "min_value": 0}}),
                  "test")
    assert suite.per_task == [0, 3] and suite.on_driver == [1, 2, 4, 5]
    assert [e["kwargs"] for e in json.loads(suite.task_document())["expectations"]] == \
        [suite.expectations[0]["kwargs"], suite.expectations[3]["kwargs"]]


def test_table_suite_from_conf_and_backfill_gate(spark, root, topic_writer, tmp_path):
    w = topic_writer("orders")
    w.produce(0, [b"a", None, b"c"])  # a tombstone at offset 1
    suites = tmp_path / "expectations"
    suites.mkdir()
    (suites / "orders.json").write_text(json.dumps({"expectations": [
        *DEFAULT_SUITE["expectations"],
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "value"}}]}))
    with pytest.raises(QualityError, match=r"expect_column_values_to_not_be_null\(column=value\): 1 unexpected"):
        ingest(spark, IngestOptions(topics=("orders",), root=root, expectations_dir=suites))

    ingest(spark, IngestOptions(topics=("orders",), root=root))  # the default suite accepts tombstones
    uri = root / "tables" / "orders"
    options = BackfillOptions(root=root, table="orders", topic="orders", partition=0, from_offset=0, to_offset=3)
    with pytest.raises(QualityError, match="backfill run"):
        backfill(spark, BackfillOptions(**{**_fields(options), "expectations_dir": suites}))
    assert read_table(uri)[0].version() == 0
    result = backfill(spark, options)
    assert result.version == 1 and result.quality.success and "backfill-" in result.quality.results


def _fields(options) -> dict:
    return {name: getattr(options, name) for name in options.__dataclass_fields__}


def test_suite_files_are_checked(tmp_path):
    assert load_suite(tmp_path, "missing") == (DEFAULT_SUITE, "default")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(LakeError, match="bad.json: not JSON"):
        load_suite(tmp_path, "bad")
    (tmp_path / "shape.json").write_text('{"expectation": []}')
    with pytest.raises(LakeError, match="an object with an \"expectations\" list"):
        load_suite(tmp_path, "shape")
