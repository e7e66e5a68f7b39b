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


def test_a_transactional_commit_without_member_is_accepted_by_a_stable_group():
    """TxnOffsetCommit v0-v2 carry no member id or generation (aiokafka 0.14 sends v0): Kafka's
    ClassicGroup.validateOffsetCommit checks the member only when the request names one, and
    accepts it while the group rebalances too. A plain commit without identity still fails."""
    from tests.broker.group.classic_driver import G as CLASSIC_GROUP, Cluster

    c = Cluster()
    responses = c.full_join(["a"])
    c.rebalance_and_sync(responses)
    member = responses[0].member_id
    assert c.commit([(0, 1)]) == {0: E.UNKNOWN_MEMBER_ID}

    def txn_commit(generation=-1, member_id=""):
        req = TxnOffsetCommitRequest(CLASSIC_GROUP, PID, 0, (CommitOffset("t", 0, 7),), generation, member_id)
        return [r.error for r in c._take(c.coord.commit_transactional_offsets(req, c.now)).response]

    assert txn_commit() == [E.NONE]
    assert txn_commit(1, member) == [E.NONE]
    assert txn_commit(1, "stranger") == [E.UNKNOWN_MEMBER_ID]
    assert txn_commit(2, member) == [E.ILLEGAL_GENERATION]
    c.join(client="b")  # a rebalance starts: the group is no longer Stable
    assert txn_commit() == [E.NONE]
