"""KIP-848 groups: range targets, epochs, revoke-before-assign, timeouts, offset validation."""

from topiclake.broker.group.consumer import ConsumerHeartbeatRequest as HB, MemberState
from topiclake.broker.group.errors import GroupErrorCode as E

from tests.broker.group.consumer_driver import G, TOPICS, Driver, metadata


def test_single_member_gets_everything_at_once():
    d = Driver()
    m = d.join()
    assert d.owned[m] == {"t": frozenset(range(7))} and d.epoch[m] == 1
    assert d.groups.groups[G].state == "Stable"


def test_three_members_range_three_two_two_without_double_ownership():
    d = Driver()
    a = d.join()
    b = d.join()
    c = d.join()
    d.settle()
    assert d.sizes() == [3, 2, 2]
    group = d.groups.groups[G]
    assert group.state == "Stable"
    assert {m.member_epoch for m in group.members.values()} == {group.assignment_epoch}
    # contiguous ranges in sorted member order: m1 0-2, m2 3-4, m3 5-6
    assert d.owned[a]["t"] == {0, 1, 2} and d.owned[b]["t"] == {3, 4} and d.owned[c]["t"] == {5, 6}


def test_revocation_comes_before_reassignment():
    d = Driver()
    a = d.join()
    b = d.join()
    # b wants partitions a still owns: it must not get them until a acknowledged the revocation
    assert d.owned[b] == {}
    group = d.groups.groups[G]
    assert group.members[b].state is MemberState.UNRELEASED_PARTITIONS
    r = d.groups.heartbeat(HB(G, a, d.epoch[a]), metadata, d.now)  # no owned list: no ack yet
    assert r.assignment == {"t": frozenset(range(4))} and r.member_epoch == 1
    assert group.members[a].state is MemberState.UNREVOKED_PARTITIONS
    d.beat(b)
    assert d.owned[b] == {}
    d.owned[a] = dict(r.assignment)
    d.beat(a)  # ack: a owns 0-3 now, moves to epoch 2
    assert d.epoch[a] == 2
    d.beat(b)
    assert d.owned[b] == {"t": frozenset({4, 5, 6})} and group.state == "Stable"


def test_session_timeout_moves_partitions_to_survivors():
    d = Driver()
    members = [d.join() for _ in range(3)]
    d.settle()
    dead = members[0]
    d.now += 6_000
    for m in members[1:]:
        d.beat(m)
    d.now += 5_000
    assert d.groups.tick(d.now) == [(G, dead)]
    del d.owned[dead]
    d.settle()
    assert d.sizes() == [4, 3]
    assert set().union(*(d.owned[m]["t"] for m in members[1:])) == set(range(7))


def test_epoch_fencing_and_unknown_member():
    d = Driver()
    a = d.join()
    r = d.groups.heartbeat(HB(G, a, 5), metadata, d.now)
    assert r.error is E.FENCED_MEMBER_EPOCH
    assert d.groups.heartbeat(HB(G, "nobody", 1), metadata, d.now).error is E.UNKNOWN_MEMBER_ID
    assert d.groups.heartbeat(HB(G, a, 1, server_assignor="sticky"), metadata, d.now).error is E.UNSUPPORTED_ASSIGNOR


def test_leave_and_offset_commit_validation():
    d = Driver()
    a = d.join()
    b = d.join()
    d.settle()
    assert d.groups.validate_offset_commit(G, a, d.epoch[a]) is E.NONE
    assert d.groups.validate_offset_commit(G, a, d.epoch[a] - 1) is E.STALE_MEMBER_EPOCH
    assert d.groups.validate_offset_commit(G, "x", 1) is E.UNKNOWN_MEMBER_ID
    assert d.groups.validate_offset_commit("classic", "x", 1) is None
    assert d.groups.validate_offset_commit(G, "", -1) is E.UNKNOWN_MEMBER_ID  # admin commit while active
    # TxnOffsetCommit v0-v2 names no member (aiokafka 0.14 sends v0): accepted, as in Kafka; one
    # that names a member is checked like any commit.
    assert d.groups.validate_offset_commit(G, "", -1, transactional=True) is E.NONE
    assert d.groups.validate_offset_commit(G, "x", 1, transactional=True) is E.UNKNOWN_MEMBER_ID
    assert d.groups.validate_offset_commit(G, a, d.epoch[a] - 1, transactional=True) is E.STALE_MEMBER_EPOCH
    r = d.groups.heartbeat(HB(G, a, -1), metadata, d.now)
    assert r.error is E.NONE and r.member_epoch == -1
    del d.owned[a]
    d.settle()
    assert d.owned[b] == {"t": frozenset(range(7))}
    assert d.groups.delete(G) is E.NON_EMPTY_GROUP


def test_new_partitions_bump_the_group_epoch():
    d = Driver()
    a = d.join()
    epoch = d.epoch[a]
    TOPICS["t"] = 9
    try:
        d.beat(a)
        assert d.owned[a] == {"t": frozenset(range(9))} and d.epoch[a] == epoch + 1
    finally:
        TOPICS["t"] = 7
