"""`topiclake ingest` / `topiclake sql` and jobs/*.py, in-process on the shared test session."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from typer.testing import CliRunner

from topiclake.cli import app

from tests.support.lake import read_table

JOBS = Path(__file__).resolve().parents[2] / "jobs"


def load_job(name: str):
    spec = importlib.util.spec_from_file_location(f"job_{name}", JOBS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_ingests_several_topics_and_queries_them(spark, root, topic_writer):
    topic_writer("a").produce(0, [b"1", b"2"])
    topic_writer("b", partitions=2).produce(1, [b"3"])
    runner = CliRunner()
    result = runner.invoke(app, ["ingest", "--topic", "a", "--topic", "b", "--data", str(root)])
    assert result.exit_code == 0, result.output
    assert "a-0: offsets [0, 2) 2 records" in result.output and "b-1: offsets [0, 1) 1 records" in result.output
    assert read_table(root / "tables" / "a")[1].num_rows == 2 and read_table(root / "tables" / "b")[1].num_rows == 1

    result = runner.invoke(app, ["sql", "SELECT topic, count(*) AS n FROM a GROUP BY topic UNION ALL "
                                        "SELECT topic, count(*) FROM b GROUP BY topic ORDER BY topic",
                                 "--format", "json", "--data", str(root)])
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in result.output.strip().splitlines()] == [
        {"topic": "a", "n": 2}, {"topic": "b", "n": 1}]


def test_cli_reports_data_loss_as_an_error(spark, root, topic_writer):
    w = topic_writer("gone")
    w.segment_base[0] = w.next_offset[0] = 4
    w.produce(0, [b"x"])
    result = CliRunner().invoke(app, ["ingest", "--topic", "gone", "--data", str(root),
                                      "--starting-offsets", '{"gone": {"0": 1}}'])
    assert result.exit_code == 1 and "offsets [1, 4) were deleted" in result.output


def test_jobs_ingest_then_backfill(spark, root, topic_writer, capsys):
    topic_writer("j").produce(0, [b"1", b"2", b"3"])
    assert load_job("ingest").main(["--topic", "j", "--data", str(root), "--partition-by", "none"]) == 0
    table, data = read_table(root / "tables" / "j")
    assert table.metadata().partition_columns == [] and data.num_rows == 3
    assert load_job("backfill").main(["--table", "j", "--topic", "j", "--partition", "0", "--from", "1",
                                      "--to", "3", "--data", str(root)]) == 0
    assert "backfill j-0 offsets [1, 3)" in capsys.readouterr().out
    assert sorted(read_table(root / "tables" / "j")[1]["offset"].to_pylist()) == [0, 1, 2]
    assert load_job("coverage").main(["--table", "j", "--topic", "j", "--data", str(root)]) == 0
