"""Ingest end to end: real segment files -> real Spark (local[2]) -> a real Delta table, read back
with deltalake."""

from __future__ import annotations

import datetime as dt

import pyarrow.compute as pc
import pytest

from topiclake.lake.errors import DataLossError
from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.table.delta import app_id

from tests.support.lake import BASE_TS, read_table


def run(spark, root, *topics, **kwargs):
    return ingest(spark, IngestOptions(topics=tuple(topics), root=root, **kwargs))


def offsets_of(table, partition=None):
    t = table if partition is None else table.filter(pc.equal(table["partition"], partition))
    return sorted(t["offset"].to_pylist())


def test_exactly_once_across_runs(spark, root, topic_writer):
    w = topic_writer("orders", partitions=2)
    w.produce(0, [b"a", b"b", b"c"], headers=[("h", b"1")])
    w.produce(0, [b"d", None])
    w.produce(1, [b"x"])
    uri = root / "tables" / "orders"

    first = run(spark, root, "orders")
    table, data = read_table(uri)
    assert first.tables[0].version == 0 and first.records == 6
    assert offsets_of(data, 0) == [0, 1, 2, 3, 4] and offsets_of(data, 1) == [0]
    assert table.transaction_version(app_id("topiclake-ingest-orders", "orders", 0)) == 5
    assert table.transaction_version(app_id("topiclake-ingest-orders", "orders", 1)) == 1
    assert table.metadata().partition_columns == ["record_date"]
    assert table.protocol().min_reader_version == 1 and table.protocol().min_writer_version == 2

    row = data.filter(pc.and_(pc.equal(data["offset"], 0), pc.equal(data["partition"], 0))).to_pylist()[0]
    assert row["topic"] == "orders" and row["key"] == b"k0" and row["value"] == b"a"
    assert row["headers"] == [{"key": "h", "value": b"1"}]
    assert row["timestamp"] == dt.datetime.fromtimestamp(BASE_TS / 1000, dt.timezone.utc)
    assert row["timestamp_type"] == 0 and row["record_date"] == dt.date(2024, 5, 1)
    assert data.filter(pc.equal(data["offset"], 4))["value"].to_pylist() == [None]

    again = run(spark, root, "orders")
    assert again.tables[0].version is None and again.records == 0
    assert read_table(uri)[0].version() == 0

    w.produce(0, [b"e", b"f"])
    third = run(spark, root, "orders")
    table, data = read_table(uri)
    assert third.tables[0].version == 1 and third.records == 2
    assert offsets_of(data, 0) == [0, 1, 2, 3, 4, 5, 6] and offsets_of(data, 1) == [0]
    assert table.transaction_version(app_id("topiclake-ingest-orders", "orders", 0)) == 7
    assert table.transaction_version(app_id("topiclake-ingest-orders", "orders", 1)) == 1


def test_read_committed_drops_control_and_aborted_and_stops_at_lso(spark, root, topic_writer):
    w = topic_writer("payments")
    w.produce(0, [b"a", b"b"])  # 0-1
    w.produce(0, [b"t1a", b"t1b"], producer_id=10, transactional=True)  # 2-3, committed later
    w.produce(0, [b"t2a"], producer_id=11, transactional=True)  # 4, aborted later
    w.produce(0, [b"c"])  # 5
    w.end_txn(0, 10, commit=True)  # 6
    w.end_txn(0, 11, commit=False)  # 7
    w.produce(0, [b"open"], producer_id=12, transactional=True)  # 8: still open -> LSO 8
    w.produce(0, [b"d"])  # 9
    uri = root / "tables" / "payments"
    group = "topiclake-ingest-payments"

    result = run(spark, root, "payments")
    table, data = read_table(uri)
    assert offsets_of(data) == [0, 1, 2, 3, 5]
    assert sorted(data["value"].to_pylist()) == [b"a", b"b", b"c", b"t1a", b"t1b"]
    assert table.transaction_version(app_id(group, "payments", 0)) == 8
    part = result.tables[0].partitions[0]
    assert (part.dropped_control, part.dropped_aborted) == (2, 1)
    assert part.plan.last_stable_offset == 8 and part.plan.log_end_offset == 10

    w.end_txn(0, 12, commit=True)  # 10
    run(spark, root, "payments")
    table, data = read_table(uri)
    assert offsets_of(data) == [0, 1, 2, 3, 5, 8, 9]
    assert table.transaction_version(app_id(group, "payments", 0)) == 11


def test_partial_trailing_batch_is_not_read(spark, root, topic_writer):
    from topiclake.segments.batch import Record, build_batch

    w = topic_writer("growing")
    w.produce(0, [b"a", b"b"])
    tail = build_batch([Record(2, BASE_TS, b"k", b"c")])
    w.append_bytes(0, tail[:30])  # the broker is mid-append
    uri = root / "tables" / "growing"
    run(spark, root, "growing")
    table, data = read_table(uri)
    assert offsets_of(data) == [0, 1]
    assert table.transaction_version(app_id("topiclake-ingest-growing", "growing", 0)) == 2

    w.append_bytes(0, tail[30:])
    run(spark, root, "growing")
    assert offsets_of(read_table(uri)[1]) == [0, 1, 2]


