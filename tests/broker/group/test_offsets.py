"""Transactional offsets (TxnOffsetCommit) in the pure core: pending until the marker,
materialised on COMMIT, dropped on ABORT, newer plain commits win, and replay from records
gives the same state."""

from topiclake.broker.group.api import CommitOffset, OffsetCommitRequest
from topiclake.broker.group.classic import ClassicGroups
from topiclake.broker.group.errors import GroupErrorCode as E
from topiclake.broker.group.offsets import TxnOffsetCommitRequest

G, PID = "txn-group", 42


def txn(coord, offset, partition=0, now=1_000):
    req = TxnOffsetCommitRequest(G, PID, 0, (CommitOffset("t", partition, offset),))
    result = coord.commit_transactional_offsets(req, now)
    assert [r.error for r in result.response] == [E.NONE]
    return result


def offset_of(coord, partition=0, stable=False):
    return coord.fetch_offsets(G, [("t", partition)], require_stable=stable).partitions[0]


def test_pending_until_commit_marker():
    coord = ClassicGroups()
    result = txn(coord, 10)
    assert len(result.records) == 1
    assert offset_of(coord).offset == -1
    assert offset_of(coord, stable=True).error is E.UNSTABLE_OFFSET_COMMIT
    coord.replay_end_txn(PID, True, 2_000)
    assert offset_of(coord).offset == 10
    assert offset_of(coord, stable=True).error is E.NONE


def test_abort_drops_pending_offsets():
    coord = ClassicGroups()
    txn(coord, 10)
    coord.replay_end_txn(PID, False, 2_000)
    assert offset_of(coord).offset == -1
    assert not coord.pending_txn_offsets


def test_later_plain_commit_wins_over_earlier_txn_commit():
    coord = ClassicGroups()
    txn(coord, 10)
    coord.commit_offsets(OffsetCommitRequest(G, (CommitOffset("t", 0, 20),)), 1_500)
    coord.replay_end_txn(PID, True, 2_000)
    assert offset_of(coord).offset == 20


def test_replaying_the_records_rebuilds_pending_and_committed_state():
    live = ClassicGroups()
    log = [(r, PID) for r in txn(live, 10).records]
    log += [(r, -1) for r in live.commit_offsets(OffsetCommitRequest(G, (CommitOffset("t", 1, 5),)), 1_100).records]
    loaded = ClassicGroups()
    for record, pid in log:
        loaded.replay_bytes(record.key_bytes(), record.value_bytes(), 3_000, pid)
    assert offset_of(loaded).offset == -1 and offset_of(loaded, 1).offset == 5
    assert loaded.pending_txn_offsets.keys() == {PID}
    loaded.replay_end_txn(PID, True, 3_000)
    assert offset_of(loaded).offset == 10


def test_group_with_pending_offsets_is_not_expired():
    coord = ClassicGroups()
    txn(coord, 10)
    assert coord.expire_offsets(10**12).records == ()
    assert G in coord.groups
