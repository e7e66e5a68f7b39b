"""`topiclake sql` as a user types it, each call its own process and Spark (issue 31, points 3, 4
and 7): OPTIMIZE (and ZORDER BY) print their result and exit 0; a table with a dotted name is
created, listed, refused again in one line, and dropped for good; DELETE and UPDATE print no
warning; VACUUM's own report stays off stdout; Delta's retention error keeps its advice; --verbose
shows Spark's INFO log. Each call starts a Spark: the checks share as few calls as they can."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from topiclake.lake.runs.ingest import IngestOptions, ingest

pytestmark = pytest.mark.slow


def topiclake_sql(root, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TOPICLAKE_ROOT", "TOPICLAKE_CONFIG")}
    return subprocess.run([sys.executable, "-m", "topiclake.cli", "sql", *args, "--data", str(root)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=root.parent)


def test_optimize_ddl_dml_and_vacuum_say_what_they_did(spark, root, topic_writer):
    w = topic_writer("orders")
    w.produce(0, [b"1", b"2"])
    ingest(spark, IngestOptions(topics=("orders",), root=root, bootstrap="none"))
    w.produce(0, [b"3"])
    ingest(spark, IngestOptions(topics=("orders",), root=root, bootstrap="none"))

    done = topiclake_sql(root, "OPTIMIZE orders; OPTIMIZE orders ZORDER BY (`offset`); "
                               "CREATE TABLE `orders.summary` AS SELECT count(*) AS n FROM orders; SHOW TABLES; "
                               "DELETE FROM orders WHERE `offset` = 0; UPDATE orders SET value = NULL WHERE `offset` = 1; "
                               "VACUUM orders")
    assert done.returncode == 0, done.stderr
    # no warning per DELETE or UPDATE, no trace; VACUUM's own report is log, on stderr
    assert done.stderr.splitlines() == ["Deleted 0 files and directories in a total of 2 directories."]
    out = done.stdout
    assert out.count("file:") >= 3 and "numFilesAdded" in out  # both OPTIMIZEs' rows, and VACUUM's path
    assert "Deleted" not in out
    assert "orders.summary" in out  # SHOW TABLES lists the dotted name
    assert (root / "tables" / "orders.summary" / "_delta_log").is_dir()

    again = topiclake_sql(root, "CREATE TABLE `orders.summary` AS SELECT 1 AS n")
    assert again.returncode == 1
    assert again.stderr.splitlines() == [
        f"error: table orders.summary already exists (at {root.resolve() / 'tables' / 'orders.summary'}); "
        "DROP TABLE `orders.summary` first, or use CREATE OR REPLACE TABLE"]

    # Spark's own log, as --verbose says, on stderr beside the one error line
    dropped = topiclake_sql(root, "SELECT n FROM orders.summary; DROP TABLE orders.summary; SHOW TABLES; "
                                  "VACUUM orders RETAIN 0 HOURS", "--verbose")
    assert dropped.returncode == 1 and dropped.stdout.splitlines()[2:4] == ["3", "(1 row)"]
    assert "OK" in dropped.stdout.splitlines()
    assert "orders.summary" not in dropped.stdout  # SHOW TABLES after the DROP
    assert " INFO " in dropped.stderr
    error, = [line for line in dropped.stderr.splitlines() if line.startswith("error:")]
    assert error.startswith("error: [DELTA_VACUUM_RETENTION_PERIOD_TOO_SHORT]")
    assert "use a retention period of at least 168 hours" in error  # Delta's advice kept
    assert not (root / "tables" / "orders.summary").exists()
