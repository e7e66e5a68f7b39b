"""The soak's checker catches what it is there to catch: each rule is fed a clean case and a
planted fault (a lost, duplicated, foreign or aborted record, an offset going backwards)."""

from __future__ import annotations

from topiclake.segments.config import LogConfig
from topiclake.segments.storage import StorageLayout

from tests.support.lake import TopicWriter
from .soak.check import (PartitionLog, TableRows, Verdict, check_group_offsets, check_log, check_tables,
                         read_partition_log)
from .soak.ledger import Ack, Ledger, OffsetSample

PLAIN, COMPACTED, TXN = LogConfig(), LogConfig(cleanup_policy=("compact",)), LogConfig()
CONFIGS = {"plain": PLAIN, "compacted": COMPACTED, "txn": TXN}


def ack(topic, offset, key, value, txn=None, partition=0):
    return Ack(topic, partition, offset, key, value, txn, 0.0, 0.0)


def world():
    """A ledger and the logs it produced: plain 0-3 (0-1 gone to retention), compacted 0-2 (key a
    superseded at 2), txn 0-1 committed (txn 1) and 3 aborted (txn 2; 2 and 4 are markers)."""
    ledger = Ledger()
    plain = PartitionLog(log_start_offset=2, high_watermark=4, last_stable_offset=4)
    for o in range(4):
        ledger.acks.append(ack("plain", o, b"k%d" % o, b"p%d" % o))
        if o >= 2:
            plain.add(o, b"k%d" % o, b"p%d" % o, False)
    compacted = PartitionLog(0, 3, 3)
    for o, key in enumerate((b"a", b"b", b"a")):
        ledger.acks.append(ack("compacted", o, key, b"c%d" % o))
        if o:
            compacted.add(o, key, b"c%d" % o, False)
    txn = PartitionLog(0, 5, 5)
    for o, t, aborted in ((0, 1, False), (1, 1, False), (3, 2, True)):
        ledger.acks.append(ack("txn", o, b"t", b"x%d" % o, txn=t))
        txn.add(o, b"t", b"x%d" % o, aborted)
    ledger.txn_outcomes.update({1: "committed", 2: "aborted"})
    ledger.sent.update({a.value: a.txn for a in ledger.acks})
    return ledger, {("plain", 0): plain, ("compacted", 0): compacted, ("txn", 0): txn}


def failures(verdict: Verdict) -> dict[str, int]:
    return {c.name: c.count for c in verdict.checks if not c.passed}


def test_log_rules():
    ledger, logs = world()
    verdict = Verdict()
    check_log(verdict, logs, CONFIGS, ledger)
    assert failures(verdict) == {} and verdict.lost == 0
    assert (verdict.removed_by_retention, verdict.removed_by_compaction) == (2, 1)

    ledger.acks.append(ack("plain", 9, b"k9", b"p9"))  # acknowledged, nowhere
    ledger.acks.append(ack("compacted", 2, b"a", b"other"))  # the same offset acknowledged twice
    logs[("plain", 0)].add(4, b"k2", b"p2", False)  # written twice
    logs[("plain", 0)].add(5, b"k", b"never produced", False)
    logs[("txn", 0)].records[1] = logs[("txn", 0)].records[1].__class__(b"t", b"x1", True)  # committed, seen aborted
    verdict = Verdict()
    check_log(verdict, logs, CONFIGS, ledger)
    assert verdict.lost == 2 and verdict.duplicated == 1 and verdict.offsets_reused == 1
    assert set(failures(verdict).values()) == {2, 1} and len(failures(verdict)) == 5
    assert failures(verdict)["no offset was acknowledged to two records"] == 1


def test_a_cluster_root_is_read_with_its_leader_epochs(tmp_path):
    """What a fenced leader wrote after the takeover (its late batch, in its old segment) is not
    the log's; what both leaders acknowledged is, once each (docs/CLUSTER.md, readers' rule)."""
    from topiclake.segments.leader_fence import FencedLeaderError

    from tests.support.epoch_log import Leader

    layout = StorageLayout(tmp_path)
    directory = layout.log_dir("t", 0)
    directory.mkdir(parents=True)
    old = Leader(directory, 1)
    old.take_over()
    for n in range(3):
        old.acknowledge(old.write(b"old-%d" % n))
    new = Leader(directory, 2)
    assert new.take_over() == 3
    late = old.write(b"late")
    try:
        old.acknowledge(late)
        raise AssertionError("the old leader was not fenced")
    except FencedLeaderError:
        pass
    old.write(b"later")  # offset 4: beyond anything the new leader wrote
    new.acknowledge(new.write(b"new-0"))
    log = read_partition_log(layout, "t", 0)
    assert {o: r.value for o, r in log.records.items()} == {0: b"old-0", 1: b"old-1", 2: b"old-2", 3: b"new-0"}
    assert log.high_watermark == 4
    # The leader rolled to 4 and resigned before writing there: the next one continues at 5, a
    # gap the broker's log end (and the ingest's committed offset) includes.
    new.roll(4)
    assert Leader(directory, 3).take_over() == 5
    assert read_partition_log(layout, "t", 0).high_watermark == 5


