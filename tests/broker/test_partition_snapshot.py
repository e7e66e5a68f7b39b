"""Producer snapshots and .txnindex files at the partition level: written on roll, abort and clean
close; used at open (replaying only what follows the snapshot); ignored when corrupt or beyond
the log end, with the state still exactly what a full rebuild gives."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from topiclake.broker.partition import Partition
from topiclake.broker.errors import OutOfOrderSequence
from topiclake.broker.producer_state import RETRY_HORIZON_MS, WINDOW_READS, Duplicate, ProducerState
from topiclake.broker.markers import write_marker
from topiclake.segments import filenames as fn
from topiclake.segments.batch import Record, build_batch, read_header
from topiclake.segments.log import Log
from topiclake.segments.producer_snapshot import ProducerSnapshotEntry, list_snapshots, write_snapshot
from topiclake.segments.txn_index import TxnIndexEntry, read_txn_index
from tests.broker.partitions import CONFIG, open_partition, produce


def state(part):
    return (part.producers.to_snapshot(part.txns.ongoing()), part.txns.aborted(), part.last_stable_offset,
            part.log_end_offset)


def build(directory) -> tuple[Partition, tuple]:
    """Idempotent and transactional producers over three segments: commits, aborts, and two
    transactions still open (one since the first segment). Returns the open partition."""
    part = open_partition(directory)
    for seq in range(0, 6, 2):
        produce(part, 1, seq, 2)  # idempotent, 0..5
    produce(part, 2, 0, transactional=True)  # 6
    write_marker(part, 2, 0, True, 1)  # 7 commit
    produce(part, 3, 0, 2, transactional=True)  # 8-9
    produce(part, 4, 0, transactional=True)  # 10: open across every roll
    write_marker(part, 3, 0, False, 1)  # 11 abort
    part.log.roll()  # snapshot at 12
    produce(part, 1, 6)  # 12
    produce(part, 5, 0, transactional=True)  # 13
    write_marker(part, 5, 0, False, 1)  # 14 abort
    part.log.roll()  # snapshot at 15
    for seq in range(7, 27):
        produce(part, 1, seq)  # 15..34: what a snapshot saves replaying
    produce(part, 6, 0, transactional=True)  # 35: open
    return part, state(part)


def test_clean_close_writes_kafkas_files_and_reopen_replays_nothing(tmp_path):
    part, expected = build(tmp_path / "t-0")
    assert list(list_snapshots(part.log.directory)) == [12, 15]
    assert read_txn_index(fn.txn_index_file(part.log.directory, 0)) == [TxnIndexEntry(3, 8, 11, 10)]
    assert read_txn_index(fn.txn_index_file(part.log.directory, 12)) == [TxnIndexEntry(5, 13, 14, 10)]
    assert not fn.txn_index_file(part.log.directory, 15).exists()
    assert expected[2] == 10  # LSO held by producer 4's transaction from the first segment
    part.close()
    assert list(list_snapshots(part.log.directory)) == [12, 15, 36]

    again = open_partition(tmp_path / "t-0")
    assert (again.replay.snapshot_offset, again.replay.batches) == (36, 0)
    assert state(again) == expected
    assert again.txns.ongoing() == {4: 10, 6: 35}
    # the last batch of the idempotent producer, resent after the restart, is a duplicate
    resent = build_batch([Record(0, 1026, None, b"v", ())], base_offset=0, producer_id=1, producer_epoch=0,
                         base_sequence=26)
    assert again.producers.check(read_header(resent)) == Duplicate(34, 34, 1026)
    produce(again, 1, 27)  # and the next sequence goes on
    again.log.close()


def test_full_rebuild_gives_the_same_state_and_txnindex(tmp_path):
    part, expected = build(tmp_path / "t-0")
    part.close()
    for path in list_snapshots(tmp_path / "t-0").values():
        path.unlink()
    fn.txn_index_file(tmp_path / "t-0", 12).unlink()  # a log from before .txnindex files
    again = open_partition(tmp_path / "t-0")
    assert (again.replay.snapshot_offset, again.replay.batches) == (None, 32)
    assert state(again) == expected
    assert read_txn_index(fn.txn_index_file(tmp_path / "t-0", 12)) == [TxnIndexEntry(5, 13, 14, 10)]
    again.log.close()


@pytest.mark.parametrize("damage", ["newest", "all", "txnindex"])
def test_corrupt_files_fall_back_with_identical_state(tmp_path, damage):
    part, expected = build(tmp_path / "t-0")
    part.close()
    snapshots = list_snapshots(tmp_path / "t-0")
    if damage == "txnindex":
        fn.txn_index_file(tmp_path / "t-0", 0).write_bytes(b"\x00\x00\x01")
    for offset in {"newest": [36], "all": list(snapshots), "txnindex": []}[damage]:
        data = bytearray(snapshots[offset].read_bytes())
        data[-1] ^= 0xFF
        snapshots[offset].write_bytes(bytes(data))
    again = open_partition(tmp_path / "t-0")
    replay = again.replay
    assert (replay.snapshot_offset, replay.batches) == {"newest": (15, 21), "all": (None, 32),
                                                        "txnindex": (None, 32)}[damage]
    assert state(again) == expected
    assert read_txn_index(fn.txn_index_file(tmp_path / "t-0", 0)) == [TxnIndexEntry(3, 8, 11, 10)]
    again.log.close()


def test_unclean_stop_replays_from_the_last_roll(tmp_path):
    part, expected = build(tmp_path / "t-0")
    write_marker(part, 6, 0, False, 1)  # 36: an abort after the last snapshot
    expected = state(part)
    part.log.close_handlers()  # no snapshot at close, no clean-shutdown marker
    again = open_partition(tmp_path / "t-0")
    assert not again.log.load_result.had_clean_shutdown
    assert (again.replay.snapshot_offset, again.replay.batches) == (15, 22)
    assert state(again) == expected
    assert read_txn_index(fn.txn_index_file(tmp_path / "t-0", 15)) == [TxnIndexEntry(6, 35, 36, 10)]
    again.log.close()


def test_snapshots_beyond_a_truncated_log_end_are_deleted(tmp_path):
    directory = tmp_path / "t-0"
    part, _ = build(directory)
    part.close()
    active = fn.log_file(directory, 15)
    os.truncate(active, active.stat().st_size - 5)  # a torn last batch (35), after a crash
    (directory / fn.CLEAN_SHUTDOWN_FILE).unlink()
    again = open_partition(directory)
    assert again.log_end_offset == 35 and list(list_snapshots(directory)) == [12, 15]
    assert again.replay.snapshot_offset == 15
    assert again.txns.ongoing() == {4: 10}
    again.close()
    rebuilt = open_partition(directory)
    assert rebuilt.replay.snapshot_offset == 35 and state(rebuilt) == state(again)
    rebuilt.log.close()


@pytest.mark.parametrize("stop", ["clean", "crash", "torn"])
def test_a_start_reading_by_the_loads_listing_finds_what_listing_again_finds(tmp_path, stop):
    """The broker's open reads snapshots and .txnindex files by the load's listing of the
    directory (LoadResult.names): the same state, replay and files as a fresh listing; a load
    that deleted a snapshot (a torn tail) has no listing to give, and the state is listed for."""
    part, _ = build(tmp_path / "a" / "t-0")
    produce(part, 6, 1, transactional=True)
    write_marker(part, 6, 0, False, 1)  # an abort after the last snapshot
    if stop == "clean":
        part.close()
    else:
        part.log.close_handlers()
    if stop == "torn":
        active = fn.log_file(tmp_path / "a" / "t-0", 15)
        os.truncate(active, active.stat().st_size - 5)
        write_snapshot(tmp_path / "a" / "t-0", 99, [])  # above the log end after the cut
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    listed = open_partition(tmp_path / "a" / "t-0")
    by_names = Partition("t", 0, Log.open(tmp_path / "b" / "t-0", CONFIG), CONFIG)
    assert (by_names.log.load_result.names is None) == (stop == "torn")
    by_names.load_state(names=by_names.log.load_result.names)
    assert by_names.replay == listed.replay and state(by_names) == state(listed)
    assert sorted(os.listdir(tmp_path / "b" / "t-0")) == sorted(os.listdir(tmp_path / "a" / "t-0"))
    for name in os.listdir(tmp_path / "a" / "t-0"):
        if name.endswith((".txnindex", ".snapshot")):
            assert (tmp_path / "b" / "t-0" / name).read_bytes() == (tmp_path / "a" / "t-0" / name).read_bytes()
    listed.log.close()
    by_names.log.close()


def test_a_marker_with_a_short_value_still_settles_its_transaction(tmp_path):
    """A COMMIT/ABORT marker cut short after its key opens like any other: the key decides."""
    from topiclake.segments.control import ControlRecordType

    part = open_partition(tmp_path / "t-0")
    produce(part, 7, 0, 2, transactional=True)  # 0-1
    key = (0).to_bytes(2, "big") + int(ControlRecordType.ABORT).to_bytes(2, "big")
    marker = build_batch([Record(0, 2000, key, b"\x00", ())], base_offset=0, producer_id=7, producer_epoch=0,
                         is_transactional=True, is_control=True)
    part.append_batch(marker, read_header(marker), leader_epoch=0)  # 2: value 1 byte, not 6
    part.log.flush()
    part.log.close()

    again = open_partition(tmp_path / "t-0")
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in again.txns.aborted()] == [(7, 0, 2)]
    assert again.last_stable_offset == again.log_end_offset == 3


def test_a_producer_retrying_its_last_five_batches_after_a_restart_gets_their_offsets(tmp_path):
    """The snapshot keeps a producer's last batch only: the four before it are read back from the
    log below the snapshot, so in-flight batches resent to the reopened (or new) leader are
    duplicates with their first offsets, not OUT_OF_ORDER_SEQUENCE_NUMBER."""
    now = int(time.time() * 1000)
    part = open_partition(tmp_path / "t-0")
    for seq in range(0, 14, 2):
        produce(part, 1, seq, 2, ts=now)  # offsets seq, seq + 1
        if seq == 6:
            part.log.roll()  # the window spans two segments
    part.log.roll()  # snapshot at 14, the last thing before the crash
    part.log.close_handlers()

    again = open_partition(tmp_path / "t-0")
    assert (again.replay.snapshot_offset, again.replay.batches) == (14, 0)
    for seq in (4, 6, 8, 10, 12):
        resent = build_batch([Record(i, now + seq + i, None, b"v", ()) for i in range(2)], base_offset=0,
                             producer_id=1, producer_epoch=0, base_sequence=seq)
        assert again.producers.check(read_header(resent)) == Duplicate(seq, seq + 1, now + seq + 1)
    older = build_batch([Record(0, now, None, b"v", ())], base_offset=0, producer_id=1, producer_epoch=0,
                        base_sequence=2)
    with pytest.raises(OutOfOrderSequence):  # six back: past the window, as in Kafka
        again.producers.check(read_header(older))
    produce(again, 1, 14, ts=now)  # and the sequence goes on
    again.log.close()


def test_windows_are_read_back_only_for_producers_a_retry_can_still_come_from():
    """A producer whose last batch is older than any client's delivery timeout has nothing in
    flight: when no producer is that recent, the log below the snapshot is not read. Otherwise
    reads grow until the window is full, reaches the epoch's first batch, or the log's start."""
    state = ProducerState("t", 0)
    now = 10 * RETRY_HORIZON_MS
    state.load([ProducerSnapshotEntry(7, 0, 9, 19, 1, now - RETRY_HORIZON_MS - 1, -1, -1)])
    reads = []
    assert state.restore_windows(lambda budget: reads.append(budget) or [], now) == 0
    assert reads == []

    def headers(producer_id, rows):
        return [read_header(build_batch([Record(offset + i, now, None, b"v", ()) for i in range(2)],
                                        base_offset=offset, producer_id=producer_id, producer_epoch=epoch,
                                        base_sequence=seq)) for offset, epoch, seq in rows]

    state.load([ProducerSnapshotEntry(7, 0, 9, 19, 1, now - 1000, -1, -1)])
    earlier = headers(7, ((12, 0, 4), (14, 0, 6), (16, 1, 0), (18, 0, 8)))
    by_budget = dict(zip(WINDOW_READS, (earlier[2:], earlier, earlier)))
    # the epoch-1 batch is another epoch's, the last one the snapshot's own: two put back, after
    # every read (the window is never full, nor back at sequence 0)
    assert state.restore_windows(lambda budget: reads.append(budget) or by_budget[budget], now) == 2
    assert reads == list(WINDOW_READS)
    assert [state.check(header) for header in earlier if header.producer_epoch == 0] == [
        Duplicate(12, 13, now), Duplicate(14, 15, now), Duplicate(18, 19, now - 1000)]

    reads.clear()
    state.load([ProducerSnapshotEntry(8, 0, 3, 33, 1, now, -1, -1)])
    first = headers(8, ((30, 0, 0),))
    assert state.restore_windows(lambda budget: reads.append(budget) or first, now) == 1
    assert reads == [WINDOW_READS[0]]  # back at sequence 0: nothing older to look for
