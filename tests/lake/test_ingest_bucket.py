"""Ingest from an object-store root on the real versitygw: the log in objectlog's layout (a closed
segment, flush objects, two epochs with a fenced leader's late write), read by Spark tasks with
ranged GETs, committed into a Delta table on the same bucket exactly once."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow.compute as pc
import pytest
from topiclake.lake.errors import LakeError, SegmentChangedError
from topiclake.lake.log.decode import read_task
from topiclake.lake.log.offsets import EARLIEST, LATEST, OffsetSpec
from topiclake.lake.log.roots import BucketLog
from topiclake.lake.metrics.scrape import exposition
from topiclake.lake.runs.backfill import BackfillOptions, backfill
from topiclake.lake.runs.coverage import coverage
from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.spark.session import get_session
from topiclake.lake.table.delta import app_id
from topiclake.objectlog.fence import BucketFence
from topiclake.objectlog.keys import PartitionKeys
from topiclake.store.objects import ObjectStore

from tests.support.bucket_log import BucketPartitionWriter, create_topic
from tests.support.lake import ingest_killed_at_commit

TOPIC = "events"
GROUP = "topiclake-ingest-events"


def build_log(store: ObjectStore) -> dict[int, dict[int, bytes]]:
    """Partition 0: epoch 0 flushes 0-11 and seals them, flushes 12-15, pauses; epoch 1 takes over
    at 16, the paused leader's late write at 16 is fenced, epoch 1 flushes 16-21. Partition 1: a
    tail of flush objects only. Returns {partition: {offset: value}} of the log."""
    create_topic(store, TOPIC, 2)
    old = BucketPartitionWriter(store, TOPIC, 0).take_over()
    old.flush(3, tag="a")
    old.flush(3, tag="a")
    old.seal()
    old.flush(2, tag="a")
    new = BucketPartitionWriter(store, TOPIC, 0).take_over()
    assert new.epoch == 1 and new.next_offset == 16
    old.late_write(2, tag="late")
    new.flush(3, tag="new")
    other = BucketPartitionWriter(store, TOPIC, 1).take_over()
    other.flush(2, tag="b")
    other.flush(1, tag="b")
    return {0: {o: f"{'a' if o < 16 else 'new'}-{o}".encode() for o in range(22)},
            1: {o: f"b-{o}".encode() for o in range(6)}}


def table_rows(root, name: str = TOPIC) -> tuple[object, dict[tuple[int, int], bytes]]:
    from deltalake import DeltaTable

    table = DeltaTable(root.uri("tables", name), storage_options=root.delta_storage_options())
    data = table.to_pyarrow_table()
    rows = {(p, o): v for p, o, v in zip(data["partition"].to_pylist(), data["offset"].to_pylist(),
                                        data["value"].to_pylist())}
    assert len(rows) == data.num_rows, "an offset is in the table twice"
    return table, rows


def expected_rows(log: dict[int, dict[int, bytes]]) -> dict[tuple[int, int], bytes]:
    return {(p, o): v for p, values in log.items() for o, v in values.items()}


def test_ingest_and_backfill_on_a_bucket_are_exact_and_a_rerun_commits_nothing(spark, s3_root):
    root = s3_root.root
    store = ObjectStore(root)
    log = build_log(store)
    options = IngestOptions(topics=(TOPIC,), root=root, target_task_bytes=200)
    result = ingest(spark, options)
    (outcome,) = result.tables
    assert outcome.version == 0 and outcome.pipeline.table_uri == root.uri("tables", TOPIC)
    closed_tasks = [t for p in outcome.partitions for t in p.plan.tasks if t.closed]
    assert len(closed_tasks) > 1, "the closed segment is split by its index into several tasks"
    table, rows = table_rows(root)
    assert rows == expected_rows(log)  # the fenced leader's late bytes never; each offset once
    assert table.transaction_version(app_id(GROUP, TOPIC, 0)) == 22
    assert table.transaction_version(app_id(GROUP, TOPIC, 1)) == 6

    scraped = exposition(root).decode()
    assert f'topiclake_table_log_end_offset{{group="{GROUP}",partition="0",table="events",topic="events"}} 22.0' \
        in scraped
    assert f'topiclake_table_lag_records{{group="{GROUP}",partition="1",table="events",topic="events"}} 0.0' in scraped
    assert f'topiclake_table_freshness_seconds{{group="{GROUP}",partition="0",table="events",topic="events"}} 0.0' \
        in scraped
    listed = next(line for line in scraped.splitlines()
                  if line.startswith('topiclake_object_store_requests_total{operation="list"}'))
    assert float(listed.split()[-1]) > 0, "the scrape's own LISTs of the bucket are counted"

    again = ingest(spark, options)
    assert again.tables[0].version is None and again.records == 0
    assert table_rows(root)[0].version() == 0

    table.delete("`partition` = 0 AND `offset` >= 3 AND `offset` < 5")  # another writer loses two rows
    on_bucket = get_session(root=root)
    report = {c.partition: c for c in coverage(on_bucket, root, TOPIC, TOPIC, [0, 1], group=GROUP)}
    assert [(g.first, g.end, g.reason) for g in report[0].gaps] == [(3, 5, "missing")]
    assert [(r.first, r.end) for r in report[0].held] == [(0, 3), (5, 22)] and not report[1].gaps
    backfilled = backfill(on_bucket, BackfillOptions(root=root, table=TOPIC, topic=TOPIC, partition=0,
                                                     from_offset=2, to_offset=18, target_task_bytes=200))
    assert (backfilled.start, backfilled.end, backfilled.version, backfilled.records) == (2, 18, 2, 16)
    assert backfilled.removed and backfilled.rewritten, "files inside the range go, straddling ones are rewritten"
    table, rows = table_rows(root)
    assert rows == expected_rows(log) and table.version() == 2
    assert not any(c.gaps for c in coverage(on_bucket, root, TOPIC, TOPIC, [0, 1], group=GROUP))
    assert table.transaction_version(app_id(GROUP, TOPIC, 0)) == 22  # a backfill moves no offset

    writer = BucketPartitionWriter(store, TOPIC, 1).take_over()  # a restart elsewhere: epoch 1 from offset 6
    writer.flush(2, tag="c")
    log[1].update({o: f"c-{o}".encode() for o in range(6, 10)})
    scraped = exposition(root).decode()
    assert f'topiclake_table_lag_records{{group="{GROUP}",partition="1",table="events",topic="events"}} 4.0' in scraped
    assert f'topiclake_table_freshness_seconds{{group="{GROUP}",partition="1",table="events",topic="events"}} 0.004' \
        in scraped  # the bucket_batches timestamps are 1_700_000_000_000 + offset
    third = ingest(spark, options)
    assert third.tables[0].version == 3 and third.records == 4
    assert table_rows(root)[1] == expected_rows(log)


def test_closed_segments_plan_from_their_index_and_a_deleted_flush_object_fails_its_task(s3_root):
    root = s3_root.root
    store = ObjectStore(root)
    build_log(store)
    source = BucketLog(root)
    plan = source.plan(TOPIC, 0, table_uri=root.uri("tables", TOPIC), committed=None, starting=OffsetSpec(EARLIEST),
                       ending=OffsetSpec(LATEST), target_task_bytes=1, allow_data_loss=False)
    assert (plan.start_offset, plan.end_offset, plan.log_end_offset) == (0, 22, 22)
    closed = [t for t in plan.tasks if t.closed]
    assert len(closed) == 6  # one per batch: an index entry per batch and a 1-byte target
    positions = [(t.start, t.end) for t in closed]
    assert all(a[1] == b[0] for a, b in zip(positions, positions[1:])), "the ranges tile the segment"
    decoded = [read_task(t.as_dict())[0] for t in plan.tasks]
    offsets = sorted(o for records in decoded for o in records["offset"].to_pylist())
    assert offsets == list(range(22))
    assert sum(pc.sum(r["offset"]).as_py() or 0 for r in decoded) == sum(range(22))

    resumed = source.plan(TOPIC, 0, table_uri=root.uri("tables", TOPIC), committed=13, starting=OffsetSpec(EARLIEST),
                          ending=OffsetSpec(LATEST), target_task_bytes=1 << 20, allow_data_loss=False)
    assert not any(t.closed for t in resumed.tasks), "offsets from 13 on are all in the tail"
    # the tail's flush objects (epoch 0's, then epoch 1's) share one task under the target size
    (tail_task,) = resumed.tasks
    keys = [tail_task.path, *(key for key, _start, _end in tail_task.more)]
    assert len(keys) == 2 and ".e0." in keys[0] and ".e1." in keys[1], keys
    assert read_task(tail_task.as_dict())[0]["offset"].to_pylist() == list(range(13, 22))
    store.delete(next(k for k in keys if ".e1." in k))
    with pytest.raises(SegmentChangedError, match="deleted after planning"):
        read_task(tail_task.as_dict())


def test_a_takeover_in_progress_leaves_the_tail_unplanned_and_one_after_planning_fails_the_run(s3_root):
    root = s3_root.root
    store = ObjectStore(root)
    build_log(store)
    source = BucketLog(root)

    def plan():
        return source.plan(TOPIC, 0, table_uri=root.uri("tables", TOPIC), committed=None,
                           starting=OffsetSpec(EARLIEST), ending=OffsetSpec(LATEST), target_task_bytes=1 << 20,
                           allow_data_loss=False)

    before = plan()
    assert before.end_offset == 22
    before.epochs.confirm(before.directory, before.end_offset)  # nothing changed: confirmed
    BucketFence(store, PartitionKeys(TOPIC, 0)).claim(2)  # a new leader claimed, its start not recorded yet
    during = plan()
    assert (during.undecided_from, during.end_offset) == (12, 12), "only the sealed segment is decided"
    assert all(t.closed for t in during.tasks)
    with pytest.raises(LakeError, match="leader epoch 2 was claimed while offsets up to 22 were read"):
        before.epochs.confirm(before.directory, before.end_offset)
    during.epochs.confirm(during.directory, during.end_offset)  # it read below the undecided offsets only


def test_a_killed_ingest_commits_nothing_and_the_cli_rerun_is_exactly_once(s3_root):
    root = s3_root.root
    store = ObjectStore(root)
    log = build_log(store)
    env = {**os.environ, **s3_root.env}
    child = ingest_killed_at_commit(root, TOPIC, env)
    assert child.returncode == -9, child.stderr[-3000:]
    written = [info.key for info in store.list(f"tables/{TOPIC}") if info.key.endswith(".parquet")]
    assert written, "the child wrote its files before it was killed"
    assert not any("_delta_log" in info.key for info in store.list(f"tables/{TOPIC}"))

    cli = subprocess.run([sys.executable, "-m", "topiclake.cli", "ingest", "--data", str(root), "--topic", TOPIC,
                          "--bootstrap", "none"], env=env, capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert f"table {root.uri('tables', TOPIC)}" in cli.stdout and "version 0" in cli.stdout
    table, rows = table_rows(root)
    assert rows == expected_rows(log)
    assert table.transaction_version(app_id(GROUP, TOPIC, 0)) == 22

    cli = subprocess.run([sys.executable, "-m", "topiclake.cli", "backfill", "--data", str(root), "--table", TOPIC,
                          "--topic", TOPIC, "--partition", "1", "--from", "2", "--to", "6"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert "backfill events-1 offsets [2, 6)" in cli.stdout and "version 1, 4 records" in cli.stdout
    assert table_rows(root)[1] == expected_rows(log)

    cli = subprocess.run([sys.executable, "-m", "topiclake.cli", "coverage", "--data", str(root), "--table", TOPIC,
                          "--topic", TOPIC], env=env, capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert cli.stdout.splitlines() == ["events-0: committed 22; holds [0, 22)", "events-1: committed 6; holds [0, 6)"]