def table_world():
    ledger, logs = world()
    rows = {"plain": TableRows([(0, o, b"k%d" % o, b"p%d" % o) for o in range(4)], {0: 4}),
            "compacted": TableRows([(0, 0, b"a", b"c0"), (0, 1, b"b", b"c1"), (0, 2, b"a", b"c2")], {0: 3}),
            "txn": TableRows([(0, 0, b"t", b"x0"), (0, 1, b"t", b"x1")], {0: 5})}
    return ledger, logs, rows


def test_table_rules():
    ledger, logs, tables = table_world()
    verdict = Verdict()
    check_tables(verdict, logs, CONFIGS, tables, ledger)
    assert failures(verdict) == {} and verdict.table_rows == 9

    tables["plain"] = TableRows(list(tables["plain"].rows) + [(0, 3, b"k3", b"p3")], {0: 4})  # twice
    tables["compacted"] = TableRows([(0, 1, b"b", b"c1"), (0, 2, b"a", b"c2")], {0: 3})  # c0 compacted first: ok
    tables["txn"] = TableRows([(0, 1, b"t", b"x1"), (0, 3, b"t", b"x3")], {0: 4})  # x0 missing, x3 aborted, short
    verdict = Verdict()
    check_tables(verdict, logs, CONFIGS, tables, ledger)
    assert verdict.duplicated == 1 and verdict.lost == 1  # x0 missing from the table
    assert failures(verdict) == {"tables: every committed record of the log exactly once": 2,
                                 "tables: no aborted record": 1,
                                 "tables: the final ingest reached each partition's last stable offset": 1}


def test_a_row_the_log_never_held_is_foreign():
    ledger, logs, tables = table_world()
    tables["plain"] = TableRows(list(tables["plain"].rows[:2]) + [(0, 2, b"k2", b"p2"), (0, 3, b"k3", b"forged")],
                                {0: 4})
    tables["compacted"] = TableRows([(0, 0, b"a", b"c0"), (0, 1, b"b", b"c1"), (0, 2, b"a", b"c2")], {0: 3})
    verdict = Verdict()
    check_tables(verdict, logs, CONFIGS, tables, ledger)
    assert failures(verdict) == {"tables: every row is a committed record of the log, or was one": 1}


def test_group_offsets_never_go_backwards():
    commits = [OffsetSample(1.0, "g", "t", 0, 10), OffsetSample(2.0, "g", "t", 0, 20)]
    observed = [OffsetSample(1.5, "g", "t", 0, 10), OffsetSample(2.5, "g", "t", 0, 20)]
    verdict = Verdict()
    check_group_offsets(verdict, commits, observed)
    assert verdict.passed
    verdict = Verdict()
    check_group_offsets(verdict, commits + [OffsetSample(3.0, "g", "t", 0, 15)],
                        observed + [OffsetSample(2.6, "g", "t", 0, 10)])  # a commit and a fetch went back
    assert failures(verdict) == {"group offsets: committed offsets never go backwards": 3}


def test_read_partition_log_marks_aborted_records_and_the_log_start(tmp_path):
    writer = TopicWriter(tmp_path, "t")
    writer.produce(0, [b"a", b"b"])  # 0-1
    writer.produce(0, [b"c"], producer_id=5, transactional=True)  # 2: aborted by 3
    writer.end_txn(0, 5, commit=False)
    writer.produce(0, [b"d"], producer_id=5, transactional=True)  # 4: still open
    log = read_partition_log(StorageLayout(tmp_path), "t", 0)
    assert {o: (r.value, r.aborted) for o, r in log.records.items()} == {
        0: (b"a", False), 1: (b"b", False), 2: (b"c", True), 4: (b"d", False)}
    assert (log.log_start_offset, log.high_watermark, log.last_stable_offset) == (0, 5, 4)
