"""Every error path of the lake jobs and their `topiclake` commands that is found before Spark
starts: one line on stderr (`error: ...`, a hint where one helps), a non-zero exit, no traceback
unless --debug. Each runs as a real process with Java made unreachable (JAVA_HOME and SPARK_HOME
point nowhere), so a job that started Spark before checking would fail differently."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from topiclake.lake.table import delta
from topiclake.lake.table.schema import table_schema

from tests.support.lake import TopicWriter

REPO = Path(__file__).resolve().parents[2]
NO_JAVA = {"JAVA_HOME": "/nonexistent-java", "SPARK_HOME": "/nonexistent-spark"}


def run(argv: list[str], *, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, **NO_JAVA}
    env.pop("TOPICLAKE_ROOT", None)
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


def job(name: str) -> list[str]:
    return [str(REPO / "jobs" / f"{name}.py")]


def cli(name: str) -> list[str]:
    return ["-m", "topiclake.cli", name]


@pytest.fixture(scope="module")
def clicks_root(tmp_path_factory) -> Path:
    """A topic `clicks` (2 partitions) and a table `clicks` whose group ingested [2, 5) of clicks-0,
    made with delta-rs alone (no Spark needed for these checks)."""
    clicks_root = tmp_path_factory.mktemp("lake")
    w = TopicWriter(clicks_root, "clicks", partitions=2)
    w.produce(0, [b"a"] * 6)
    uri = str(clicks_root / "tables" / "clicks")
    delta.commit(uri, group="topiclake-ingest-clicks", actions=[],
                 offsets=[delta.OffsetUpdate("clicks", 0, None, 5)], schema=table_schema(()), partition_by=[],
                 metadata={"topiclake": {"operation": "ingest", "group": "topiclake-ingest-clicks",
                                         "ranges": {"clicks:0": [2, 5]}}})
    return clicks_root


def assert_one_line_error(result: subprocess.CompletedProcess, code: int, *fragments: str) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


ARGUMENT_MISTAKES = [
    (["ingest"], [], "the following arguments are required: --topic"),
    (["ingest"], ["--topic", "clicks", "--target-task-bytes", "0"], "argument --target-task-bytes: 0 is below 1"),
    (["backfill"], ["--table", "clicks", "--topic", "clicks", "--partition", "x", "--from", "1", "--to", "2"],
     "argument --partition: 'x' is not a whole number"),
    (["backfill"], ["--table", "clicks", "--topic", "clicks", "--partition", "0", "--from", "a", "--to", "2"],
     "argument --from: 'a' is not an offset"),
    (["coverage"], ["--topic", "clicks"], "the following arguments are required: --table"),
    (["sql"], ["SELECT 1", "--format", "xml"], "argument --format: invalid choice: 'xml'"),
    (["sql"], ["SELECT 1", "--max-rows", "0"], "argument --max-rows: 0 is below 1"),
    (["compact"], ["--now-ms", "yesterday"], "argument --now-ms: 'yesterday' is not a whole number"),
    (["retention"], ["--vacuum-hours", "-1"], "argument --vacuum-hours: -1 is below 0"),
    (["ingest"], ["--topic", "clicks", "--no-such-flag"], "No such option: --no-such-flag"),
    # issue 31, point 6: a misspelt option is named as such, not as the required one it replaced
    (["ingest"], ["--topc", "clicks"], "No such option: --topc (did you mean --topic?)"),
    (["ingest"], ["--topic", "clicks", "--starting-offsets", "garbage"],
     "argument --starting-offsets: 'garbage': expected earliest, latest, JSON"),
    (["ingest"], ["--topic", "clicks", "--ending-offsets", "earliest"],
     "argument --ending-offsets: 'earliest' makes no sense as an end"),
    (["sql"], ["SELECT 1", "--master", "local[zzz]"], "argument --master: 'local[zzz]' is not a Spark master"),
]


@pytest.mark.parametrize("name, args, message", ARGUMENT_MISTAKES, ids=lambda v: v if isinstance(v, str) else None)
def test_argument_mistakes_are_one_line_with_exit_2(tmp_path, name, args, message):
    name = name[0]
    line = assert_one_line_error(run(job(name) + args, cwd=tmp_path), 2, message)
    assert line.endswith(f"(see {name}.py --help)")


@pytest.mark.parametrize("name", ["ingest", "backfill", "coverage", "sql", "rebuild"])
def test_the_commands_report_argument_mistakes_like_their_jobs(tmp_path, name):
    line = assert_one_line_error(run(cli(name) + ["--bogus"], cwd=tmp_path), 2)
    assert f"(see topiclake {name} --help)" in line


def test_commands_and_jobs_take_the_same_flags(tmp_path):
    for name in ("ingest", "backfill", "coverage", "sql", "rebuild"):
        from_job = run(job(name) + ["--help"], cwd=tmp_path)
        from_cli = run(cli(name) + ["--help"], cwd=tmp_path)
        assert from_job.returncode == from_cli.returncode == 0
        options = lambda text: sorted(w.rstrip(",") for w in text.split() if w.startswith("--"))  # noqa: E731
        assert options(from_job.stdout) == options(from_cli.stdout) and "--data" in from_cli.stdout


def test_a_hint_never_names_a_command_that_is_itself_refused(clicks_root, tmp_path):
    """An append table asked for `--kind append --format debezium`: the combination is the mistake
    (rebuilding with it would be refused the same way), not the table's kind."""
    assert_one_line_error(run(cli("ingest") + ["--topic", "clicks", "--kind", "append", "--format", "debezium",
                                               "--data", str(clicks_root)], cwd=tmp_path), 2,
                          "format debezium needs an upsert table", "hint: add --kind upsert")


