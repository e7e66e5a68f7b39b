"""An upsert table remembers the deletes that won (tombstones.py), so that an older change arriving
later from another partition never brings a deleted key back; and a writer that lands between the
merge's check and its commit (OPTIMIZE, a plain append) stops the commit instead of leaving a key
twice. Real segment files, real Spark, real Delta tables read back with deltalake."""

from __future__ import annotations

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from topiclake.lake.errors import ConcurrentWriterError
from topiclake.lake.keyed import table_kind, tombstones, upsert
from topiclake.lake.runs.backfill import BackfillOptions, backfill
from topiclake.lake.table.delta import app_id, set_properties

from tests.support.lake import read_table
from tests.lake.upserts import compacted, run, table_rows

OLDER, NEWER = 1_714_521_600_000, 1_714_521_700_000


def remembered(uri) -> dict[int, list[bytes]]:
    """The deleted keys each bucket remembers, from the generation the snapshot names."""
    table = DeltaTable(str(uri))
    out = {}
    for bucket, generation in tombstones.generations(table, range(table_kind.DEFAULT_BUCKETS)).items():
        if generation != tombstones.NONE:
            out[bucket] = pq.read_table(uri / tombstones.path_of(bucket, generation)).column("key").to_pylist()
    return {b: keys for b, keys in out.items() if keys}


def test_a_deleted_key_stays_deleted_when_an_older_change_from_another_partition_arrives_later(
        spark, root, topic_writer):
    w = compacted(topic_writer, root, "acct", partitions=2)
    uri = root / "tables" / "acct"
    w.produce(0, [b"1", None], keys=[b"k", b"k"], timestamp=NEWER)  # k's newest change: deleted in partition 0
    w.produce(0, [b"1"], keys=[b"j"], timestamp=NEWER)
    run(spark, root, "acct")
    assert table_rows(uri) == {b"j": b"1"}
    assert [b"k"] in remembered(uri).values()

    w.produce(1, [b"older"], keys=[b"k"], timestamp=OLDER)  # a lagging partition's older change of k
    run(spark, root, "acct")
    assert table_rows(uri) == {b"j": b"1"}  # split over two runs: the same table as one run would give

    backfill(spark, BackfillOptions(root=root, table="acct", topic="acct", partition=1, from_offset=0, to_offset=1))
    assert table_rows(uri) == {b"j": b"1"}  # a backfill of the other partition does not bring it back either

    w.produce(1, [b"newest"], keys=[b"k"], timestamp=NEWER + 1000)  # a newer change does
    run(spark, root, "acct")
    assert table_rows(uri) == {b"j": b"1", b"k": b"newest"}
    assert remembered(uri) == {}  # no longer deleted: nothing remembered, the superseded files are gone
    assert all(_is_current(uri, p) for p in (uri / tombstones.TOMBSTONES_DIR).rglob("*.parquet"))


def _is_current(uri, path) -> bool:
    bucket = int(path.parent.name.removeprefix("bucket-"))
    return DeltaTable(str(uri)).transaction_version(tombstones.app_id(bucket)) == int(path.stem.split(".")[0])


def test_tombstones_are_invisible_to_readers_and_expire_after_the_retention(spark, root, topic_writer):
    w = compacted(topic_writer, root, "expiry", partitions=2)
    uri = root / "tables" / "expiry"
    w.produce(0, [b"1", None, b"1"], keys=[b"k", b"k", b"j"], timestamp=NEWER)
    run(spark, root, "expiry")
    assert spark.read.format("delta").load(str(uri)).count() == 1  # Spark sees rows, never tombstones
    assert [b"k"] in remembered(uri).values()

    set_properties(str(uri), {tombstones.RETENTION_PROPERTY: "0"})  # ALTER TABLE ... SET TBLPROPERTIES
    w.produce(1, [b"older"], keys=[b"k"], timestamp=OLDER)
    run(spark, root, "expiry")
    # past the retention the delete is forgotten, as Kafka forgets a tombstone after delete.retention.ms
    assert table_rows(uri) == {b"j": b"1", b"k": b"older"}
    assert remembered(uri) == {}


