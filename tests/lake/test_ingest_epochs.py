"""Spark ingest of a partition a cluster wrote (leader epochs in storage): the Delta table holds
exactly the records of the valid log, never a byte a fenced leader wrote late; a takeover in
progress bounds the run; a takeover during the run that undid what it read commits nothing.
Backfill and coverage read the same log."""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

from topiclake.lake.log import plan as plan_module
from topiclake.lake.runs.backfill import BackfillOptions, backfill
from topiclake.lake.runs.coverage import OffsetRange, coverage
from topiclake.lake.runs.ingest import IngestOptions, format_summary, ingest
from topiclake.lake.table.delta import app_id
from topiclake.segments import leader_reads
from topiclake.segments.batch import Record, build_batch
from topiclake.segments.leader_fence import PartitionFence
from topiclake.segments.leader_reads import LeadershipChangedError, TakeoverInProgressError
from tests.support.fenced_partition import BASE_TS, lead

from tests.support.lake import read_table

GROUP = "topiclake-ingest-t"


def run(spark, root, **kwargs):
    return ingest(spark, IngestOptions(topics=("t",), root=root, bootstrap="none", **kwargs))


def rows(root) -> list[tuple[int, bytes, bytes]]:
    _table, data = read_table(root / "tables" / "t")
    return sorted(zip(data["offset"].to_pylist(), data["key"].to_pylist(), data["value"].to_pylist()))


def committed(root) -> int | None:
    table, _data = read_table(root / "tables" / "t")
    return table.transaction_version(app_id(GROUP, "t", 0))


def test_the_table_holds_exactly_the_valid_log(spark, root, fenced_in_root):
    result = run(spark, root)
    assert rows(root) == list(fenced_in_root.valid)
    assert committed(root) == 15
    plan = result.tables[0].partitions[0].plan
    assert plan.end_offset == 15 and plan.fenced_batches == 1  # A's late batch in its old segment
    assert "skipped 1 batches a fenced leader wrote" in format_summary(result)
    assert run(spark, root).records == 0  # nothing more: the late bytes never become readable


def test_a_takeover_in_progress_bounds_the_run_and_the_next_run_reads_the_rest(spark, root, fenced_in_root, monkeypatch):
    monkeypatch.setattr(leader_reads, "SETTLE_WAIT_S", 0.1)
    fence = PartitionFence(fenced_in_root.directory)
    fence.begin_takeover(3)  # C claimed epoch 3 and has not recorded its start
    first = run(spark, root)
    plan = first.tables[0].partitions[0].plan
    assert plan.undecided_from == 10 and plan.end_offset == 10
    assert rows(root) == [r for r in fenced_in_root.valid if r[0] < 10] and committed(root) == 10
    assert "a leader takeover is in progress: read only below offset 10" in format_summary(first)

    again = run(spark, root)  # still pending: nothing new, and the group is not moved back
    assert again.records == 0 and committed(root) == 10

    fence.record_start(3, 15)  # C recovered the log up to 15 and starts there
    run(spark, root)
    assert rows(root) == list(fenced_in_root.valid) and committed(root) == 15


def test_a_takeover_during_the_run_that_adopts_what_was_read_lets_it_commit(spark, root, fenced_in_root):
    leaders = []

    def session():  # called once the plan is made, before the executors read
        leaders.append(lead(fenced_in_root.directory, 3))  # C recovers: it adopts all of B's log
        fenced_in_root.leader.append(build_batch([Record(0, BASE_TS, b"k0", b"late-b")]), leader_epoch=2)  # B, fenced now
        fenced_in_root.leader.flush()
        return spark

    run(session, root)
    assert leaders and rows(root) == list(fenced_in_root.valid) and committed(root) == 15
    leaders[0].append(build_batch([Record(0, BASE_TS, b"kc", b"c15")]), leader_epoch=3)
    leaders[0].flush()
    run(spark, root)  # C's offset 16 (B's late write took 15's place in B's file, not in the log)
    assert [r[2] for r in rows(root)][-1] == b"c15" and b"late-b" not in [r[2] for r in rows(root)]
    leaders[0].close_handlers()


