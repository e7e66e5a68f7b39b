"""The lake commands in-process on the shared Spark session: SQL errors as one line with Spark's
message and position, several statements and -f FILE in one session, dotted table names as
written, the --max-rows notice, `topiclake backfill` / `coverage`, and the interrupt report."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from topiclake.cli import app
from topiclake.lake.jobs.interrupted import watch_ingest
from topiclake.lake.jobs.main import sql_main
from topiclake.lake.runs.ingest import IngestOptions, ingest, pipelines_for


def sql(capsys, root: Path, *args: str) -> tuple[int, str, str]:
    code = sql_main([*args, "--data", str(root)])
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_sql_errors_are_sparks_message_with_the_position(spark, root, topic_writer, capsys):
    topic_writer("orders").produce(0, [b"1", b"2"])
    ingest(spark, IngestOptions(topics=("orders",), root=root))

    code, out, err = sql(capsys, root, "SELECT * FORM orders")
    assert code == 1 and out == ""
    assert one_error_line(err) == ("error: [PARSE_SYNTAX_ERROR] Syntax error at or near 'orders': extra input "
                                   "'orders'. SQLSTATE: 42601 (line 1, pos 14)")

    code, _out, err = sql(capsys, root, "SELECT nope FROM orders")
    line = one_error_line(err)
    assert code == 1 and "[UNRESOLVED_COLUMN.WITH_SUGGESTION]" in line and "`nope`" in line
    assert line.endswith("(line 1, pos 7)")

    code, _out, err = sql(capsys, root, "SELECT * FROM ordrs")
    line = one_error_line(err)
    assert code == 1 and "[TABLE_OR_VIEW_NOT_FOUND]" in line and "`ordrs`" in line
    assert "(line 1, pos 14)" in line and line.endswith("tables: orders")


def test_several_statements_a_file_and_dotted_names_in_one_session(spark, root, topic_writer, capsys, tmp_path):
    topic_writer("demo.events", partitions=2).produce(1, [b"x", b"y", b"z"])
    ingest(spark, IngestOptions(topics=("demo.events",), root=root))

    # as written, with backticks, and in a join: each dotted name is found
    code, out, err = sql(capsys, root, "SELECT count(*) AS n FROM demo.events; "
                                       "SELECT max(offset) AS last FROM `demo.events` WHERE partition = 1;"
                                       "SELECT count(*) AS pairs FROM demo.events a JOIN demo.events b USING (offset)",
                         "--format", "json")
    assert (code, err) == (0, "")
    assert out.splitlines() == ['{"n": 3}', '{"last": 2}', '{"pairs": 3}']

    script = tmp_path / "q.sql"
    script.write_text("-- views of the current snapshots; a temporary view lives as long as the session\n"
                      "CREATE TEMPORARY VIEW late AS SELECT * FROM demo.events WHERE offset > 0;\n"
                      "SELECT count(*) AS n FROM late;\n")
    code, out, err = sql(capsys, root, "-f", str(script))
    assert (code, err) == (0, "") and out.splitlines()[0] == "OK" and "2" in out.splitlines()[-2]

    code, _out, err = sql(capsys, root, "SELECT * FROM demo.nope")
    line = one_error_line(err)
    assert code == 1 and "`demo`.`nope`" in line and line.endswith("tables: demo.events")


def test_max_rows_says_when_it_cut_the_result(spark, root, topic_writer, capsys):
    topic_writer("many").produce(0, [b"v"] * 5)
    ingest(spark, IngestOptions(topics=("many",), root=root))
    code, out, err = sql(capsys, root, "SELECT offset FROM many ORDER BY offset", "--max-rows", "3")
    assert code == 0 and out.splitlines()[-1] == "(3 rows; more were cut by --max-rows)"
    code, out, err = sql(capsys, root, "SELECT offset FROM many ORDER BY offset", "--max-rows", "3", "--format", "csv")
    assert out.splitlines() == ["offset", "0", "1", "2"]
    assert err.strip() == "sql: only the first 3 rows are shown; more were cut by --max-rows"
    code, out, err = sql(capsys, root, "SELECT offset FROM many", "--max-rows", "5")
    assert out.splitlines()[-1] == "(5 rows)" and err == ""


def test_backfill_and_coverage_commands_beside_ingest(spark, root, topic_writer):
    topic_writer("cmd").produce(0, [b"1", b"2", b"3"])
    runner = CliRunner()
    result = runner.invoke(app, ["ingest", "--topic", "cmd", "--data", str(root), "--bootstrap", "none"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["backfill", "--table", "cmd", "--topic", "cmd", "--partition", "0", "--from", "1",
                                 "--to", "9", "--data", str(root)])
    assert result.exit_code == 0, result.output
    assert "backfill cmd-0 offsets [1, 3)" in result.output
    assert "requested [1, 9): only [0, 3) is ingested, the rest was left out" in result.output
    result = runner.invoke(app, ["coverage", "--table", "cmd", "--topic", "cmd", "--data", str(root)])
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[0] == "cmd-0: committed 3; holds [0, 3)"

    topic_writer("other").produce(0, [b"x"])  # a topic that exists but was never ingested into cmd
    result = runner.invoke(app, ["coverage", "--table", "cmd", "--topic", "other", "--data", str(root)])
    assert result.exit_code == 2, result.output
    assert ("error: table cmd holds nothing of topic other and group topiclake-ingest-cmd committed none of it "
            "(it holds: cmd)") in result.output


def test_the_interrupt_report_reads_what_was_committed(spark, root, topic_writer):
    a, b = topic_writer("ia"), topic_writer("ib")
    a.produce(0, [b"1", b"2"])
    b.produce(0, [b"3"])
    options = IngestOptions(topics=("ia", "ib"), root=root)
    watch = watch_ingest(pipelines_for(options), {"ia": [0], "ib": [0]})
    assert watch().startswith("nothing was committed; table ia (group topiclake-ingest-ia has committed nothing "
                              "yet); table ib (")
    ingest(spark, IngestOptions(topics=("ia",), root=root))  # as if Ctrl-C came between the two tables
    assert watch() == ("committed table ia (group topiclake-ingest-ia at ia-0@2); not committed: table ib "
                       "(group topiclake-ingest-ib has committed nothing yet). The next run resumes from the "
                       "committed offsets")


def test_a_corrupt_segment_is_one_error_line(spark, root, topic_writer, capsys):
    from topiclake.lake.jobs.main import ingest_main

    w = topic_writer("broken")
    w.produce(0, [b"1", b"2"])
    with open(w.path(0), "r+b") as f:  # flip bytes inside the batch's records: its CRC no longer matches
        f.seek(70)
        f.write(b"\xff\xff\xff\xff")
    code = ingest_main(["--topic", "broken", "--data", str(root), "--bootstrap", "none"])
    _out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and err.strip().splitlines()[-1] == errors[0] and "Traceback" not in err, err
    assert code == 1 and errors[0].startswith("error: a Spark task failed: CorruptRecordError: ")
    assert "broken-0/00000000000000000000.log, position 0: CRC mismatch in batch at offset 0" in errors[0]


def test_the_compaction_interrupt_report_reads_the_cleaner_checkpoints(root, topic_writer):
    from topiclake.lake.jobs.interrupted import watch_compaction
    from topiclake.segments.maintenance import write_cleaner_offset

    w = topic_writer("kv", partitions=2)
    for p in (0, 1):
        w.produce(p, [b"v"])
    watch = watch_compaction(root, [("kv", 0), ("kv", 1)])
    assert watch() == "no partition was compacted"
    write_cleaner_offset(w.layout.log_dir("kv", 1), 1)  # what a finished swap of kv-1 leaves
    assert watch() == "compacted kv-1; not compacted: kv-0"
