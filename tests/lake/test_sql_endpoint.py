"""The standing SQL endpoint: `topiclake sql-server` (a Spark driver serving Spark Connect) and
`topiclake sql` as its client, each a real process as a user starts them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.sql.endpoint import SETTLE_S

from tests.support.broker_process import free_port
from tests.support.waits import wait_for

TOPICLAKE = [sys.executable, "-m", "topiclake.cli"]
SERVER_START_S = 180.0  # a JVM and a Spark driver, on a machine the other tests keep busy


def topiclake(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TOPICLAKE_SQL_ENDPOINT"}
    return subprocess.run([*TOPICLAKE, *args], capture_output=True, text=True, timeout=timeout, env=env)


def start_server(root: Path, port: int, log: Path) -> subprocess.Popen:
    out = log.open("w")
    proc = subprocess.Popen([*TOPICLAKE, "sql-server", "--data", str(root), "--port", str(port),
                             "--master", "local[1]"], stdout=out, stderr=subprocess.STDOUT)
    wait_for(lambda: "sql-server: serving" in log.read_text() or proc.poll() is not None,
             timeout=SERVER_START_S, what="the SQL server to serve", detail=lambda: log.read_text()[-3000:])
    assert proc.poll() is None, log.read_text()[-3000:]
    return proc


def test_sql_runs_on_the_standing_server(spark, root, topic_writer, tmp_path):
    topic_writer("orders.eu", partitions=2).produce(0, [b"a", b"b", b"c"])
    ingest(spark, IngestOptions(topics=("orders.eu",), root=root))
    port = free_port()
    log = tmp_path / "sql-server.log"
    server = start_server(root, port, log)
    try:
        record = json.loads((root / "cluster" / "sql-endpoint.json").read_text())
        assert record == {"url": f"sc://127.0.0.1:{port}", "root": str(root.resolve()), "pid": server.pid}

        # found through the root's record; the dotted topic table by its name
        done = topiclake("sql", "--data", str(root), "--verbose", "--format", "csv",
                         "SELECT partition, count(*) AS n FROM orders.eu GROUP BY partition")
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == ["partition,n", "0,3"]
        assert f"sql: on the SQL server at sc://127.0.0.1:{port}" in done.stderr

        # a table made through the server is a Delta table under the root, seen by the next client
        done = topiclake("sql", "--data", str(root), "CREATE TABLE summary AS SELECT 7 AS n")
        assert done.returncode == 0, done.stderr
        assert (root / "tables" / "summary" / "_delta_log").is_dir()
        done = topiclake("sql", "--data", str(root), "--format", "json", "SELECT n FROM summary")
        assert done.returncode == 0 and json.loads(done.stdout) == {"n": 7}, done.stderr
        done = topiclake("sql", "--data", str(root), "CREATE TABLE summary AS SELECT 8 AS n")
        assert done.returncode == 1 and done.stderr.startswith("error: [TABLE_OR_VIEW_ALREADY_EXISTS]"), done.stderr
        assert len(done.stderr.strip().splitlines()) == 1

        # a table ingested after the server started: queryable at once, in SHOW TABLES once settled
        topic_writer("late").produce(0, [b"x"])
        ingest(spark, IngestOptions(topics=("late",), root=root))
        done = topiclake("sql", "--data", str(root), "--format", "csv", "SELECT count(*) AS n FROM late")
        assert done.returncode == 0 and done.stdout.splitlines() == ["n", "1"], done.stderr

        def listed() -> bool:
            shown = topiclake("sql", "--data", str(root), "--format", "csv", "SHOW TABLES")
            return "late" in [line.split(",")[1] for line in shown.stdout.splitlines()[1:]]
        wait_for(listed, timeout=SETTLE_S + 30, interval=1.0, what="the new table in SHOW TABLES",
                 detail=lambda: log.read_text()[-3000:])

        # the server serves this root only: asked explicitly for another root, refused in one line
        other = tmp_path / "other"
        (other / "tables").mkdir(parents=True)
        done = topiclake("sql", "--data", str(other), "--endpoint", f"sc://127.0.0.1:{port}", "SELECT 1")
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith(f"error: the SQL server at sc://127.0.0.1:{port} serves {root.resolve()}, "
                                      f"not {other.resolve()}"), done.stderr
        assert server.poll() is None
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0, log.read_text()[-3000:]
    assert "sql-server: stopped" in log.read_text()
    assert not (root / "cluster" / "sql-endpoint.json").exists()
    assert " ERROR " not in log.read_text(), log.read_text()[-3000:]


def test_an_endpoint_nobody_serves_is_a_usage_error(root):
    (root / "tables").mkdir(parents=True)
    port = free_port()
    started = time.monotonic()
    done = topiclake("sql", "--data", str(root), "--endpoint", f"sc://127.0.0.1:{port}", "SELECT 1")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"error: no SQL server answers at sc://127.0.0.1:{port} (hint: start one "
                                        "with `topiclake sql-server`, or pass --endpoint none)"]
    done = topiclake("sql", "--data", str(root), "--endpoint", "http://x:1", "SELECT 1")
    assert done.returncode == 2 and done.stderr.startswith("error: not a Spark Connect endpoint: 'http://x:1'")
    assert time.monotonic() - started < 30  # no Spark started for either


def test_a_record_left_by_a_killed_server_is_ignored(root):
    """A dead server's record (kill -9 leaves it): `sql` starts its own Spark instead."""
    (root / "cluster").mkdir(parents=True)
    port = free_port()
    (root / "cluster" / "sql-endpoint.json").write_text(json.dumps(
        {"url": f"sc://127.0.0.1:{port}", "root": str(root.resolve()), "pid": 1}))
    from topiclake.lake.sql.endpoint import choose

    assert choose(root, None) is None
    assert choose(root, "none") is None
