"""Backfill replaces exactly an offset range in one commit, idempotently, offsets untouched."""

from __future__ import annotations

import json

import pyarrow.compute as pc
import pytest

from topiclake.lake.errors import LakeError
from topiclake.lake.runs.backfill import BackfillOptions, backfill
from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.table.delta import app_id

from tests.support.lake import read_table

GROUP = "topiclake-ingest-orders"


def rows(data):
    """(partition, offset, value) of every row, sorted: duplicates would show."""
    return sorted(zip(data["partition"].to_pylist(), data["offset"].to_pylist(), data["value"].to_pylist()))


def test_backfill_replaces_exactly_the_range(spark, root, topic_writer):
    w = topic_writer("orders", partitions=2)
    for i in range(3):
        w.produce(0, [f"v{3 * i + j}".encode() for j in range(3)])  # offsets 0-8, one file
    w.produce(1, [b"p1"])
    ingest(spark, IngestOptions(topics=("orders",), root=root))
    uri = root / "tables" / "orders"
    table, before = read_table(uri)
    p1_file = [p for p in table.file_uris() if "part-orders-1-" in p]

    options = BackfillOptions(root=root, table="orders", topic="orders", partition=0, from_offset=3, to_offset=6)
    first = backfill(spark, options)
    table, after = read_table(uri)
    assert first.version == 1 and first.records == 3
    assert len(first.removed) == 1 and len(first.rewritten) == 1  # the 0-8 file straddled the range
    assert rows(after) == rows(before)
    fresh = after.filter(pc.greater(after["ingested_at"], pc.max(before["ingested_at"])))
    assert sorted(fresh["offset"].to_pylist()) == [3, 4, 5]
    assert [p for p in table.file_uris() if "part-orders-1-" in p] == p1_file  # other partition untouched
    assert table.transaction_version(app_id(GROUP, "orders", 0)) == 9
    commit = table.history(1)[0]  # named as delta-spark names a replaceWhere: it removed files
    assert (commit["operation"], commit["operationParameters"]["mode"]) == ("WRITE", "Overwrite")
    assert commit["operationParameters"]["predicate"] == \
        "topic = 'orders' AND `partition` = 0 AND `offset` >= 3 AND `offset` < 6"
    assert json.loads(commit["userMetadata"])["range"] == [3, 6]

    second = backfill(spark, options)
    table, again = read_table(uri)
    assert second.version == 2 and rows(again) == rows(before)
    assert len(second.removed) == 1 and second.rewritten == []  # only the first backfill's file held 3-5
    assert table.transaction_version(app_id(GROUP, "orders", 0)) == 9


def test_backfill_is_bounded_by_the_group_offsets(spark, root, topic_writer):
    w = topic_writer("orders")
    w.produce(0, [b"a", b"b", b"c"])
    ingest(spark, IngestOptions(topics=("orders",), root=root, ending_offsets='{"orders": {"0": 2}}'))
    result = backfill(spark, BackfillOptions(root=root, table="orders", topic="orders", partition=0,
                                             from_offset=0, to_offset=100))
    assert (result.start, result.end) == (0, 2)
    assert sorted(read_table(root / "tables" / "orders")[1]["offset"].to_pylist()) == [0, 1]
    with pytest.raises(LakeError, match="past what was ingested"):
        backfill(spark, BackfillOptions(root=root, table="orders", topic="orders", partition=0,
                                        from_offset=2, to_offset=3))


def test_backfill_repairs_a_range_another_delta_writer_deleted(spark, root, topic_writer):
    """deltalake 1.6's DELETE rewrites the straddling file with string_view columns: backfill reads
    any Arrow layout a Delta writer produces (it failed: no kernel for string_view == string)."""
    from deltalake import DeltaTable

    w = topic_writer("orders")
    w.produce(0, [f"v{i}".encode() for i in range(10)])
    ingest(spark, IngestOptions(topics=("orders",), root=root, bootstrap="none"))
    uri = root / "tables" / "orders"
    DeltaTable(str(uri)).delete('"offset" >= 4 and "offset" < 6')
    assert sorted(read_table(uri)[1]["offset"].to_pylist()) == [0, 1, 2, 3, 6, 7, 8, 9]

    result = backfill(spark, BackfillOptions(root=root, table="orders", topic="orders", partition=0,
                                             from_offset=4, to_offset=6))
    # the file the DELETE wrote (0-3 and 6-9: its stats straddle the range) was read, and kept
    assert result.records == 2 and result.removed == [] and result.rewritten == []
    _table, after = read_table(uri)
    assert sorted(after["offset"].to_pylist()) == list(range(10))
    assert spark.read.format("delta").load(str(uri)).where("offset BETWEEN 4 AND 5").count() == 2


def test_plain_layout_turns_view_and_large_types_into_the_lake_s_own():
    import pyarrow as pa

    from topiclake.lake.table.files import plain_layout

    viewed = pa.table({"topic": pa.array(["t"], pa.string_view()), "key": pa.array([b"k"], pa.binary_view()),
                       "headers": pa.array([[{"key": "h", "value": b"v"}]], pa.large_list(pa.struct(
                           [("key", pa.large_string()), ("value", pa.large_binary())])))})
    plain = plain_layout(viewed)
    assert plain.schema == pa.schema([("topic", pa.string()), ("key", pa.binary()), ("headers", pa.list_(
        pa.struct([("key", pa.string()), ("value", pa.binary())])))])
    assert plain.to_pylist() == viewed.to_pylist()
