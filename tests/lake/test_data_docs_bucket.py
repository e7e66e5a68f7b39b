"""The jobs' Data Docs on an object-store root, on the real versitygw: as on a directory, a run
given --data-docs, or whose suite fails, builds the site (under the root's quality/ prefix, from
every stored result, once per job run) and names the validation's page by its s3:// URI; a
passing run without --data-docs builds nothing."""

from __future__ import annotations

import json
import re

import pytest

from topiclake.lake.metrics.run_metrics import pipeline_runs
from topiclake.lake.quality import bucket_docs
from topiclake.lake.quality.gate import QualityError
from topiclake.lake.runs.backfill import BackfillOptions, backfill
from topiclake.lake.runs.ingest import IngestOptions, format_summary, ingest
from topiclake.lake.spark.session import get_session
from topiclake.store.objects import ObjectStore

from tests.support.bucket_log import BucketPartitionWriter, create_topic

TOPICS = ("orders", "payments")


def _page_key(root, uri: str) -> str:
    assert uri.startswith(root.uri("quality", "validations") + "/") and uri.endswith(".html"), uri
    return uri[len(root.uri()) + 1:]


def _site_keys(store: ObjectStore) -> list[str]:
    return [info.key for info in bucket_docs.site_files(store)]


def test_data_docs_on_a_bucket_built_once_per_run_and_named_only_when_asked(spark, s3_root, monkeypatch):
    root = s3_root.root
    store = ObjectStore(root)
    writers = {}
    for topic in TOPICS:
        create_topic(store, topic, 1)
        writers[topic] = BucketPartitionWriter(store, topic, 0).take_over()
        writers[topic].flush(3, tag="a")

    plain = ingest(spark, IngestOptions(topics=TOPICS, root=root))
    assert [t.version for t in plain.tables] == [0, 0]
    assert _site_keys(store) == [], "a passing run without --data-docs builds no site (as on a directory)"
    summary = format_summary(plain)
    assert all(t.quality.path is None and f"{t.quality.results} (Data Docs: topiclake data-docs)" in summary
               for t in plain.tables), summary

    builds = []
    real_build = bucket_docs.build_data_docs
    monkeypatch.setattr(bucket_docs, "build_data_docs",  # counts the site builds; each builds for real
                        lambda *args: builds.append(args) or real_build(*args))
    for writer in writers.values():
        writer.flush(2, tag="b")
    asked = ingest(spark, IngestOptions(topics=TOPICS, root=root, data_docs=True))
    assert [t.version for t in asked.tables] == [1, 1]
    assert len(builds) == 1, "one build of the whole site per job run, not one per table"
    summary = format_summary(asked)
    index = store.get("quality/index.html").decode()
    for table in asked.tables:
        page = table.quality.path
        assert f"    quality passed (5 expectations, suite default): {page}" in summary.splitlines(), summary
        assert f"ingest-{asked.run_id}" in store.get(_page_key(root, page)).decode()
    for run in (plain, asked):  # the index lists every run's validations, this run's and the earlier ones
        assert f"ingest-{run.run_id}" in index
    pages = [k for k in _site_keys(store) if k.startswith("quality/validations/")]
    assert len(pages) == 4, pages  # two runs of two tables: the earlier run's pages too

    builds.clear()
    filled = backfill(get_session(root=root), BackfillOptions(root=root, table="orders", topic="orders", partition=0,
                                                               from_offset=0, to_offset=5, data_docs=True))
    assert len(builds) == 1 and f"backfill-{filled.run_id}" in store.get(_page_key(root, filled.quality.path)).decode()


def test_a_failing_suite_on_a_bucket_builds_the_site_and_the_error_names_its_page(spark, s3_root, tmp_path):
    root = s3_root.root
    store = ObjectStore(root)
    create_topic(store, "orders", 1)
    BucketPartitionWriter(store, "orders", 0).take_over().flush(3, tag="a")
    suites = tmp_path / "expectations"
    suites.mkdir()
    (suites / "orders.json").write_text(json.dumps({"expectations": [
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": "offset", "min_value": 0, "max_value": 3}}]}))
    with pytest.raises(QualityError) as failure:
        ingest(spark, IngestOptions(topics=("orders",), root=root, expectations_dir=suites))  # no --data-docs
    report = failure.value.report
    assert not report.success
    page = report.path
    assert f"Report: {page}" in str(failure.value)
    shown = store.get(_page_key(root, page)).decode()
    assert f"ingest-{report.run_id}" in shown and "Status: Failed" in " ".join(re.sub(r"<[^>]+>", " ", shown).split())
    assert f"ingest-{report.run_id}" in store.get("quality/index.html").decode()
    (run,) = pipeline_runs(root)
    assert run.success is False and f"Report: {page}" in run.error, "the run's record names the page too"