def test_an_unknown_topic_is_named_with_the_topics_there(clicks_root, tmp_path):
    for argv in (job("ingest"), cli("ingest")):
        assert_one_line_error(run(argv + ["--topic", "clikcs", "--data", str(clicks_root)], cwd=tmp_path), 2,
                              "unknown topic 'clikcs'", "topics there: clicks", "hint: `topiclake topics list`")
    assert_one_line_error(run(job("coverage") + ["--table", "clicks", "--topic", "nope", "--data", str(clicks_root)],
                              cwd=tmp_path), 2, "unknown topic 'nope'")
    assert_one_line_error(run(job("compact") + ["--topic", "nope", "--data", str(clicks_root)], cwd=tmp_path), 2,
                          "unknown topic 'nope'")
    assert_one_line_error(run(job("retention") + ["--topic", "nope", "--data", str(clicks_root)], cwd=tmp_path), 2,
                          "unknown topic 'nope'")


@pytest.mark.parametrize("name, args", [
    ("ingest", ["--topic", "clicks"]),
    ("backfill", ["--table", "t", "--topic", "clicks", "--partition", "0", "--from", "0", "--to", "1"]),
    ("coverage", ["--table", "t", "--topic", "clicks"]),
    ("rebuild", ["t", "--kind", "upsert"]),
    ("sql", ["SELECT 1"]),
    ("compact", []),
    ("retention", []),
])
def test_a_missing_storage_root_is_reported_before_spark(tmp_path, name, args):
    missing = tmp_path / "no-such-root"
    line = assert_one_line_error(run(job(name) + args + ["--data", str(missing)], cwd=tmp_path), 2,
                                 f"storage root {missing} does not exist", "hint: pass --data DIR")
    assert "topics/" not in line


def test_the_root_from_the_environment_is_checked_too(tmp_path):
    env = {**os.environ, **NO_JAVA, "TOPICLAKE_ROOT": str(tmp_path / "gone")}
    result = subprocess.run([sys.executable, *cli("sql"), "SELECT 1"], capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=120)
    assert_one_line_error(result, 2, f"storage root {tmp_path / 'gone'} does not exist")


def test_unknown_partition_and_table(clicks_root, tmp_path):
    assert_one_line_error(run(cli("coverage") + ["--table", "clicks", "--topic", "clicks", "--partition", "7",
                                                 "--data", str(clicks_root)], cwd=tmp_path), 2,
                          "topic 'clicks' has partitions 0-1, not 7")
    assert_one_line_error(run(job("backfill") + ["--table", "orders", "--topic", "clicks", "--partition", "0",
                                                 "--from", "2", "--to", "3", "--data", str(clicks_root)], cwd=tmp_path), 2,
                          "no Delta table at", "tables under", "clicks", "hint: ingest the topic first")


@pytest.mark.parametrize("span, message", [
    (("4", "3"), "backfill range [4, 3) is inverted: --from (inclusive) must be below --to (exclusive)"),
    (("3", "3"), "backfill range [3, 3) is empty"),
    (("5", "9"), "backfill of clicks-0 offsets [5, 9) is past what was ingested: "
                 "group 'topiclake-ingest-clicks' has ingested [2, 5)"),
    (("0", "2"), "backfill of clicks-0 offsets [0, 2) is before what was ingested: "
                 "group 'topiclake-ingest-clicks' has ingested [2, 5) (it began at 2)"),
])
def test_backfill_ranges_outside_what_was_ingested_say_which(clicks_root, tmp_path, span, message):
    for argv in (job("backfill"), cli("backfill")):
        assert_one_line_error(run(argv + ["--table", "clicks", "--topic", "clicks", "--partition", "0", "--from",
                                          span[0], "--to", span[1], "--data", str(clicks_root)], cwd=tmp_path), 2, message)


def test_a_partition_the_group_never_ingested(clicks_root, tmp_path):
    assert_one_line_error(run(job("backfill") + ["--table", "clicks", "--topic", "clicks", "--partition", "1",
                                                 "--from", "0", "--to", "1", "--data", str(clicks_root)], cwd=tmp_path), 2,
                          "group 'topiclake-ingest-clicks' has ingested nothing of clicks-1")


def test_sql_statements_from_two_places_and_unreadable_files(clicks_root, tmp_path):
    assert_one_line_error(run(job("sql") + ["SELECT 1", "-f", "q.sql", "--data", str(clicks_root)], cwd=tmp_path), 2,
                          "as arguments or with --file, not both")
    assert_one_line_error(run(cli("sql") + ["-f", "missing.sql", "--data", str(clicks_root)], cwd=tmp_path), 2,
                          "cannot read --file missing.sql: No such file or directory")


def test_debug_adds_the_traceback(clicks_root, tmp_path):
    result = run(job("ingest") + ["--topic", "nope", "--data", str(clicks_root), "--debug"], cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: unknown topic 'nope'")
