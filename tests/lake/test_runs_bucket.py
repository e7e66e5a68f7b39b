"""Run records and quality results on an object-store root, on the real versitygw: the same keys
as a directory's metrics/ and quality/results/ under the prefix; `topiclake metrics` serves the run
series from there; lines appended by concurrent writers (conditional puts) are all kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from topiclake.lake.metrics.run_files import BucketRunFiles
from topiclake.lake.metrics.run_metrics import pipeline_runs
from topiclake.lake.metrics.scrape import exposition
from topiclake.lake.quality.gate import QualityError
from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.store.objects import ObjectStore

from tests.support.bucket_log import BucketPartitionWriter, create_topic

TOPIC = "events"
LABELS = 'group="topiclake-ingest-events",operation="ingest",table="events"'


def suite(tmp_path, *expectations) -> object:
    suites = tmp_path / "expectations"
    suites.mkdir(exist_ok=True)
    (suites / f"{TOPIC}.json").write_text(json.dumps({"expectations": list(expectations)}))
    return suites


def test_runs_and_quality_results_are_recorded_in_the_bucket_and_served(spark, s3_root, tmp_path):
    root = s3_root.root
    store = ObjectStore(root)
    create_topic(store, TOPIC, 1)
    writer = BucketPartitionWriter(store, TOPIC, 0).take_over()
    writer.flush(3, tag="a")
    passing = suite(tmp_path, {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "value"}})
    result = ingest(spark, IngestOptions(topics=(TOPIC,), root=root, expectations_dir=passing))
    (outcome,) = result.tables
    assert outcome.version == 0 and outcome.quality.success
    stored = outcome.quality.results
    assert stored.startswith(root.uri("quality", "results", TOPIC, f"ingest-{result.run_id}"))
    document = json.loads(store.get(stored[len(root.uri()) + 1:]))
    assert document["success"] and document["statistics"]["evaluated_expectations"] == 1
    assert stored in outcome.quality.describe()

    (run,) = pipeline_runs(root)
    assert (run.run_id, run.operation, run.table, run.success, run.rows, run.quality) == \
        (result.run_id, "ingest", TOPIC, True, 6, "pass")
    assert [(o.first, o.end) for o in run.offsets] == [(0, 6)]
    scraped = exposition(root).decode()
    assert f"topiclake_pipeline_last_run_success{{{LABELS}}} 1.0" in scraped
    assert f"topiclake_pipeline_last_run_rows{{{LABELS}}} 6.0" in scraped

    writer.flush(2, tag="b")
    failing = suite(tmp_path, {"type": "expect_column_values_to_be_between",
                               "kwargs": {"column": "offset", "min_value": 0, "max_value": 7}})
    with pytest.raises(QualityError) as failure:
        ingest(spark, IngestOptions(topics=(TOPIC,), root=root, expectations_dir=failing))
    report = failure.value.report
    assert not json.loads(store.get(report.results[len(root.uri()) + 1:]))["success"]
    first, failed = pipeline_runs(root)
    assert first.run_id == result.run_id and (failed.success, failed.quality) == (False, "fail")
    assert "data quality check failed" in failed.error

    env = {**os.environ, **s3_root.env}
    cli = subprocess.run([sys.executable, "-m", "topiclake.cli", "metrics", "--data", str(root)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert f"topiclake_pipeline_last_run_success{{{LABELS}}} 0.0" in cli.stdout
    # the failed run keeps the last success's time from the textfile it replaced
    line = next(line for line in cli.stdout.splitlines()
                if line.startswith(f"topiclake_pipeline_last_success_timestamp_seconds{{{LABELS}}}"))
    assert float(line.split()[-1]) == pytest.approx(first.end_time)


def test_concurrent_appends_to_the_run_history_in_a_bucket_all_land(s3_root):
    files = BucketRunFiles(s3_root.root)

    def append(writer: int) -> None:
        for n in range(8):
            files.append("runs.jsonl", f"{writer}-{n}\n".encode(), 1 << 20)

    threads = [threading.Thread(target=append, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = files.read("runs.jsonl").splitlines()
    assert sorted(lines) == sorted(f"{w}-{n}" for w in range(4) for n in range(8))
    for w in range(4):  # each writer's lines in its own order
        assert [line for line in lines if line.startswith(f"{w}-")] == [f"{w}-{n}" for n in range(8)]

    files.append("runs.jsonl", b"last\n", len(files.read("runs.jsonl")) + 1)  # past the limit: rotated
    assert files.read("runs.jsonl") == "last\n" and len(files.read("runs.jsonl.1").splitlines()) == 32
