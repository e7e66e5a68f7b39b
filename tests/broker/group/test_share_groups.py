"""Share-group membership: the simple assignor, epochs, leaving and timing out, and the
records that persist a group (replayed into the same group)."""

import uuid

from topiclake.broker.group.errors import GroupErrorCode as E
from topiclake.broker.group.share_assignor import simple_assign
from topiclake.broker.group.share_groups import ShareGroups, ShareHeartbeatRequest as HB

TOPICS = {"t": 2, "u": 1}
IDS = {name: uuid.uuid5(uuid.NAMESPACE_DNS, name) for name in TOPICS}
NAMES = {v: k for k, v in IDS.items()}


def groups() -> ShareGroups:
    return ShareGroups(lambda _g: 10_000, lambda _g: 1_000, max_size=3)


def test_simple_assignor_covers_every_partition_and_shares_when_members_outnumber_them():
    assert simple_assign({"a": frozenset({"t"}), "b": frozenset({"t"})}, {"t": 2}) == {
        "a": {"t": frozenset({0})}, "b": {"t": frozenset({1})}}
    three = simple_assign({m: frozenset({"u"}) for m in "abc"}, {"u": 1})
    assert all(parts == {"u": frozenset({0})} for parts in three.values())
    turns = simple_assign({"a": frozenset({"t", "u"}), "b": frozenset({"t", "u"})}, {"t": 1, "u": 1})
    assert turns == {"a": {"t": frozenset({0})}, "b": {"u": frozenset({0})}}  # members take turns across topics
    assert simple_assign({"a": frozenset({"missing"})}, {}) == {"a": {}}


def test_join_assign_share_leave_and_time_out():
    g = groups()
    a = g.heartbeat(HB("g", "a", 0, subscribed_topics=("t",)), TOPICS.get, 0)
    assert (a.error, a.member_epoch, a.assignment) == (E.NONE, 1, {"t": frozenset({0, 1})})
    b = g.heartbeat(HB("g", "b", 0, subscribed_topics=("t",)), TOPICS.get, 0)
    assert (b.member_epoch, b.assignment) == (2, {"t": frozenset({1})})
    a = g.heartbeat(HB("g", "a", 1), TOPICS.get, 100)  # no revocation round: straight to the target
    assert (a.member_epoch, a.assignment) == (2, {"t": frozenset({0})})
    assert g.heartbeat(HB("g", "a", 2), TOPICS.get, 200).assignment is None  # unchanged: not sent again
    assert g.heartbeat(HB("g", "a", 7), TOPICS.get, 200).error is E.FENCED_MEMBER_EPOCH
    assert g.heartbeat(HB("g", "zz", 2), TOPICS.get, 200).error is E.UNKNOWN_MEMBER_ID
    assert g.heartbeat(HB("g", "", 0, subscribed_topics=("t",)), TOPICS.get, 0).error is E.INVALID_REQUEST
    assert g.heartbeat(HB("g", "b", -1), TOPICS.get, 300).member_epoch == -1
    assert g.tick(10_199) == [] and g.tick(10_200) == [("g", "a")]
    assert g.groups["g"].state == "Empty" and g.delete("g") is E.NONE


def test_group_size_limit_and_topics_that_appear_later():
    g = groups()
    metadata = {}.get
    for m in "abc":
        assert g.heartbeat(HB("g", m, 0, subscribed_topics=("later",)), metadata, 0).assignment == {}
    assert g.heartbeat(HB("g", "d", 0, subscribed_topics=("later",)), metadata, 0).error is E.GROUP_MAX_SIZE_REACHED
    assert g.delete("g") is E.NON_EMPTY_GROUP
    group_epoch = g.groups["g"].group_epoch
    r = g.heartbeat(HB("g", "a", g.groups["g"].members["a"].member_epoch), {"later": 1}.get, 10)
    assert (r.member_epoch, r.assignment) == (group_epoch + 1, {"later": frozenset({0})})  # the topic appeared


def test_records_replay_into_the_same_group():
    g = groups()
    g.heartbeat(HB("g", "a", 0, subscribed_topics=("t", "u"), rack_id="r1", client_id="c", client_host="/h"),
                TOPICS.get, 0)
    g.heartbeat(HB("g", "b", 0, subscribed_topics=("t",)), TOPICS.get, 0)
    records = g.take_records(IDS.get)
    assert {r.key.type for r in records} == set(range(10, 16))
    again = ShareGroups(lambda _g: 10_000, lambda _g: 1_000)
    for r in records:
        again.replay(r, 5_000, NAMES.get)
    original, replayed = g.groups["g"], again.groups["g"]
    assert (replayed.group_epoch, replayed.assignment_epoch) == (original.group_epoch, original.assignment_epoch)
    assert replayed.target == original.target and replayed.initialized == {"t": frozenset({0, 1}), "u": frozenset({0})}
    assert {m: (x.member_epoch, x.assigned, x.subscribed_topics, x.rack_id) for m, x in replayed.members.items()} == \
        {m: (x.member_epoch, x.assigned, x.subscribed_topics, x.rack_id) for m, x in original.members.items()}
    assert again.persisted == g.persisted
    g.heartbeat(HB("g", "b", -1), TOPICS.get, 10)
    gone = g.take_records(IDS.get)
    assert [(r.key.type, r.value is None) for r in gone if r.key.member_id == "b"] == [
        (14, True), (13, True), (10, True)]  # current assignment, target, metadata: Kafka's order


def test_a_topic_created_again_under_its_name_is_a_new_assignment():
    g = groups()
    ids = {"t": uuid.uuid4()}
    a = g.heartbeat(HB("g", "a", 0, subscribed_topics=("t",)), TOPICS.get, 0, ids.get)
    assert g.heartbeat(HB("g", "a", a.member_epoch), TOPICS.get, 10, ids.get).assignment is None
    ids["t"] = uuid.uuid4()  # deleted and created again: same name and partitions, another id
    again = g.heartbeat(HB("g", "a", a.member_epoch), TOPICS.get, 20, ids.get)
    assert (again.member_epoch, again.assignment) == (a.member_epoch + 1, {"t": frozenset({0, 1})})