@pytest.mark.parametrize("other_writer", ["optimize", "append"])
def test_a_writer_landing_between_the_merge_check_and_its_commit_stops_the_commit(
        spark, root, topic_writer, monkeypatch, other_writer):
    w = compacted(topic_writer, root, "raced")
    uri = root / "tables" / "raced"
    w.produce(0, [b"1", b"1"], keys=[b"a", b"b"])
    run(spark, root, "raced")
    _table, data = read_table(uri)
    write_deltalake(str(uri), data.filter(pc.equal(data["key"], b"a")), mode="append")  # a second file in a's bucket
    w.produce(0, [b"2"], keys=[b"a"])

    real, raced = upsert.MergePlan.precheck, []

    def precheck_then_another_writer(plan, snapshot):
        real(plan, snapshot)
        if not raced:  # right after the check passed, before the commit
            raced.append(other_writer)
            if other_writer == "optimize":
                assert DeltaTable(str(uri)).optimize.compact()["numFilesRemoved"] >= 2
            else:
                _t, rows = read_table(uri)
                write_deltalake(str(uri), rows.filter(pc.equal(rows["key"], b"a")), mode="append")

    monkeypatch.setattr(upsert.MergePlan, "precheck", precheck_then_another_writer)
    with pytest.raises(ConcurrentWriterError, match="another writer changed the files of key bucket"):
        run(spark, root, "raced")
    table, _ = read_table(uri)
    assert table.transaction_version(app_id("topiclake-ingest-raced", "raced", 0)) == 2  # nothing committed
    monkeypatch.setattr(upsert.MergePlan, "precheck", real)
    run(spark, root, "raced")
    assert table_rows(uri) == {b"a": b"2", b"b": b"1"}  # each key once, its newest value


def test_a_table_whose_properties_commit_failed_is_still_committed_and_healed_by_the_next_run(
        spark, root, topic_writer, monkeypatch):
    from deltalake.exceptions import DeltaError

    from topiclake.lake.table import delta

    w = compacted(topic_writer, root, "props")
    uri = root / "tables" / "props"
    w.produce(0, [b"1"], keys=[b"a"])

    def fails(*_args, **_kwargs):
        raise DeltaError("injected: the properties commit failed")

    monkeypatch.setattr(delta, "set_properties", fails)
    result = run(spark, root, "props")
    assert [t.version for t in result.tables] == [0]  # the data and offsets committed: the run succeeded
    assert "topiclake.kind" not in DeltaTable(str(uri)).metadata().configuration
    monkeypatch.undo()
    w.produce(0, [b"2"], keys=[b"a"])
    run(spark, root, "props")
    assert DeltaTable(str(uri)).metadata().configuration["topiclake.kind"] == "upsert"
    assert table_rows(uri) == {b"a": b"2"}


def test_an_upsert_table_with_deletion_vectors_is_refused_in_one_line(spark, root, topic_writer):
    w = compacted(topic_writer, root, "dvs")
    uri = root / "tables" / "dvs"
    w.produce(0, [b"1", b"1"], keys=[b"a", b"b"])
    run(spark, root, "dvs")
    spark.sql(f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = true)")
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE key = X'61'")
    w.produce(0, [b"2"], keys=[b"b"])
    with pytest.raises(Exception, match="deletion vectors are enabled") as raised:
        run(spark, root, "dvs")
    assert "\n" not in str(raised.value)
    assert spark.read.format("delta").load(str(uri)).count() == 1  # nothing changed: a is still deleted


def test_vacuum_by_delta_spark_and_delta_rs_leaves_the_remembered_deletes(spark, root, topic_writer):
    w = compacted(topic_writer, root, "vacuumed", partitions=2)
    uri = root / "tables" / "vacuumed"
    w.produce(0, [b"1", None, b"1"], keys=[b"k", b"k", b"j"], timestamp=NEWER)
    run(spark, root, "vacuumed")
    w.produce(0, [b"2"], keys=[b"j"], timestamp=NEWER)  # another commit: files for VACUUM to remove
    run(spark, root, "vacuumed")
    kept = sorted((uri / tombstones.TOMBSTONES_DIR).rglob("*.parquet"))
    assert kept and [b"k"] in remembered(uri).values()
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        spark.sql(f"VACUUM delta.`{uri}` RETAIN 0 HOURS").collect()
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    DeltaTable(str(uri)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert sorted((uri / tombstones.TOMBSTONES_DIR).rglob("*.parquet")) == kept
    w.produce(1, [b"older"], keys=[b"k"], timestamp=OLDER)
    run(spark, root, "vacuumed")
    assert table_rows(uri) == {b"j": b"2"}  # the delete still wins
