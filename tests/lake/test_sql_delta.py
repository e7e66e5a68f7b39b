"""`topiclake sql` over Delta tables in Spark (delta-spark in the session): time travel, history,
detail and DML by the tables' own names, tables a statement creates, one rendering of binary
values, one-line errors, and Ctrl-C that stops the query's tasks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from topiclake.lake.errors import error_line
from topiclake.lake.runs.backfill import BackfillOptions, backfill
from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.sql.query import execute, format_result, register_tables
from topiclake.lake.sql.shell import QueryCancelled, SqlSession, running_tasks
from topiclake.lake.table.location import discover_tables
from topiclake.segments.storage import StorageLayout

REPO = Path(__file__).resolve().parents[2]


def query(session: SqlSession, statement: str) -> list[dict]:
    return execute(session.spark, statement, session.tables).table.to_pylist()


@pytest.fixture
def demo(spark, root, topic_writer):
    """demo.events (a dotted name) with two ingests and a backfill, and plain-named orders."""
    w = topic_writer("demo.events", partitions=2)
    w.produce(0, [b"a", b"b"])
    w.produce(1, [b"c"])
    ingest(spark, IngestOptions(topics=("demo.events",), root=root, bootstrap="none"))
    w.produce(0, [b"d"])
    ingest(spark, IngestOptions(topics=("demo.events",), root=root, bootstrap="none"))
    backfill(spark, BackfillOptions(root=root, table="demo.events", topic="demo.events", partition=0,
                                    from_offset=0, to_offset=2))
    topic_writer("orders").produce(0, [b"o"])
    ingest(spark, IngestOptions(topics=("orders",), root=root, bootstrap="none"))
    return SqlSession.start(root, master=None, conf={}, fmt="table", max_rows=100)


def test_time_travel_history_and_detail_by_the_tables_names(demo):
    assert query(demo, "SELECT count(*) AS n FROM demo.events VERSION AS OF 0") == [{"n": 3}]
    assert query(demo, "SELECT count(*) AS n FROM `demo.events`") == [{"n": 4}]
    history = query(demo, "DESCRIBE HISTORY demo.events")
    assert [(h["version"], h["operation"]) for h in history] == [(2, "WRITE"), (1, "WRITE"), (0, "WRITE")]
    first = history[-1]["timestamp"].isoformat(sep=" ")
    assert query(demo, f"SELECT count(*) AS n FROM demo.events TIMESTAMP AS OF '{first}'") == [{"n": 3}]
    # each commit says what it did: the offsets it covered, in userMetadata
    backfilled, second, created = (json.loads(h["userMetadata"]) for h in history)
    assert dict(history[0]["operationParameters"])["mode"] == "Overwrite"  # it removed files
    assert (backfilled["operation"], backfilled["range"]) == ("backfill", [0, 2])
    assert dict(history[1]["operationParameters"])["mode"] == "Append"
    # the creating commit reads as delta-spark's first write, not delta-rs's CREATE TABLE with the
    # whole table metadata, protocol and a scratch location in its parameters
    assert dict(history[2]["operationParameters"]) == {"mode": "ErrorIfExists", "partitionBy": '["record_date"]'}
    assert second["operation"] == "ingest" and second["ranges"] == {"demo.events:0": [2, 3]}
    assert created["ranges"] == {"demo.events:0": [0, 2], "demo.events:1": [0, 1]}
    # and what it wrote, in delta-spark's names (delta-rs leaves operationMetrics out)
    assert [dict(h["operationMetrics"])["numOutputRows"] for h in history[1:]] == ["1", "3"]
    assert dict(history[1]["operationMetrics"])["numFiles"] == "1"
    assert int(dict(history[1]["operationMetrics"])["numOutputBytes"]) > 0
    detail = query(demo, "DESCRIBE DETAIL demo.events")[0]
    assert detail["format"] == "delta" and detail["partitionColumns"] == ["record_date"]
    assert detail["location"].endswith("/tables/demo.events")
    # a name Spark's catalog can hold is a table of the catalog, listed and described as one
    assert {r["tableName"] for r in query(demo, "SHOW TABLES")} >= {"orders"}
    assert query(demo, "SELECT count(*) AS n FROM orders VERSION AS OF 0") == [{"n": 1}]
    assert query(demo, "DESCRIBE HISTORY orders")[0]["operation"] == "WRITE"


def test_delta_dml_on_a_topic_table_by_its_name(demo, root):
    assert query(demo, "DELETE FROM demo.events WHERE `offset` = 0") == [{"num_affected_rows": 2}]
    assert query(demo, "UPDATE demo.events SET value = CAST('z' AS BINARY) WHERE `offset` = 2") == \
        [{"num_affected_rows": 1}]
    assert query(demo, "SELECT `partition`, `offset`, CAST(value AS STRING) AS v FROM demo.events ORDER BY 1, 2") == \
        [{"partition": 0, "offset": 1, "v": "b"}, {"partition": 0, "offset": 2, "v": "z"}]
    # a session started later (another root's tables registered in between) still finds it
    register_tables(demo.spark, discover_tables(StorageLayout(root)))
    assert query(demo, "SELECT count(*) AS n FROM demo.events VERSION AS OF 2") == [{"n": 4}]


def test_a_plain_pyspark_session_configured_as_delta_documents_reads_the_tables(demo, root, tmp_path):
    """No topiclake code in the reading process: delta-spark's documented session settings, the
    jars by --jars' setting (spark.jars), `spark.read.format("delta").load(path)`."""
    jars = subprocess.run([sys.executable, "-m", "topiclake.lake.spark.jars", "--jars"], capture_output=True,
                          text=True, check=True).stdout.strip()
    script = tmp_path / "plain.py"
    script.write_text(
        "import json, sys\n"
        "from pyspark.sql import SparkSession\n"
        "spark = (SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false')\n"
        f"         .config('spark.jars', {jars!r})\n"
        "         .config('spark.sql.extensions', 'io.delta.sql.DeltaSparkSessionExtension')\n"
        "         .config('spark.sql.catalog.spark_catalog', 'org.apache.spark.sql.delta.catalog.DeltaCatalog')\n"
        "         .getOrCreate())\n"
        "counts = {t: spark.read.format('delta').load(sys.argv[1] + '/' + t).count() for t in sys.argv[2:]}\n"
        "print(json.dumps(counts))\n")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    env.pop("SPARK_DIST_CLASSPATH", None)
    done = subprocess.run([sys.executable, str(script), str(root / "tables"), "demo.events", "orders"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"demo.events": 4, "orders": 1}


def test_binary_values_print_as_base64_in_every_format(spark, demo):
    rows = execute(spark, "SELECT CAST(X'00410042' AS BINARY) AS b UNION ALL SELECT CAST('text' AS BINARY)", {}).table
    assert format_result(rows, "csv").splitlines() == ["b", "AEEAQg==", "dGV4dA=="]
    assert [json.loads(line) for line in format_result(rows, "json").splitlines()] == \
        [{"b": "AEEAQg=="}, {"b": "dGV4dA=="}]
    assert format_result(rows, "table").splitlines()[2:4] == ["AEEAQg==", "dGV4dA=="]


def test_a_delta_error_and_a_jvm_error_are_one_clear_line(spark, demo):
    with pytest.raises(Exception) as delta_error:
        query(demo, "SELECT * FROM demo.events TIMESTAMP AS OF '2999-01-01'")
    line = error_line(delta_error.value)  # Spark has no message for Delta's error classes
    assert line.startswith("[DELTA_TIMESTAMP_GREATER_THAN_COMMIT] Timestamp 2999-01-01") and "\n" not in line
    with pytest.raises(Exception) as jvm_error:  # a JVM exception pyspark does not convert
        spark._jvm.java.util.ArrayList().get(5)
    assert error_line(jvm_error.value) == "IndexOutOfBoundsException: Index 5 out of bounds for length 0"


def test_create_table_as_select_writes_delta_under_the_root_and_persists(spark, demo, root):
    query(demo, "CREATE TABLE picked AS SELECT `offset`, value FROM demo.events WHERE `partition` = 0")
    assert (root / "tables" / "picked" / "_delta_log").is_dir()
    later = SqlSession.start(root, master=None, conf={}, fmt="table", max_rows=100)
    assert "picked" in later.tables
    assert query(later, "SELECT count(*) AS n FROM picked") == [{"n": 3}]
    assert query(later, "DESCRIBE DETAIL picked")[0]["format"] == "delta"


def test_ctrl_c_cancels_the_query_and_leaves_no_task_running(spark, demo):
    """An adaptive join runs a job per stage: Ctrl-C cancels the running one and the ones the
    statement would start next; the shell returns once no task of it runs."""
    statement = ("SELECT count(*) FROM (SELECT id % 1000 AS k FROM range(0, 4000000000, 1, 4)) a "
                 "JOIN (SELECT id AS k FROM range(0, 1000)) b USING (k)")
    timer = threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(QueryCancelled):
            demo._cancellable(statement)
    finally:
        timer.cancel()
    tracker = spark.sparkContext.statusTracker()
    assert tracker.getActiveJobsIds() == [] and tracker.getActiveStageIds() == []
    groups = [g for g in (spark.sparkContext.getLocalProperty("spark.jobGroup.id"),) if g]
    assert groups == []  # the statement's group is cleared
    assert running_tasks(spark, "no-such-group") == 0
    assert query(demo, "SELECT count(*) AS n FROM orders") == [{"n": 1}]
