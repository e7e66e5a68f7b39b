"""A crash between writing files and committing leaves the table as it was; the rerun is
exactly once, and vacuum clears the orphans."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow.compute as pc

from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.table.delta import app_id

from tests.support.lake import read_table

# The child runs a real ingest and dies (os._exit: no clean-up, like a killed driver) at the
# moment it would commit, after the executors wrote every file.
CHILD = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from topiclake.lake.runs import ingest as ing
    from topiclake.lake.table import delta
    from topiclake.lake.spark.session import get_session

    def die(*args, **kwargs):
        os._exit(99)

    delta.commit = die
    spark = get_session("crash-test", master="local[1]", conf={"spark.ui.enabled": "false"})
    ing.ingest(spark, ing.IngestOptions(topics=("crash",), root=Path(sys.argv[1])))
""")


def test_crash_before_commit_leaves_no_trace(spark, root, topic_writer):
    w = topic_writer("crash")
    w.produce(0, [b"a", b"b"])
    uri = root / "tables" / "crash"
    ingest(spark, IngestOptions(topics=("crash",), root=root))
    w.produce(0, [b"c", b"d"])
    committed_files = {str(p) for p in uri.rglob("*.parquet")}

    child = subprocess.run([sys.executable, "-c", CHILD, str(root)], capture_output=True, text=True, timeout=300)
    assert child.returncode == 99, child.stderr[-3000:]
    orphans = {str(p) for p in uri.rglob("*.parquet")} - committed_files
    assert orphans, "the child should have written files before dying"
    table, data = read_table(uri)
    assert table.version() == 0 and sorted(data["offset"].to_pylist()) == [0, 1]
    assert table.transaction_version(app_id("topiclake-ingest-crash", "crash", 0)) == 2

    ingest(spark, IngestOptions(topics=("crash",), root=root))
    table, data = read_table(uri)
    assert sorted(data["offset"].to_pylist()) == [0, 1, 2, 3]
    assert pc.count_distinct(data["offset"]).as_py() == 4
    assert table.transaction_version(app_id("topiclake-ingest-crash", "crash", 0)) == 4

    removed = table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True)
    assert {p.split("/")[-1] for p in removed} == {p.split("/")[-1] for p in orphans}
    assert sorted(read_table(uri)[1]["offset"].to_pylist()) == [0, 1, 2, 3]
