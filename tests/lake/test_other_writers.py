"""Topic tables that other Delta writers change: delta-spark's OPTIMIZE (ZORDER BY), VACUUM, DELETE,
UPDATE and RESTORE between two ingests and during one. Exactly once must hold: the next ingest adds
exactly the records after the group's offsets, an ingest never loses its offsets to another
writer's commit and never commits twice. After a RESTORE the offsets follow the data (the group
reads again what the RESTORE took out)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from deltalake import DeltaTable

from topiclake.lake.errors import ConcurrentWriterError
from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.table import delta
from topiclake.lake.table.delta import app_id, group_offset

from tests.support.lake import read_table

GROUP = "topiclake-ingest-orders"


def offsets_held(uri) -> list[tuple[int, int]]:
    _table, rows = read_table(uri)
    return sorted(zip(rows["partition"].to_pylist(), rows["offset"].to_pylist()))


def sql(spark, statement: str, uri) -> list:
    return spark.sql(statement.format(t=f"delta.`{uri}`")).collect()


@pytest.fixture
def orders(spark, root, topic_writer):
    """orders, 2 partitions: [0, 4) and [0, 2) ingested in two runs (two files per partition)."""
    w = topic_writer("orders", partitions=2)
    w.produce(0, [b"a", b"b"])
    w.produce(1, [b"c"])
    run = IngestOptions(topics=("orders",), root=root, bootstrap="none")
    ingest(spark, run)
    w.produce(0, [b"d", b"e"])
    w.produce(1, [b"f"])
    ingest(spark, run)
    return w, run, root / "tables" / "orders"


def test_optimize_zorder_vacuum_delete_update_between_ingests(spark, orders):
    w, run, uri = orders
    sql(spark, "OPTIMIZE {t} ZORDER BY (`offset`)", uri)
    sql(spark, "DELETE FROM {t} WHERE `partition` = 0 AND `offset` = 1", uri)
    sql(spark, "UPDATE {t} SET value = CAST('F' AS BINARY) WHERE `partition` = 1 AND `offset` = 1", uri)
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        sql(spark, "VACUUM {t} RETAIN 0 HOURS", uri)
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    operations = [h["operation"] for h in DeltaTable(str(uri)).history(5)]
    assert operations == ["VACUUM END", "VACUUM START", "UPDATE", "DELETE", "OPTIMIZE"]
    assert DeltaTable(str(uri)).transaction_version(app_id(GROUP, "orders", 0)) == 4  # the txns survived them
    w.produce(0, [b"g"])
    w.produce(1, [b"h"])
    result = ingest(spark, run)
    assert [(p.plan.start_offset, p.plan.end_offset, p.records) for p in result.tables[0].partitions] == \
        [(4, 5, 1), (2, 3, 1)]
    assert offsets_held(uri) == [(0, 0), (0, 2), (0, 3), (0, 4), (1, 0), (1, 1), (1, 2)]
    rows = read_table(uri)[1].to_pylist()
    assert [r["value"] for r in rows if (r["partition"], r["offset"]) == (1, 1)] == [b"F"]  # the UPDATE's


def test_restore_takes_the_group_back_with_the_data(spark, orders):
    w, run, uri = orders
    sql(spark, "RESTORE TABLE {t} TO VERSION AS OF 0", uri)
    table = DeltaTable(str(uri))
    # delta-spark's RESTORE keeps the newest txn actions: the offsets alone would say [2, 4) is held
    assert table.transaction_version(app_id(GROUP, "orders", 0)) == 4
    assert (group_offset(table, GROUP, "orders", 0), group_offset(table, GROUP, "orders", 1)) == (2, 1)
    result = ingest(spark, run)
    assert [(p.plan.start_offset, p.plan.end_offset) for p in result.tables[0].partitions] == [(2, 4), (1, 2)]
    assert offsets_held(uri) == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]
    assert ingest(spark, run).records == 0  # and from there on as usual
    # RESTORE by timestamp, to before the first ingest's second run, the same way
    # delta-spark dates a version by its log file's modification time, delta-rs's history by the
    # commitInfo it wrote just before: the later of the two is version 0 for both
    first_commit = Path(str(uri)) / "_delta_log" / f"{0:020d}.json"
    created = max(DeltaTable(str(uri)).history()[-1]["timestamp"], first_commit.stat().st_mtime_ns // 1_000_000)
    at = dt.datetime.fromtimestamp(created / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    sql(spark, f"RESTORE TABLE {{t}} TO TIMESTAMP AS OF '{at}'", uri)
    assert ingest(spark, run).records == 3
    assert offsets_held(uri) == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]


@pytest.mark.parametrize("other", [
    "OPTIMIZE {t} ZORDER BY (`offset`)",
    "DELETE FROM {t} WHERE `offset` = 0",
    "UPDATE {t} SET key = NULL WHERE `offset` = 1",
    "VACUUM {t}",
])
def test_another_writer_commits_while_an_ingest_runs(spark, orders, monkeypatch, other):
    """The other writer commits after the ingest planned and wrote its files, before its commit:
    the ingest still commits its files and offsets, once."""
    w, run, uri = orders
    w.produce(0, [b"x", b"y"])
    w.produce(1, [b"z"])
    before = set(offsets_held(uri))
    real_commit = delta.commit

    def commit_after_the_other_writer(*args, **kwargs):
        sql(spark, other, uri)
        monkeypatch.setattr(delta, "commit", real_commit)
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(delta, "commit", commit_after_the_other_writer)
    result = ingest(spark, run)
    table = DeltaTable(str(uri))
    assert result.tables[0].version == table.version()
    assert [table.transaction_version(app_id(GROUP, "orders", p)) for p in (0, 1)] == [6, 3]
    deleted = {(0, 0), (1, 0)} if other.startswith("DELETE") else set()
    assert set(offsets_held(uri)) == (before - deleted) | {(0, 4), (0, 5), (1, 2)}
    assert len(offsets_held(uri)) == len(set(offsets_held(uri)))  # nothing twice
    assert ingest(spark, run).records == 0


def test_a_restore_while_an_ingest_runs_makes_it_commit_nothing(spark, orders, monkeypatch):
    w, run, uri = orders
    w.produce(0, [b"x"])
    real_commit = delta.commit

    def restore_first(*args, **kwargs):
        sql(spark, "RESTORE TABLE {t} TO VERSION AS OF 0", uri)
        monkeypatch.setattr(delta, "commit", real_commit)
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(delta, "commit", restore_first)
    with pytest.raises(ConcurrentWriterError, match="another writer committed offsets"):
        ingest(spark, run)
    assert offsets_held(uri) == [(0, 0), (0, 1), (1, 0)]  # as restored; the run's files are orphans
    result = ingest(spark, run)
    assert [(p.plan.start_offset, p.plan.end_offset) for p in result.tables[0].partitions] == [(2, 5), (1, 2)]
    assert offsets_held(uri) == [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (1, 0), (1, 1)]
