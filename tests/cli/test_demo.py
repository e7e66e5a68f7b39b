"""The quick start's main job, end to end: broker process, confluent-kafka, Spark ingest, SQL."""

from __future__ import annotations

import subprocess
import sys

import pyarrow.fs as pafs
from deltalake import DeltaTable

from tests.support.broker_process import BrokerProcess


def _delta_rows(path):
    table = DeltaTable(str(path))
    fs = pafs.SubTreeFileSystem(str(path), pafs.LocalFileSystem())  # STACK-NOTES: avoids an exit abort
    return table.to_pyarrow_table(filesystem=fs).select(["partition", "offset", "key", "value"]).to_pylist()


def test_demo_runs_twice_and_the_second_run_ingests_only_new_records(tmp_path):
    data = tmp_path / "data"
    for run, records in enumerate((300, 200)):
        result = subprocess.run([sys.executable, "-m", "topiclake.cli", "demo", "--data", str(data),
                                 "--records", str(records)], capture_output=True, text=True, timeout=400)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert f"{records} records acknowledged" in result.stdout
        assert "schema registry at http://127.0.0.1:" in result.stdout
        assert f"{records} records read" in result.stdout  # the ingest summary of this run
        assert "(3 rows)" in result.stdout and "isValid: true" in result.stdout
        assert "offsets of 3 partitions mirrored" in result.stdout  # into the broker's __consumer_offsets
        lag_rows = [line.split() for line in result.stdout.splitlines() if line.startswith("demo.events ")]
        assert len(lag_rows) == 3 and all(row[2] == row[3] and row[4] == "0" for row in lag_rows)
        assert "WARNING" not in result.stdout + result.stderr  # neither the JVM's nor great-expectations'
        assert " WARN " not in result.stdout + result.stderr  # nor Spark's log4j
        # the broker's /metrics and `topiclake metrics`: everything produced so far came in, none lags
        total = 300 + (200 if run else 0)
        assert f'kafka_server_brokertopicmetrics_messagesin_total{{topic="demo.events"}} {records}.0' in result.stdout
        assert f'topiclake_table_rows{{table="demo.events"}} {total}.0' in result.stdout
        metric_lags = [line for line in result.stdout.splitlines() if line.startswith("kafka_consumergroup_group_lag{")]
        assert len(metric_lags) == 3 and all(line.endswith(" 0.0") for line in metric_lags)
    rows = _delta_rows(data / "tables" / "demo.events")
    assert len(rows) == 500
    assert len({(r["partition"], r["offset"]) for r in rows}) == 500
    assert {r["key"].decode().split("-")[0] for r in rows} == {"user"}
    assert not (data / "cluster" / "brokers" / "0.json").exists()  # the broker stopped cleanly


def test_demo_uses_the_broker_that_already_serves_the_root(tmp_path):
    """One writer per root: with a broker serving ./data, the quick start uses it and leaves it up."""
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    try:
        result = subprocess.run([sys.executable, "-m", "topiclake.cli", "demo", "--data", str(data),
                                 "--records", "100"], capture_output=True, text=True, timeout=400)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "using the broker that already serves the storage root" in result.stdout
        assert f"broker 0 pid {broker.proc.pid}" in result.stdout and f"storage {data}" in result.stdout
        assert "100 records acknowledged" in result.stdout
        assert broker.proc.poll() is None  # still serving: the demo neither restarted nor stopped it
        assert "starting the broker" not in result.stdout
    finally:
        assert broker.stop() == 0
    assert len(_delta_rows(data / "tables" / "demo.events")) == 100