def test_starting_offsets_for_new_groups(spark, root, topic_writer):
    w = topic_writer("clicks")
    w.produce(0, [b"0", b"1", b"2", b"3", b"4"])  # timestamps BASE_TS + 0..4 s

    def start(spec, name):
        run(spark, root, "clicks", table=name, starting_offsets=spec)
        return offsets_of(read_table(root / "tables" / name)[1])

    assert start("latest", "latest") == []
    assert start('{"clicks": {"0": 3}}', "json") == [3, 4]
    assert start("2024-05-01T00:00:02Z", "time") == [2, 3, 4]
    assert start("earliest", "earliest") == [0, 1, 2, 3, 4]
    # a group that started at "latest" remembered where: it reads only what came after
    w.produce(0, [b"5"])
    assert start("latest", "latest") == [5]
    assert start("earliest", "json") == [3, 4, 5]  # a known group ignores --starting-offsets


def test_ending_offsets_and_small_tasks(spark, root, topic_writer):
    w = topic_writer("events", partitions=2)
    for i in range(4):
        w.produce(0, [f"v{i}-{j}".encode() for j in range(3)])  # 4 batches of 3 records
    w.roll(0)
    w.produce(0, [b"after-roll"])  # offset 12 in a second segment
    w.produce(1, [b"p1"])
    uri = root / "tables" / "events"

    result = run(spark, root, "events", ending_offsets='{"events": {"0": 7}}', target_task_bytes=1)
    plan0 = result.tables[0].partitions[0].plan
    assert len(plan0.tasks) == 3  # batches [0,3) [3,6) [6,9): one task each at a 1-byte target
    assert offsets_of(read_table(uri)[1], 0) == [0, 1, 2, 3, 4, 5, 6]

    result = run(spark, root, "events", target_task_bytes=1)
    plan0 = result.tables[0].partitions[0].plan
    assert {t.path.rsplit("/", 1)[1] for t in plan0.tasks} == {"00000000000000000000.log",
                                                                "00000000000000000012.log"}
    table, data = read_table(uri)
    assert offsets_of(data, 0) == list(range(13)) and offsets_of(data, 1) == [0]
    assert table.transaction_version(app_id("topiclake-ingest-events", "events", 0)) == 13


def test_retention_gap_fails_unless_data_loss_is_allowed(spark, root, topic_writer):
    from topiclake.segments.checkpoints import LOG_START_OFFSET_CHECKPOINT, write_partition_offset

    w = topic_writer("logs")
    w.produce(0, [b"0", b"1", b"2"])
    uri = root / "tables" / "logs"
    run(spark, root, "logs", ending_offsets='{"logs": {"0": 1}}')
    w.roll(0)
    w.produce(0, [b"3", b"4"])
    # retention deletes the first segment before offsets 1-2 were ingested
    first = w.layout.log_dir("logs", 0) / "00000000000000000000.log"
    first.unlink()
    write_partition_offset(first.parent, LOG_START_OFFSET_CHECKPOINT, "logs", 0, 3)

    with pytest.raises(DataLossError, match=r"'logs' partition 0: offsets \[1, 3\)"):
        run(spark, root, "logs")
    assert read_table(uri)[0].version() == 0

    result = run(spark, root, "logs", allow_data_loss=True)
    table, data = read_table(uri)
    assert offsets_of(data) == [0, 3, 4]
    assert table.transaction_version(app_id("topiclake-ingest-logs", "logs", 0)) == 5
    assert result.tables[0].partitions[0].plan.lost == (1, 3)
    assert table.history(1)[0]["topiclake"]["lost"] == {"logs:0": [1, 3]}


def test_progress_follows_the_job_and_nothing_new_starts_no_spark(spark, root, topic_writer):
    """The tasks' job runs in a helper thread (so Ctrl-C never lands inside py4j); it keeps the
    job group, so progress is reported. A run with nothing new never asks for a session."""
    w = topic_writer("orders", partitions=2)
    for i in range(6):
        w.produce(i % 2, [b"x" * 200] * 20)
    seen = []
    result = ingest(spark, IngestOptions(topics=("orders",), root=root, target_task_bytes=1),
                    progress=lambda done, total: seen.append((done, total)))
    tasks = sum(len(p.plan.tasks) for t in result.tables for p in t.partitions)
    assert tasks == 6 and result.records == 120
    assert seen and all(total == tasks for _done, total in seen) and seen[-1] == (tasks, tasks), seen
    sc = spark.sparkContext
    [job] = [sc.statusTracker().getJobInfo(j) for j in sc.statusTracker().getJobIdsForGroup(
        f"topiclake-ingest-{result.run_id}")]
    assert job.status == "SUCCEEDED"
    assert sc.getLocalProperty("spark.jobGroup.id") is None  # the group ends with the run

    def no_session():
        raise AssertionError("a run with nothing to read started Spark")

    again = ingest(no_session, IngestOptions(topics=("orders",), root=root))
    assert again.records == 0 and again.tables[0].version is None
