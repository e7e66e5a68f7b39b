"""retention.ms and retention.bytes over a tiered topic's table (lake/runs/history_retention.py):
the rows below each partition's first offset within retention go, a prefix as Kafka's segment deletion takes; a dry
run says what would go and changes nothing; the ingest's offsets stay; other topics' tables are
untouched."""

from __future__ import annotations

import datetime as dt

from deltalake import DeltaTable
from typer.testing import CliRunner

from tests.support.archive_rows import EPOCH, TOPIC, commit, rows
from topiclake.archive.reader import TopicTables
from topiclake.archive.table import app_id, ingest_group
from topiclake.cli import app
from topiclake.lake.runs.retention import RetentionOptions, format_summary, retain
from topiclake.segments.storage import StorageLayout, TopicRegistry

NOW_MS = int((EPOCH + dt.timedelta(milliseconds=500)).timestamp() * 1000)  # rows are EPOCH + 7 ms x offset


def _tiered_root(tmp_path, retention_ms: int, retention_bytes: int = -1):
    data = tmp_path / "data"
    registry = TopicRegistry(StorageLayout(data))
    registry.create(TOPIC, 2, {"remote.storage.enable": "true", "retention.ms": str(retention_ms),
                               "retention.bytes": str(retention_bytes)})
    registry.create("plain", 1, {"retention.ms": "1"})
    p0 = rows(0, list(range(100)))
    # offset 50 has an older timestamp than offset 43: it stays, as it would in its segment
    p0 = p0.set_column(p0.column_names.index("timestamp"), "timestamp",
                       [[EPOCH if o == 50 else ts.as_py() for o, ts in zip(range(100), p0["timestamp"])]])
    commit(str(data / "tables" / TOPIC), p0, {0: 100})
    commit(str(data / "tables" / TOPIC), rows(1, list(range(50))), {1: 50})
    plain = rows(0, list(range(10))).set_column(0, "topic", [["plain"] * 10])
    commit(str(data / "tables" / "plain"), plain, {})
    return data


def test_rows_past_retention_ms_go_as_a_prefix_of_each_partition(tmp_path):
    data = _tiered_root(tmp_path, retention_ms=200)  # the cutoff: EPOCH + 300 ms, offset 43's time
    uri = str(data / "tables" / TOPIC)
    before = DeltaTable(uri).version()

    dry = retain(RetentionOptions(root=data, now_ms=NOW_MS, dry_run=True))
    assert (f"table {uri}: would delete 86 rows past retention.ms or retention.bytes; the history now starts at "
            f"{TOPIC}-0 from 43, {TOPIC}-1 from 43") in format_summary(dry)
    assert DeltaTable(uri).version() == before  # a dry run changes nothing

    done = retain(RetentionOptions(root=data, now_ms=NOW_MS))
    assert not done.errors
    assert f"table {uri}: deleted 86 rows past retention.ms or retention.bytes" in format_summary(done)
    table = DeltaTable(uri)
    kept = table.to_pyarrow_table(columns=["partition", "offset"]).to_pylist()
    assert sorted((r["partition"], r["offset"]) for r in kept) == \
        [(0, o) for o in range(43, 100)] + [(1, o) for o in range(43, 50)]
    # what was ingested stays ingested: the log's retention still sees offsets up to 100 and 50 held
    assert table.transaction_version(app_id(ingest_group(TOPIC), TOPIC, 0)) == 100
    assert table.transaction_version(app_id(ingest_group(TOPIC), TOPIC, 1)) == 50
    tables = TopicTables(lambda topic: (str(data / "tables" / topic), None), ttl=0)
    assert (tables.first_offset(TOPIC, 0), tables.first_offset(TOPIC, 1)) == (43, 43)
    assert DeltaTable(str(data / "tables" / "plain")).to_pyarrow_table().num_rows == 10  # not tiered: kept

    again = retain(RetentionOptions(root=data, now_ms=NOW_MS))
    assert f"table {uri}: history within retention.ms and retention.bytes: nothing to delete" in format_summary(again)


def test_the_retain_command_prints_what_it_would_delete_from_the_history(tmp_path):
    data = _tiered_root(tmp_path, retention_ms=200)
    result = CliRunner().invoke(app, ["retain", "--data", str(data), "--now-ms", str(NOW_MS), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "would delete 86 rows past retention.ms or retention.bytes" in result.output
    assert DeltaTable(str(data / "tables" / TOPIC)).to_pyarrow_table().num_rows == 150


def test_rows_beyond_retention_bytes_go_oldest_first(tmp_path):
    data = _tiered_root(tmp_path, retention_ms=-1, retention_bytes=300)
    uri = str(data / "tables" / TOPIC)
    before = {p: {r["offset"]: len(r["key"] or b"") + len(r["value"] or b"")
                  for r in DeltaTable(uri).to_pyarrow_table().to_pylist() if r["partition"] == p} for p in (0, 1)}
    expected = {}
    for p, sizes in before.items():  # the newest rows whose key and value bytes fit in 300
        total, first = 0, max(sizes) + 1
        for offset in sorted(sizes, reverse=True):
            total += sizes[offset]
            if total > 300:
                break
            first = offset
        expected[p] = first
    assert all(0 < first < max(before[p]) for p, first in expected.items())

    done = retain(RetentionOptions(root=data, now_ms=NOW_MS))
    assert not done.errors
    kept = DeltaTable(uri).to_pyarrow_table(columns=["partition", "offset"]).to_pylist()
    assert sorted((r["partition"], r["offset"]) for r in kept) == sorted(
        (p, o) for p in (0, 1) for o in before[p] if o >= expected[p])
