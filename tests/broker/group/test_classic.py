"""Full scenarios over the classic group coordinator, driven with explicit time."""

import pytest

from topiclake.broker.group.api import CommitOffset, JoinRequest, MemberIdentity, OffsetCommitRequest, Protocol
from topiclake.broker.group.classic import ClassicGroups
from topiclake.broker.group.errors import GroupErrorCode as E
from topiclake.broker.group.records import GroupMetadataKey
from tests.broker.group.classic_driver import G, REBALANCE, SESSION, SUB, Cluster


def group_snapshot(coord):
    out = {}
    for gid, g in coord.groups.items():
        out[gid] = (g.state.value, g.protocol_type, g.generation, g.protocol, g.leader,
                    {m.member_id: (m.group_instance_id, m.client_id, m.session_timeout_ms,
                                   m.rebalance_timeout_ms, m.metadata(g.protocol), m.assignment)
                     for m in g.members.values()},
                    dict(g.offsets))
    return out


def reload(cluster):
    fresh = ClassicGroups(cluster.coord.config)
    for r in cluster.records:
        fresh.replay_bytes(r.key_bytes(), r.value_bytes(), cluster.now)
    return fresh


def test_three_members_then_one_session_expires():
    c = Cluster()
    responses = c.full_join(["a", "b", "c"])
    assert {r.generation_id for r in responses} == {1}
    leaders = [r for r in responses if r.members]
    assert len(leaders) == 1 and leaders[0].member_id == responses[0].member_id  # first to join leads
    assert {r.leader for r in responses} == {responses[0].member_id}
    assert len(leaders[0].members) == 3
    owned = c.rebalance_and_sync(responses)
    assert sorted(len(v) for v in owned.values()) == [2, 2, 3]
    assert c.coord.describe([G])[0].state == "Stable"

    a, b, gone = (r.member_id for r in responses)
    c.tick(SESSION // 2)  # a and b keep heartbeating, the third member has gone silent
    assert c.heartbeat(a, 1) is E.NONE and c.heartbeat(b, 1) is E.NONE
    c.tick(SESSION // 2 - 1)
    assert gone in c.coord.groups[G].members
    c.tick(1)
    assert gone not in c.coord.groups[G].members
    assert c.heartbeat(a, 1) is E.REBALANCE_IN_PROGRESS
    assert c.heartbeat(gone, 1) is E.UNKNOWN_MEMBER_ID

    first = c.join(a)
    assert first.response is None  # waits for b
    second = c.join(b)
    responses = [c.answer(first), c.answer(second)]
    assert [r.generation_id for r in responses] == [2, 2]
    owned = c.rebalance_and_sync(responses)
    assert sorted(p for ps in owned.values() for p in ps) == list(range(7))
    assert sorted(len(v) for v in owned.values()) == [3, 4]
    # a member still on the old generation
    assert c.heartbeat(a, 1) is E.ILLEGAL_GENERATION
    assert c.answer(c.sync(a, 1)).error is E.ILLEGAL_GENERATION
    assert c.commit([(0, 5)], generation=1, member_id=a) == {0: E.ILLEGAL_GENERATION}
    assert c.commit([(0, 5), (1, 6)], generation=2, member_id=a) == {0: E.NONE, 1: E.NONE}

    fresh = reload(c)
    assert group_snapshot(fresh) == group_snapshot(c.coord)
    assert fresh.fetch_offsets(G, [("t", 0), ("t", 1), ("t", 2)]).partitions[2].offset == -1


def test_member_that_does_not_rejoin_is_removed_at_rebalance_timeout():
    c = Cluster()
    responses = c.full_join(["a", "b"])
    c.rebalance_and_sync(responses)
    a, b = (r.member_id for r in responses)
    newcomer = c.join(client="n")
    assert c.coord.groups[G].state.value == "PreparingRebalance"
    rejoin_a = c.join(a)
    for _ in range(REBALANCE // 5_000 - 1):
        c.tick(5_000)
        assert c.heartbeat(b, 1) is E.REBALANCE_IN_PROGRESS  # alive, but heartbeating is not rejoining
    c.tick(4_999)
    assert c.answer(rejoin_a) is None
    c.tick(1)
    ra, rn = c.answer(rejoin_a), c.answer(newcomer)
    assert (ra.error, rn.error, ra.generation_id) == (E.NONE, E.NONE, 2)
    assert set(c.coord.groups[G].members) == {a, rn.member_id}
    assert c.heartbeat(b, 2) is E.UNKNOWN_MEMBER_ID


def test_member_id_required_then_join():
    c = Cluster(initial_rebalance_delay_ms=0)
    first = c.join(require=True)
    assert first.response.error is E.MEMBER_ID_REQUIRED and first.response.member_id == "c-id1"
    assert G in c.coord.groups and not c.coord.groups[G].members
    r = c.join("c-id1", require=True).response
    assert (r.error, r.member_id, r.generation_id, r.leader, r.protocol_name) == (E.NONE, "c-id1", 1, "c-id1",
                                                                                  "range")
    assert c.join("nobody").response.error is E.UNKNOWN_MEMBER_ID


def test_pending_member_blocks_join_until_it_expires():
    c = Cluster(initial_rebalance_delay_ms=0)
    [r] = c.full_join(["a"])
    c.rebalance_and_sync([r])
    pending = c.join(client="p", require=True).response.member_id
    c.tick(SESSION // 2)
    assert c.heartbeat(r.member_id, 1) is E.NONE
    rejoin = c.join(client="q")  # a new member triggers a rebalance
    again = c.join(r.member_id)
    assert c.answer(again) is None  # the pending member has not come back yet
    c.tick(SESSION // 2)  # its place expires
    assert pending not in c.coord.groups[G].pending_members
    assert c.answer(again).generation_id == 2 and c.answer(rejoin).error is E.NONE


def test_static_member_replaces_old_id_without_rebalance():
    c = Cluster(initial_rebalance_delay_ms=0)
    r = c.answer(c.join(client="c", instance="i1"))
    assert r.member_id == "i1-id1"
    c.rebalance_and_sync([r])
    old_id = r.member_id
    again = c.join(client="c", instance="i1").response
    assert (again.error, again.generation_id, again.member_id) == (E.NONE, 1, "i1-id2")
    assert again.skip_assignment and again.leader == "i1-id2"
    assert c.coord.groups[G].state.value == "Stable"
    assert c.heartbeat(old_id, 1, instance="i1") is E.FENCED_INSTANCE_ID
    assert c.heartbeat("i1-id2", 1, instance="i1") is E.NONE
    assert c.answer(c.sync("i1-id2", 1, instance="i1")).assignment  # keeps its assignment
    assert group_snapshot(reload(c)) == group_snapshot(c.coord)  # the new member id was persisted


def test_static_member_rejoin_fences_parked_old_request():
    c = Cluster()
    parked = c.join(client="c", instance="i1")
    assert parked.response is None
    replaced = c.join(client="c", instance="i1")
    assert c.answer(parked).error is E.FENCED_INSTANCE_ID
    c.tick(REBALANCE)
    assert c.answer(replaced).member_id == "i1-id2" and list(c.coord.groups[G].members) == ["i1-id2"]


def test_protocol_vote_and_inconsistent_protocol():
    c = Cluster()
    x = c.join(client="x", protocols=(("roundrobin", SUB), ("range", SUB)))
    y = c.join(client="y", protocols=(("range", SUB), ("roundrobin", SUB)))
    z = c.join(client="z", protocols=(("range", SUB),))
    assert c.join(client="w", protocols=(("sticky", SUB),)).response.error is E.INCONSISTENT_GROUP_PROTOCOL
    c.settle()
    # only "range" is supported by all, so x votes range too
    assert {c.answer(r).protocol_name for r in (x, y, z)} == {"range"}


def test_protocol_vote_tie_follows_java_hashmap_order():
    c = Cluster()
    x = c.join(client="x", protocols=(("roundrobin", SUB), ("range", SUB)))
    c.join(client="y", protocols=(("range", SUB), ("roundrobin", SUB)))
    c.settle()
    # one vote each: HashMap<String,...> iterates "range" (bucket 3) before "roundrobin" (bucket 8)
    assert c.answer(x).protocol_name == "range"


def test_sync_errors_and_rebalance_during_completing():
    c = Cluster()
    responses = c.full_join(["a", "b"])
    leader = next(r for r in responses if r.members)
    follower = next(r for r in responses if not r.members)
    parked = c.sync(follower.member_id, 1)
    assert c.commit([(0, 1)], generation=1, member_id=follower.member_id) == {0: E.REBALANCE_IN_PROGRESS}
    newcomer = c.join(client="n")  # CompletingRebalance -> PreparingRebalance
    assert c.answer(parked).error is E.REBALANCE_IN_PROGRESS
    assert c.answer(c.sync(leader.member_id, 1)).error is E.REBALANCE_IN_PROGRESS
    assert c.answer(c.sync("stranger", 1)).error is E.UNKNOWN_MEMBER_ID
    assert newcomer.response is None


def test_leave_triggers_rebalance_and_last_leave_empties_group():
    c = Cluster()
    responses = c.full_join(["a", "b"])
    c.rebalance_and_sync(responses)
    a, b = (r.member_id for r in responses)
    res = c._take(c.coord.leave(G, [MemberIdentity(b), MemberIdentity("ghost")], c.now)).response
    assert [m.error for m in res.members] == [E.NONE, E.UNKNOWN_MEMBER_ID]
    assert c.heartbeat(a, 1) is E.REBALANCE_IN_PROGRESS
    r = c.answer(c.join(a))
    assert (r.generation_id, r.leader) == (2, a)
    c._take(c.coord.leave(G, [MemberIdentity(a)], c.now))
    c.tick(REBALANCE)
    g = c.coord.groups[G]
    assert (g.state.value, g.generation, g.protocol) == ("Empty", 3, None)
    assert c.records[-1].key == GroupMetadataKey(G) and c.records[-1].value.members == ()
    assert group_snapshot(reload(c)) == group_snapshot(c.coord)


def test_simple_consumer_offsets_and_expiry():
    c = Cluster(offsets_retention_ms=60_000)
    assert c.commit([(0, 10), (1, 20)]) == {0: E.NONE, 1: E.NONE}
    assert c.coord.describe([G])[0].state == "Empty"
    fetched = c.coord.fetch_offsets(G)
    assert [(o.partition, o.offset) for o in fetched.partitions] == [(0, 10), (1, 20)]
    c.now += 30_000
    c.commit([(1, 21)])
    c._take(c.coord.expire_offsets(c.now + 30_000))
    assert list(c.coord.groups[G].offsets) == [("t", 1)]  # retention counts from each commit
    c._take(c.coord.expire_offsets(c.now + 60_000))
    assert G not in c.coord.groups  # Empty and no offsets left: deleted
    assert c.records[-1].key == GroupMetadataKey(G) and c.records[-1].value is None
    assert reload(c).groups == {}


def test_commit_rules_for_group_members():
    c = Cluster()
    assert c.commit([(0, 1)], generation=3, member_id="m") == {0: E.ILLEGAL_GENERATION}  # unknown group
    responses = c.full_join(["a"])
    c.rebalance_and_sync(responses)
    a = responses[0].member_id
    assert c.commit([(0, 1)]) == {0: E.UNKNOWN_MEMBER_ID}  # generation -1 but the group is not Empty
    assert c.commit([(0, 1)], generation=1, member_id="x") == {0: E.UNKNOWN_MEMBER_ID}
    long_meta = OffsetCommitRequest(G, (CommitOffset("t", 0, 1, "x" * 4097), CommitOffset("t", 1, 2)), 1, a)
    res = c._take(c.coord.commit_offsets(long_meta, c.now)).response
    assert [r.error for r in res] == [E.OFFSET_METADATA_TOO_LARGE, E.NONE]
    # OffsetDelete: the group consumes "t", not "u"
    c.commit([(0, 1)], generation=1, member_id=a)
    res = c._take(c.coord.delete_offsets(G, [("t", 0), ("u", 0)], c.now)).response
    assert [r.error for r in res.partitions] == [E.GROUP_SUBSCRIBED_TO_TOPIC, E.NONE]
    assert c.coord.delete_groups([G], c.now).response[0].error is E.NON_EMPTY_GROUP


def test_delete_empty_group_writes_tombstones():
    c = Cluster()
    c.commit([(0, 1), (1, 2)])
    res = c._take(c.coord.delete_groups([G, "nope"], c.now)).response
    assert [r.error for r in res] == [E.NONE, E.GROUP_ID_NOT_FOUND]
    assert [r.value for r in c.records[-3:]] == [None, None, None]
    assert c.coord.describe([G])[0].state == "Dead"
    assert reload(c).groups == {}


def test_empty_group_offsets_expire_from_when_it_became_empty():
    c = Cluster(initial_rebalance_delay_ms=0, offsets_retention_ms=100_000)
    [r] = c.full_join(["a"])
    c.rebalance_and_sync([r])
    c.commit([(0, 1)], generation=1, member_id=r.member_id)
    c.now += 500_000  # far past retention, but the group is Stable and consumes "t"
    c.heartbeat(r.member_id, 1)
    assert c._take(c.coord.expire_offsets(c.now)).records == ()
    c._take(c.coord.leave(G, [MemberIdentity(r.member_id)], c.now))
    c.tick()
    assert c.coord.groups[G].state.value == "Empty"
    assert c.coord.expire_offsets(c.now + 99_999).records == ()
    assert len(c._take(c.coord.expire_offsets(c.now + 100_000)).records) == 2  # offset + group


def test_session_timeout_validation_and_group_id():
    c = Cluster()
    bad = JoinRequest(G, "", "consumer", (Protocol("range", SUB),), 10, 10)
    assert c.coord.join(bad, 0).response.error is E.INVALID_SESSION_TIMEOUT
    assert G not in c.coord.groups
    empty = JoinRequest("", "", "consumer", (Protocol("range", SUB),), SESSION, SESSION)
    assert c.coord.join(empty, 0).response.error is E.INVALID_GROUP_ID


def test_next_deadline_and_describe_members():
    c = Cluster()
    assert c.coord.next_deadline_ms() is None
    responses = c.full_join(["a", "b"])
    c.rebalance_and_sync(responses)
    d = c.coord.describe([G])[0]
    assert (d.state, d.protocol_type, d.protocol) == ("Stable", "consumer", "range")
    assert {m.client_id for m in d.members} == {"a", "b"} and all(m.assignment for m in d.members)
    assert c.coord.next_deadline_ms() == c.now + SESSION
    assert [g.state for g in c.coord.list_groups(["stable"])] == ["Stable"]
