"""`topiclake retain` records its run (no Spark needed), a dry run does not, and `topiclake metrics`
serves the records and says a bad root or address in one line. The Spark side (ingest runs,
freshness, lag) is in tests/lake/test_pipeline_metrics.py."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from tests.support.retention_logs import DAY, T0, bases, make_log
from topiclake.cli import app
from topiclake.lake.metrics.run_metrics import pipeline_runs, textfile_path

runner = CliRunner()
RUN = {"operation": "retention", "table": "*", "group": ""}


def gauges(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_retention_run_is_recorded_and_a_dry_run_is_not(tmp_path):
    root = tmp_path / "data"
    directory = make_log(root, config={"retention.ms": str(DAY)})
    before = bases(directory)
    now = str(T0 + 3 * DAY + DAY // 2)

    dry = runner.invoke(app, ["retain", "--data", str(root), "--now-ms", now, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert not textfile_path(root, "retention", "*").exists() and pipeline_runs(root) == []

    real = runner.invoke(app, ["retain", "--data", str(root), "--now-ms", now])
    assert real.exit_code == 0, real.output
    deleted = before[: len(before) - len(bases(directory))]
    assert deleted
    assert textfile_path(root, "retention", "*") == root / "metrics" / "retention-*.prom"

    shown = runner.invoke(app, ["metrics", "--data", str(root)])
    assert shown.exit_code == 0, shown.output
    found = gauges(shown.output)
    assert found["topiclake_pipeline_last_run_success"] == [(RUN, 1)]
    assert found["topiclake_pipeline_last_run_files"] == [(RUN, len(deleted))]
    assert found["topiclake_pipeline_last_run_offset_first"] == [
        ({**RUN, "topic": "events", "partition": "0"}, deleted[0])]
    assert found["topiclake_pipeline_last_run_offset_end"] == [
        ({**RUN, "topic": "events", "partition": "0"}, bases(directory)[0])]
    assert found["topiclake_pipeline_last_run_quality"] == [
        ({**RUN, "result": r}, 1 if r == "none" else 0) for r in ("pass", "fail", "none")]
    runs = pipeline_runs(root)
    assert [(r.operation, r.table, r.success, r.files) for r in runs] == [("retention", "*", True, len(deleted))]
    assert runs[0].bytes == found["topiclake_pipeline_last_run_bytes"][0][1] > 0


def test_metrics_of_a_root_without_runs_or_tables(tmp_path):
    shown = runner.invoke(app, ["metrics", "--data", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    found = gauges(shown.output)
    assert "topiclake_table_up" not in found and "topiclake_pipeline_last_run_success" not in found
    assert found["topiclake_lake_scrape_duration_seconds"][0][1] >= 0


def test_metrics_errors_are_one_line(tmp_path):
    missing = runner.invoke(app, ["metrics", "--data", str(tmp_path / "nope")])
    assert missing.exit_code == 1 and missing.output.count("\n") == 1
    assert "storage root" in missing.output and "does not exist" in missing.output

    bad = runner.invoke(app, ["metrics", "--data", str(tmp_path), "--listen", "localhost"])
    assert bad.exit_code == 2 and "expected HOST:PORT" in bad.output and bad.output.count("\n") == 1
