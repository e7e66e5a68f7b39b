"""Pipeline metrics: each run's textfile and history line, and `topiclake metrics` (the runs plus
each table's lag and freshness), over real segment files, real Spark ingests and real Delta tables;
parsed back with prometheus_client's own parser."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from topiclake.lake.jobs.main import ingest_main
from topiclake.lake.metrics.run_metrics import pipeline_runs, textfile_path
from topiclake.lake.quality.gate import QualityError
from topiclake.lake.runs.backfill import BackfillOptions, backfill
from topiclake.lake.runs.compaction import CompactOptions, compact
from topiclake.lake.runs.ingest import IngestOptions, ingest

from .compaction_model import write_workload
from tests.support.lake import BASE_TS

GROUP = "topiclake-ingest-orders"
RUN = {"operation": "ingest", "table": "orders", "group": GROUP}


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value, from Prometheus text (parsed by prometheus_client)."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(parsed: dict, name: str, **labels) -> float:
    return parsed[(name, tuple(sorted({k: str(v) for k, v in labels.items()}.items())))]


def at(partition: int, **labels) -> dict:
    return {**RUN, "topic": "orders", "partition": partition, **labels}


def test_ingest_run_writes_its_textfile_and_history(spark, root, topic_writer):
    w = topic_writer("orders", partitions=2)
    w.produce(0, [b"a", b"b", b"c"])
    w.produce(1, [b"x"])
    before = time.time()
    result = ingest(spark, IngestOptions(topics=("orders",), root=root))

    path = textfile_path(root, "ingest", "orders")
    assert path == root / "metrics" / "ingest-orders.prom"
    parsed = samples(path.read_text())
    assert value(parsed, "topiclake_pipeline_last_run_success", **RUN) == 1
    assert value(parsed, "topiclake_pipeline_last_run_rows", **RUN) == 4
    assert value(parsed, "topiclake_pipeline_last_run_files", **RUN) == 2  # one per partition
    assert result.bytes_read > 0 and value(parsed, "topiclake_pipeline_last_run_bytes", **RUN) == result.bytes_read
    assert value(parsed, "topiclake_pipeline_last_run_quarantined_rows", **RUN) == 0
    assert value(parsed, "topiclake_pipeline_last_run_quality", **RUN, result="pass") == 1  # the default suite
    assert value(parsed, "topiclake_pipeline_last_run_quality", **RUN, result="fail") == 0
    assert value(parsed, "topiclake_pipeline_last_run_offset_first", **at(0)) == 0
    assert value(parsed, "topiclake_pipeline_last_run_offset_end", **at(0)) == 3
    assert value(parsed, "topiclake_pipeline_last_run_offset_end", **at(1)) == 1
    assert value(parsed, "topiclake_pipeline_last_run_info", **RUN, run_id=result.run_id) == 1
    ended = value(parsed, "topiclake_pipeline_last_run_timestamp_seconds", **RUN)
    assert before <= ended <= time.time()
    assert value(parsed, "topiclake_pipeline_last_success_timestamp_seconds", **RUN) == ended
    assert 0 < value(parsed, "topiclake_pipeline_last_run_duration_seconds", **RUN) < time.time() - before + 1

    runs = pipeline_runs(root)
    assert len(runs) == 1 and runs[0].run_id == result.run_id and runs[0].success and runs[0].rows == 4
    assert [(o.topic, o.partition, o.first, o.end) for o in runs[0].offsets] == [("orders", 0, 0, 3),
                                                                                 ("orders", 1, 0, 1)]

    again = ingest(spark, IngestOptions(topics=("orders",), root=root))  # nothing new: still a run
    parsed = samples(path.read_text())
    assert value(parsed, "topiclake_pipeline_last_run_rows", **RUN) == 0
    assert value(parsed, "topiclake_pipeline_last_run_quality", **RUN, result="none") == 1
    assert value(parsed, "topiclake_pipeline_last_run_offset_first", **at(0)) == 3
    assert [r.run_id for r in pipeline_runs(root, table="orders")] == [result.run_id, again.run_id]


def test_failing_suite_records_the_failure(spark, root, topic_writer, tmp_path):
    suites = tmp_path / "expectations"
    suites.mkdir()
    (suites / "orders.json").write_text(json.dumps({"expectations": [
        {"type": "expect_column_values_to_be_between",
         "kwargs": {"column": "offset", "min_value": 0, "max_value": 1}}]}))
    w = topic_writer("orders")
    w.produce(0, [b"a", b"b"])
    options = IngestOptions(topics=("orders",), root=root, expectations_dir=suites)
    ingest(spark, options)
    path = textfile_path(root, "ingest", "orders")
    passed_at = value(samples(path.read_text()), "topiclake_pipeline_last_run_timestamp_seconds", **RUN)

    w.produce(0, [b"c", b"d"])  # offsets 2 and 3: above the suite's max
    with pytest.raises(QualityError):
        ingest(spark, options)
    parsed = samples(path.read_text())
    assert value(parsed, "topiclake_pipeline_last_run_success", **RUN) == 0
    assert value(parsed, "topiclake_pipeline_last_run_quality", **RUN, result="fail") == 1
    assert value(parsed, "topiclake_pipeline_last_run_quality", **RUN, result="pass") == 0
    assert value(parsed, "topiclake_pipeline_last_run_rows", **RUN) == 0  # nothing was committed
    assert value(parsed, "topiclake_pipeline_last_run_offset_first", **at(0)) == 2
    assert value(parsed, "topiclake_pipeline_last_run_timestamp_seconds", **RUN) > passed_at
    assert value(parsed, "topiclake_pipeline_last_success_timestamp_seconds", **RUN) == passed_at
    failed = pipeline_runs(root)[-1]
    assert not failed.success and failed.quality == "fail" and failed.error.startswith("QualityError: ")


def test_backfill_and_compaction_runs_are_recorded(spark, root, topic_writer):
    w = topic_writer("orders")
    w.produce(0, [b"a", b"b", b"c", b"d"])
    ingest(spark, IngestOptions(topics=("orders",), root=root))
    done = backfill(spark, BackfillOptions(root=root, table="orders", topic="orders", partition=0,
                                           from_offset=1, to_offset=3))
    parsed = samples(textfile_path(root, "backfill", "orders").read_text())
    run = {**RUN, "operation": "backfill"}
    assert value(parsed, "topiclake_pipeline_last_run_success", **run) == 1
    assert value(parsed, "topiclake_pipeline_last_run_rows", **run) == 2 == done.records
    assert value(parsed, "topiclake_pipeline_last_run_files", **run) == len(done.added) > 0
    assert value(parsed, "topiclake_pipeline_last_run_bytes", **run) > 0
    assert value(parsed, "topiclake_pipeline_last_run_quality", **run, result="pass") == 1
    assert value(parsed, "topiclake_pipeline_last_run_offset_first", **{**at(0), **run}) == 1
    assert value(parsed, "topiclake_pipeline_last_run_offset_end", **{**at(0), **run}) == 3

    with pytest.raises(Exception, match="inverted"):  # a failure before Spark: recorded all the same
        backfill(spark, BackfillOptions(root=root, table="orders", topic="orders", partition=0,
                                        from_offset=3, to_offset=1))
    assert value(samples(textfile_path(root, "backfill", "orders").read_text()),
                 "topiclake_pipeline_last_run_success", **run) == 0

    write_workload(root, "kv", seed=4, ops=40)
    cleaned = compact(spark, CompactOptions(root=root, topics=("kv",), force=True)).cleaned
    assert len(cleaned) == 1
    parsed = samples(textfile_path(root, "compact", "kv").read_text())
    run = {"operation": "compact", "table": "kv", "group": ""}
    assert value(parsed, "topiclake_pipeline_last_run_success", **run) == 1
    assert value(parsed, "topiclake_pipeline_last_run_rows", **run) == cleaned[0].records_retained > 0
    assert value(parsed, "topiclake_pipeline_last_run_bytes", **run) == cleaned[0].bytes_before
    assert value(parsed, "topiclake_pipeline_last_run_offset_end", **run, topic="kv", partition=0) == \
        cleaned[0].to_clean.first_uncleanable_offset
    assert [r.operation for r in pipeline_runs(root)] == ["ingest", "backfill", "backfill", "compact"]


def test_job_records_a_failure_before_the_job_starts(root, capsys):
    """The command's exit path records what failed before any Spark job (here: no such topic)."""
    root.mkdir(parents=True)
    assert ingest_main(["--topic", "nope", "--data", str(root)]) == 2  # a usage error, still a failed run
    assert "nope" in capsys.readouterr().err
    run = {"operation": "ingest", "table": "nope", "group": "topiclake-ingest-nope"}
    parsed = samples(textfile_path(root, "ingest", "nope").read_text())
    assert value(parsed, "topiclake_pipeline_last_run_success", **run) == 0
    assert ("topiclake_pipeline_last_success_timestamp_seconds", tuple(sorted(run.items()))) not in parsed
    assert "unknown topic 'nope'" in pipeline_runs(root)[-1].error


