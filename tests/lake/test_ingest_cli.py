"""`topiclake ingest` as a user types it (issue 31, point 6): `--partition-by hour` for a table
created by day is noted in the summary (the table keeps its partitioning), and `ingest | head -1`
ends quietly: no BrokenPipeError, exit 141 as a Unix tool killed by SIGPIPE."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from topiclake.lake.jobs.main import ingest_main

from tests.support.lake import read_table

pytestmark = pytest.mark.slow


def test_partition_by_of_an_existing_table_is_noted(spark, root, topic_writer, capsys):
    w = topic_writer("clicks")
    w.produce(0, [b"1"])
    assert ingest_main(["--topic", "clicks", "--data", str(root), "--bootstrap", "none"]) == 0
    assert "note:" not in capsys.readouterr().out
    w.produce(0, [b"2"])
    assert ingest_main(["--topic", "clicks", "--data", str(root), "--bootstrap", "none", "--partition-by", "hour"]) == 0
    out = capsys.readouterr().out
    assert ("note: --partition-by hour is not applied: an existing table keeps the partitioning "
            "it was created with (record_date)") in out
    table, data = read_table(root / "tables" / "clicks")
    assert table.metadata().partition_columns == ["record_date"] and data.num_rows == 2


def test_a_reader_that_leaves_early_ends_the_output_quietly(spark, root, topic_writer):
    topic_writer("clicks").produce(0, [b"1", b"2"])
    env = {k: v for k, v in os.environ.items() if k not in ("TOPICLAKE_ROOT", "TOPICLAKE_CONFIG")}
    reader_gone = subprocess.Popen([sys.executable, "-m", "topiclake.cli", "ingest", "--topic", "clicks", "--data",
                                    str(root), "--bootstrap", "none"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env=env, cwd=root.parent)
    reader_gone.stdout.close()  # as `| head -1` does once it has its line (here: before any)
    _out, err = reader_gone.communicate(timeout=300)
    assert reader_gone.returncode == 141, err
    assert b"Traceback" not in err and b"BrokenPipe" not in err and b"error" not in err
    assert read_table(root / "tables" / "clicks")[1].num_rows == 2  # the run itself was done
