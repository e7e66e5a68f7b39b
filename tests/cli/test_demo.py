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


def _demo(data, records: int) -> str:
    result = subprocess.run([sys.executable, "-m", "topiclake.cli", "demo", "--data", str(data),
                             "--records", str(records)], capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


def test_demo_runs_twice_the_second_on_the_serving_broker_and_ingesting_only_new_records(tmp_path):
    """The first run starts its own broker and stops it; the second finds one serving the root
    (one writer per root), uses it, leaves it up, and ingests only what it produced."""
    data = tmp_path / "data"
    broker = None
    try:
        for run, records in enumerate((300, 200)):
            if run:
                assert not (data / "cluster" / "brokers" / "0.json").exists()  # the first run's broker stopped cleanly
                broker = BrokerProcess(data, args=("--registry-listen", "127.0.0.1:0")).start()
            output = _demo(data, records)
            assert f"{records} records acknowledged" in output
            assert "schema registry at http://127.0.0.1:" in output
            assert f"{records} records read" in output  # the ingest summary of this run
            assert "(3 rows)" in output and "isValid: true" in output
            assert "offsets of 3 partitions mirrored" in output  # into the broker's __consumer_offsets
            lag_rows = [line.split() for line in output.splitlines() if line.startswith("demo.events ")]
            assert len(lag_rows) == 3 and all(row[2] == row[3] and row[4] == "0" for row in lag_rows)
            assert "WARNING" not in output  # neither the JVM's nor great-expectations'
            assert " WARN " not in output  # nor Spark's log4j
            if broker is None:
                assert "starting the broker" in output
                # the broker's /metrics and `topiclake metrics` (shown when the demo runs the broker):
                # everything produced came in, none lags
                assert f'kafka_server_brokertopicmetrics_messagesin_total{{topic="demo.events"}} {records}.0' in output
                assert f'topiclake_table_rows{{table="demo.events"}} {records}.0' in output
                metric_lags = [line for line in output.splitlines() if line.startswith("kafka_consumergroup_group_lag{")]
                assert len(metric_lags) == 3 and all(line.endswith(" 0.0") for line in metric_lags)
            else:
                assert "using the broker that already serves the storage root" in output
                assert f"broker 0 pid {broker.proc.pid}" in output and f"storage {data}" in output
                assert broker.proc.poll() is None  # still serving: the demo neither restarted nor stopped it
                assert "starting the broker" not in output
    finally:
        if broker is not None:
            assert broker.stop() == 0
    rows = _delta_rows(data / "tables" / "demo.events")
    assert len(rows) == 500
    assert len({(r["partition"], r["offset"]) for r in rows}) == 500
    assert {r["key"].decode().split("-")[0] for r in rows} == {"user"}