def metrics_command(root) -> tuple[str, float]:
    """`topiclake metrics --data ROOT` as a new process: its output and wall time."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "topiclake.cli", "metrics", "--data", str(root)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout, time.monotonic() - started


def test_metrics_command_freshness_and_lag(spark, root, topic_writer):
    w = topic_writer("orders", partitions=2)
    w.produce(0, [b"a", b"b"], timestamp=BASE_TS)  # offsets 0-1
    w.produce(0, [b"c", b"d"], timestamp=BASE_TS + 5_000)  # 2-3
    w.produce(1, [b"x"], timestamp=BASE_TS + 1_000)
    ingest(spark, IngestOptions(topics=("orders",), root=root))
    w.produce(0, [b"e", b"f", b"g"], timestamp=BASE_TS + 12_500)  # 4-6: not ingested yet
    table_labels = {"table": "orders", "group": GROUP, "topic": "orders"}

    text, _seconds = metrics_command(root)
    parsed = samples(text)
    assert value(parsed, "topiclake_table_freshness_seconds", **table_labels, partition=0) == 7.5
    assert value(parsed, "topiclake_table_lag_records", **table_labels, partition=0) == 3
    assert value(parsed, "topiclake_table_committed_offset", **table_labels, partition=0) == 4
    assert value(parsed, "topiclake_table_log_end_offset", **table_labels, partition=0) == 7
    assert value(parsed, "topiclake_table_freshness_seconds", **table_labels, partition=1) == 0
    assert value(parsed, "topiclake_table_lag_records", **table_labels, partition=1) == 0
    assert value(parsed, "topiclake_table_rows", table="orders") == 5
    assert value(parsed, "topiclake_table_version", table="orders") == 0
    assert value(parsed, "topiclake_table_files", table="orders") == 2
    assert value(parsed, "topiclake_table_bytes", table="orders") == sum(
        f.stat().st_size for f in (root / "tables" / "orders").rglob("*.parquet"))
    assert value(parsed, "topiclake_table_up", table="orders") == 1
    assert value(parsed, "topiclake_pipeline_last_run_rows", **RUN) == 5  # the run's textfile, merged in

    w.produce(0, [b"h"], timestamp=BASE_TS + 20_000)  # 7
    w.produce(1, [b"y", b"z"], timestamp=BASE_TS + 3_000)
    parsed = samples(metrics_command(root)[0])
    assert value(parsed, "topiclake_table_lag_records", **table_labels, partition=0) == 4
    assert value(parsed, "topiclake_table_freshness_seconds", **table_labels, partition=0) == 15
    assert value(parsed, "topiclake_table_lag_records", **table_labels, partition=1) == 2
    assert value(parsed, "topiclake_table_freshness_seconds", **table_labels, partition=1) == 2

    ingest(spark, IngestOptions(topics=("orders",), root=root))
    parsed = samples(metrics_command(root)[0])
    assert value(parsed, "topiclake_table_lag_records", **table_labels, partition=0) == 0
    assert value(parsed, "topiclake_table_freshness_seconds", **table_labels, partition=0) == 0
    assert value(parsed, "topiclake_table_version", table="orders") == 1


def test_metrics_served_on_listen(spark, root, topic_writer):
    w = topic_writer("orders")
    w.produce(0, [b"a"], timestamp=BASE_TS)
    ingest(spark, IngestOptions(topics=("orders",), root=root))
    server = subprocess.Popen([sys.executable, "-m", "topiclake.cli", "metrics", "--data", str(root),
                               "--listen", "127.0.0.1:0"], stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = server.stderr.readline()
        url = re.search(r"http://\S+/metrics", line)
        assert url, line
        w.produce(0, [b"b", b"c"], timestamp=BASE_TS + 2_000)  # each scrape reads the files afresh
        with urllib.request.urlopen(url.group(0), timeout=30) as response:
            assert response.status == 200
            parsed = samples(response.read().decode())
        labels = {"table": "orders", "group": GROUP, "topic": "orders", "partition": 0}
        assert value(parsed, "topiclake_table_lag_records", **labels) == 2
        assert value(parsed, "topiclake_table_freshness_seconds", **labels) == 2
    finally:
        server.terminate()
        server.wait(timeout=30)