def test_a_takeover_that_undid_what_was_read_commits_nothing(spark, root, fenced_in_root, monkeypatch):
    """Fault injection between the planner's history and its scan: C claims and recovers (the log
    ends at 15), then B, not yet fenced in its own eyes, writes offset 15; the scan, with the
    history it loaded before C's claim, takes that write for valid; C then records its start."""
    fence = PartitionFence(fenced_in_root.directory)
    scan = plan_module.scan_partition

    def scan_after_a_takeover(files, start):
        fence.begin_takeover(3)
        fenced_in_root.leader.append(build_batch([Record(0, BASE_TS, b"k0", b"unadopted")]), leader_epoch=2)
        fenced_in_root.leader.flush()
        return scan(files, start)

    monkeypatch.setattr(plan_module, "scan_partition", scan_after_a_takeover)

    def session():
        fence.record_start(3, 15)
        return spark

    with pytest.raises(LeadershipChangedError, match="leader epoch 3 now starts at offset 15"):
        run(session, root)
    assert not (root / "tables" / "t" / "_delta_log").exists() or committed(root) is None
    monkeypatch.setattr(plan_module, "scan_partition", scan)
    run(spark, root)  # the run again: exactly the valid log, without B's unadopted write
    assert rows(root) == list(fenced_in_root.valid) and committed(root) == 15


def test_a_partition_without_epochs_beside_one_with_them(spark, root, fenced_in_root, topic_writer):
    w = topic_writer("plain")
    w.produce(0, [b"p0", b"p1"])
    result = ingest(spark, IngestOptions(topics=("t", "plain"), root=root, table="both", bootstrap="none"))
    _table, data = read_table(root / "tables" / "both")
    plain = data.filter(pc.equal(data["topic"], "plain"))
    assert sorted(plain["value"].to_pylist()) == [b"p0", b"p1"]
    assert sorted(data.filter(pc.equal(data["topic"], "t"))["offset"].to_pylist()) == [o for o, _k, _v in fenced_in_root.valid]
    plans = {p.plan.topic: p.plan for p in result.tables[0].partitions}
    assert plans["plain"].epochs is None and all(t.epochs is None for t in plans["plain"].tasks)


def test_backfill_and_coverage_read_the_same_valid_log(spark, root, fenced_in_root, monkeypatch):
    run(spark, root)
    report = coverage(spark, root, "t", "t", [0], group=GROUP)[0]
    assert report.held == (OffsetRange(0, 11), OffsetRange(12, 15))
    assert report.gaps == (OffsetRange(11, 12, "fenced"),) and report.missing == ()  # A's squatter holds 11

    result = backfill(spark, BackfillOptions(root=root, table="t", topic="t", partition=0, from_offset=5,
                                             to_offset=15))
    assert result.records == 9  # 5-10 and 12-14: nothing a fenced leader wrote
    assert rows(root) == list(fenced_in_root.valid) and committed(root) == 15
    assert coverage(spark, root, "t", "t", [0], group=GROUP)[0] == report

    monkeypatch.setattr(leader_reads, "SETTLE_WAIT_S", 0.1)
    PartitionFence(fenced_in_root.directory).begin_takeover(3)  # B's offsets (from 10) are undecided now
    with pytest.raises(TakeoverInProgressError, match="offsets from 10 are not decided yet"):
        backfill(spark, BackfillOptions(root=root, table="t", topic="t", partition=0, from_offset=5, to_offset=15))
    report = coverage(spark, root, "t", "t", [0], group=GROUP)[0]
    assert report.gaps == (OffsetRange(11, 12, "undecided"),)
    assert rows(root) == list(fenced_in_root.valid)


def test_a_new_group_starting_at_a_time_never_starts_at_a_fenced_leaders_batch(spark, root, fenced_in_root):
    """A's late batch (offset 10, a minute later than everything) would be the first record at or
    after 00:00:11 in file order; the valid log's first one is B's offset 12."""
    run(spark, root, starting_offsets="2024-05-01T00:00:11Z")
    assert [r[0] for r in rows(root)] == [12, 13, 14]
