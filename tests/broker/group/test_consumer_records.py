"""KIP-848 records of `__consumer_offsets` (key types 3-8): byte layouts of Kafka's schemas,
round trips, the records a group's changes produce, and replay rebuilding the same groups."""

import dataclasses
import struct
import uuid

import pytest
from hypothesis import given, strategies as st

from topiclake.broker.group.consumer import (ConsumerGroups, ConsumerHeartbeatRequest as HB, MemberState,
                                             group_records)
from topiclake.broker.group.errors import GroupErrorCode as E
from topiclake.broker.group.records import (CG, ClassicMemberMetadata, ConsumerGroupCurrentMemberAssignmentValue,
                                            ConsumerGroupKey, ConsumerGroupMemberMetadataValue,
                                            ConsumerGroupMetadataValue, ConsumerGroupPartitionMetadataValue,
                                            ConsumerGroupTargetAssignmentMemberValue,
                                            ConsumerGroupTargetAssignmentMetadataValue, CoordinatorRecord,
                                            TopicMetadata, UnknownKey, decode_record)
from topiclake.segments.errors import CorruptRecordError

from tests.broker.group.consumer_driver import Driver

T1 = uuid.UUID("00000000-0000-0000-0000-0000000000a1")
T2 = uuid.UUID("00000000-0000-0000-0000-0000000000b2")


def s16(text):  # STRING (keys are not flexible)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def cs(text):  # COMPACT_(NULLABLE_)STRING
    if text is None:
        return b"\x00"
    raw = text.encode()
    return bytes([len(raw) + 1]) + raw


def i32(*values):
    return b"".join(struct.pack(">i", v) for v in values)


def rec(key, value):
    return CoordinatorRecord(key, value)


# ------------------------------------------------------------------------ byte layouts
KEYS = [
    (ConsumerGroupKey(CG.METADATA, "grp"), b"\x00\x03" + s16("grp")),
    (ConsumerGroupKey(CG.PARTITION_METADATA, "grp"), b"\x00\x04" + s16("grp")),
    (ConsumerGroupKey(CG.MEMBER_METADATA, "grp", "m-1"), b"\x00\x05" + s16("grp") + s16("m-1")),
    (ConsumerGroupKey(CG.TARGET_ASSIGNMENT_METADATA, "grp"), b"\x00\x06" + s16("grp")),
    (ConsumerGroupKey(CG.TARGET_ASSIGNMENT_MEMBER, "grp", "m-1"), b"\x00\x07" + s16("grp") + s16("m-1")),
    (ConsumerGroupKey(CG.CURRENT_MEMBER_ASSIGNMENT, "grp", "m-1"), b"\x00\x08" + s16("grp") + s16("m-1")),
]


@pytest.mark.parametrize("key, raw", KEYS, ids=lambda x: str(getattr(x, "type", "")))
def test_key_layout(key, raw):
    record = rec(key, None)
    assert record.key_bytes() == raw
    assert record.value_bytes() is None
    assert decode_record(raw, None) == record  # a tombstone


# Each value: int16 version 0, the flexible struct, tagged fields (0 = none) per struct.
VALUES = [
    (CG.METADATA, ConsumerGroupMetadataValue(7), b"\x00\x00" + i32(7) + b"\x00"),
    (CG.PARTITION_METADATA,
     ConsumerGroupPartitionMetadataValue((TopicMetadata(T1, "orders", 3, ((0, ("r1", "r2")),)),
                                          TopicMetadata(T2, "b", 1))),
     b"\x00\x00" + b"\x03"
     + T1.bytes + cs("orders") + i32(3) + b"\x02" + i32(0) + b"\x03" + cs("r1") + cs("r2") + b"\x00" + b"\x00"
     + T2.bytes + cs("b") + i32(1) + b"\x01" + b"\x00"
     + b"\x00"),
    (CG.MEMBER_METADATA,
     ConsumerGroupMemberMetadataValue("inst", None, "cli", "/1.2.3.4", ("a", "b"), None, 30_000, "range"),
     b"\x00\x00" + cs("inst") + cs(None) + cs("cli") + cs("/1.2.3.4") + b"\x03" + cs("a") + cs("b") + cs(None)
     + i32(30_000) + cs("range") + b"\x00"),
    (CG.TARGET_ASSIGNMENT_METADATA, ConsumerGroupTargetAssignmentMetadataValue(4), b"\x00\x00" + i32(4) + b"\x00"),
    (CG.TARGET_ASSIGNMENT_MEMBER, ConsumerGroupTargetAssignmentMemberValue(((T1, (0, 2)), (T2, ()))),
     b"\x00\x00" + b"\x03" + T1.bytes + b"\x03" + i32(0, 2) + b"\x00" + T2.bytes + b"\x01" + b"\x00" + b"\x00"),
    (CG.CURRENT_MEMBER_ASSIGNMENT,
     ConsumerGroupCurrentMemberAssignmentValue(5, 4, 1, ((T1, (1,)),), ((T2, (0,)),)),
     b"\x00\x00" + i32(5, 4) + b"\x01" + b"\x02" + T1.bytes + b"\x02" + i32(1) + b"\x00"
     + b"\x02" + T2.bytes + b"\x02" + i32(0) + b"\x00" + b"\x00"),
]


@pytest.mark.parametrize("record_type, value, raw", VALUES, ids=lambda x: x if isinstance(x, int) else "")
def test_value_layout(record_type, value, raw):
    key = ConsumerGroupKey(record_type, "g", "m" if record_type in CG.PER_MEMBER else None)
    record = rec(key, value)
    assert record.value_bytes() == raw
    assert decode_record(record.key_bytes(), raw) == record


def test_unknown_tagged_fields_are_skipped():
    # ConsumerGroupMetadataValue with MetadataHash (tag 0, int64; Kafka 4.1+) is read as the
    # fields we model; so is a member metadata value with an unknown tag 5.
    raw = b"\x00\x00" + i32(9) + b"\x01" + b"\x00\x08" + bytes(8)
    assert decode_record(b"\x00\x03" + s16("g"), raw).value == ConsumerGroupMetadataValue(9)
    member = VALUES[2][2][:-1] + b"\x01\x05\x01\x00"
    assert decode_record(b"\x00\x05" + s16("g") + s16("m"), member).value == VALUES[2][1]


def test_classic_member_metadata_is_tag_0_a_nullable_struct():
    # KIP-848 migration: a classic member's session timeout and protocols, as Kafka writes them
    # (ConsumerGroupMemberMetadataValue.json, tag 0): count, tag, size, 0x01 (not null), the struct.
    classic = ClassicMemberMetadata(45_000, (("range", b"\x00\x03"),))
    value = dataclasses.replace(VALUES[2][1], classic_member_metadata=classic)
    struct = b"\x01" + i32(45_000) + b"\x02" + b"\x06range" + b"\x03\x00\x03" + b"\x00" + b"\x00"
    raw = VALUES[2][2][:-1] + b"\x01\x00" + bytes([len(struct)]) + struct
    record = rec(ConsumerGroupKey(CG.MEMBER_METADATA, "g", "m"), value)
    assert record.value_bytes() == raw
    assert decode_record(record.key_bytes(), raw).value == value


def test_bad_values_are_refused():
    with pytest.raises(CorruptRecordError, match="unsupported value version 1"):
        decode_record(b"\x00\x03" + s16("g"), b"\x00\x01" + i32(1) + b"\x00")
    with pytest.raises(CorruptRecordError, match="ConsumerGroupMetadataValue"):
        decode_record(b"\x00\x03" + s16("g"), b"\x00\x00" + i32(1))  # no tagged fields
    with pytest.raises(CorruptRecordError, match="memberId"):
        decode_record(b"\x00\x05" + s16("g"), None)
    with pytest.raises(ValueError):
        ConsumerGroupKey(CG.METADATA, "g", "m")
    assert decode_record(b"\x00\x10" + s16("g"), b"") == UnknownKey(16)  # streams records: skipped


ids = st.uuids()
text = st.text(max_size=12)
int32 = st.integers(-(2**31), 2**31 - 1)
tps = st.lists(st.tuples(ids, st.lists(int32, max_size=4).map(tuple)), max_size=3).map(tuple)


@given(text, text, st.one_of(
    st.builds(ConsumerGroupMetadataValue, int32),
    st.builds(ConsumerGroupPartitionMetadataValue, st.lists(st.builds(
        TopicMetadata, ids, text, int32,
        st.lists(st.tuples(int32, st.lists(text, max_size=2).map(tuple)), max_size=2).map(tuple)),
        max_size=3).map(tuple)),
    st.builds(ConsumerGroupMemberMetadataValue, st.none() | text, st.none() | text, text, text,
              st.lists(text, max_size=3).map(tuple), st.none() | text, int32, st.none() | text),
    st.builds(ConsumerGroupTargetAssignmentMetadataValue, int32),
    st.builds(ConsumerGroupTargetAssignmentMemberValue, tps),
    st.builds(ConsumerGroupCurrentMemberAssignmentValue, int32, int32, st.integers(-128, 127), tps, tps)))
def test_round_trip(group, member, value):
    record_type = {ConsumerGroupMetadataValue: 3, ConsumerGroupPartitionMetadataValue: 4,
                   ConsumerGroupMemberMetadataValue: 5, ConsumerGroupTargetAssignmentMetadataValue: 6,
                   ConsumerGroupTargetAssignmentMemberValue: 7,
                   ConsumerGroupCurrentMemberAssignmentValue: 8}[type(value)]
    record = rec(ConsumerGroupKey(record_type, group, member if record_type in CG.PER_MEMBER else None), value)
    assert decode_record(record.key_bytes(), record.value_bytes()) == record


# ----------------------------------------------------------------- writing and replay
G = "g"
TOPICS = {"t": 7, "u": 2}
TOPIC_IDS = {name: uuid.uuid5(uuid.NAMESPACE_DNS, name) for name in TOPICS}


def metadata(topic):
    return TOPICS.get(topic)


def topic_id(name):
    return TOPIC_IDS.get(name)


def topic_name(tid):
    return {v: k for k, v in TOPIC_IDS.items()}.get(tid)


class Cluster(Driver):
    """test_consumer's Driver whose every change is written to a log (as bytes), like the coordinator."""

    def __init__(self):
        super().__init__(metadata)
        self.log: list[tuple[bytes, bytes | None]] = []
        heartbeat = self.groups.heartbeat

        def written(*args):
            response = heartbeat(*args)
            self.last_records = self._write()
            return response
        self.groups.heartbeat = written

    def _write(self):
        batch = self.groups.take_records(topic_id)
        self.log += [(r.key_bytes(), r.value_bytes()) for r in batch]
        return batch

    def hb(self, member_id, epoch, **kw):
        return self.groups.heartbeat(HB(G, member_id, epoch, **kw), metadata, self.now)

    def tick(self):
        removed = self.groups.tick(self.now)
        self.last_records = self._write()
        return removed

    def reload(self, now=None):
        fresh = ConsumerGroups(session_timeout_ms=10_000, heartbeat_interval_ms=1_000)
        for key, value in self.log:
            fresh.replay(decode_record(key, value), self.now if now is None else now, topic_name)
        return fresh


def persistent(groups):
    """Everything a group keeps across a restart, in comparable form."""
    out = {}
    for gid, g in groups.groups.items():
        members = {mid: (m.instance_id, m.rack_id, m.client_id, m.client_host, m.subscribed_topics,
                         m.rebalance_timeout_ms, m.server_assignor, m.member_epoch, m.previous_epoch, m.state,
                         m.assigned, m.revoking) for mid, m in g.members.items()}
        out[gid] = (g.group_epoch, g.assignment_epoch, g.target, g.metadata, members)
    return out


def test_a_join_writes_kafkas_records_in_kafkas_order():
    c = Cluster()
    m1 = c.join()
    kinds = [(r.key.type, r.value is None) for r in c.last_records]
    assert kinds == [(5, False), (4, False), (3, False), (7, False), (6, False), (8, False)]
    by_type = {r.key.type: r.value for r in c.last_records}
    assert by_type[3] == ConsumerGroupMetadataValue(1)
    assert by_type[4] == ConsumerGroupPartitionMetadataValue((TopicMetadata(TOPIC_IDS["t"], "t", 7),))
    assert by_type[5] == ConsumerGroupMemberMetadataValue(None, None, "", "", ("t",), None, 5_000, None)
    assert by_type[6] == ConsumerGroupTargetAssignmentMetadataValue(1)
    assert by_type[7] == ConsumerGroupTargetAssignmentMemberValue(((TOPIC_IDS["t"], tuple(range(7))),))
    assert by_type[8] == ConsumerGroupCurrentMemberAssignmentValue(1, 0, 0, ((TOPIC_IDS["t"], tuple(range(7))),), ())
    # A heartbeat that changes nothing persistent writes nothing.
    c.now += 1_000
    c.beat(m1)
    assert c.last_records == []


def test_replay_rebuilds_identical_groups_through_rebalances():
    c = Cluster()
    members = [c.join(), c.join()]
    c.settle()
    members.append(c.join(topics=("t", "u")))
    c.beat(members[0])  # mid-revocation: m1 is UNREVOKED_PARTITIONS
    assert c.groups.groups[G].members[members[0]].state is MemberState.UNREVOKED_PARTITIONS
    assert persistent(c.reload()) == persistent(c.groups)
    c.settle()
    TOPICS["t"] = 9  # more partitions: a new group epoch
    try:
        c.settle()
        assert persistent(c.reload()) == persistent(c.groups)
    finally:
        TOPICS["t"] = 7
    reloaded = c.reload()
    assert reloaded.persisted == c.groups.persisted
    assert reloaded.take_records(topic_id) == []  # nothing to rewrite
    assert group_records(reloaded.groups[G], topic_id) == c.groups.persisted[G]


def test_a_member_leaving_is_tombstoned_and_gone_after_replay():
    c = Cluster()
    m1, m2 = c.join(), c.join()
    c.settle()
    assert c.hb(m2, -1).error is E.NONE
    kinds = [(r.key.type, r.key.member_id, r.value is None) for r in c.last_records]
    assert kinds[:3] == [(8, m2, True), (7, m2, True), (5, m2, True)]
    assert (3, None, False) in kinds and all(t != 5 or m == m1 for t, m, _ in kinds[3:])
    assert all(r.key.member_id != m2 for r in c.last_records[3:])
    reloaded = c.reload()
    assert set(reloaded.groups[G].members) == {m1}
    assert persistent(reloaded) == persistent(c.groups)


def test_session_timeout_and_group_deletion_are_tombstoned():
    c = Cluster()
    c.join()
    c.now += 11_000
    assert len(c.tick()) == 1
    assert [r.key.type for r in c.last_records if r.value is None] == [8, 7, 5]
    assert persistent(c.reload()) == persistent(c.groups)  # an empty group survives
    assert c.groups.delete(G) is E.NONE
    batch = c._write()
    assert [(r.key.type, r.value) for r in batch] == [(6, None), (4, None), (3, None)]
    reloaded = c.reload()
    assert reloaded.groups == {} and reloaded.persisted == {}


def test_after_replay_a_member_continues_with_its_epoch_and_fresh_timers():
    c = Cluster()
    m1, m2 = c.join(), c.join()
    c.settle()
    before = c.groups.groups[G]
    load_time = c.now = 500_000
    reloaded = c.reload(now=load_time)
    group = reloaded.groups[G]
    assert all(m.session_deadline == load_time + 10_000 for m in group.members.values())
    assert reloaded.next_deadline_ms() == load_time + 10_000
    r = reloaded.heartbeat(HB(G, m1, c.epoch[m1], owned=c.owned[m1]), metadata, load_time + 1)
    assert r.error is E.NONE and r.member_epoch == before.members[m1].member_epoch
    assert r.assignment == before.members[m1].assigned  # the same assignment, not a rejoin
    assert group.group_epoch == before.group_epoch
    assert reloaded.take_records(topic_id) == []
    assert reloaded.heartbeat(HB(G, "stranger", 3), metadata, load_time).error is E.UNKNOWN_MEMBER_ID


def test_a_pending_revocation_gets_its_rebalance_timeout_again_on_load():
    c = Cluster()
    m1 = c.join()
    c.join()
    c.beat(m1)
    assert c.groups.groups[G].members[m1].state is MemberState.UNREVOKED_PARTITIONS
    reloaded = c.reload(now=1_000_000)
    assert reloaded.groups[G].members[m1].revocation_deadline == 1_000_000 + 5_000


def test_partitions_of_a_topic_that_disappeared_are_dropped_on_replay():
    c = Cluster()
    c.join(topics=("t", "u"))
    fresh = ConsumerGroups()
    for key, value in c.log:
        fresh.replay(decode_record(key, value), 0, lambda tid: "t" if tid == TOPIC_IDS["t"] else None)
    member = next(iter(fresh.groups[G].members.values()))
    assert set(member.assigned) == {"t"}
    assert fresh.groups[G].metadata == {"t": 7, "u": 2}  # names come from the record itself


def test_a_regex_subscription_is_matched_refreshed_persisted_and_kept_across_a_reload():
    """The regex (RE2) is matched against the topics (never those the member may not describe),
    again at most every REGEX_REFRESH_MS, written in the member's record and, after
    a reload, stands for what the member was given until the member is heard from again."""
    from topiclake.broker.group.consumer import REGEX_REFRESH_MS

    topics = {"t": 7, "u": 2, "secret": 1}
    listed = ["t", "secret"]  # the coordinator lists no internal topic
    c = Cluster()
    c.groups._topic_names = lambda: listed

    def hb(groups, member_id, epoch, **kw):
        return groups.heartbeat(HB(G, member_id, epoch, may_describe=lambda t: t != "secret", **kw),
                                topics.get, c.now)

    joined = hb(c.groups, "", 0, subscribed_regex=".*")
    assert joined.error is E.NONE and joined.assignment == {"t": frozenset(range(7))}
    member = joined.member_id
    written = {r.key.type: r.value for r in c.last_records}
    assert written[5].subscribed_topic_regex == ".*" and written[5].subscribed_topic_names == ()

    listed.append("u")  # a topic created later: it joins at the next refresh, not before
    c.now += REGEX_REFRESH_MS - 1
    assert hb(c.groups, member, joined.member_epoch, owned=joined.assignment).assignment == joined.assignment
    c.now += 1
    later = hb(c.groups, member, joined.member_epoch, owned=joined.assignment)
    assert later.assignment == {"t": frozenset(range(7)), "u": frozenset(range(2))}
    assert c.groups.groups[G].members[member].regex_topics == ("t", "u")

    reloaded = c.reload()
    reloaded._topic_names = lambda: listed
    assert reloaded.groups[G].members[member].subscribed_regex == ".*"
    assert reloaded.groups[G].members[member].regex_topics == ("t", "u")  # at once: a classic join may come first
    # Another member joins before the first is heard from: the first keeps both topics' share.
    other = hb(reloaded, "", 0, subscribed_topics=("u",))
    assert other.error is E.NONE
    group = reloaded.groups[G]
    assert group.members[member].regex_topics == ("t", "u")
    mine, theirs = group.target[member], group.target[other.member_id]
    assert mine["t"] == frozenset(range(7)) and set(theirs) == {"u"}
    assert sorted(mine["u"] | theirs["u"]) == [0, 1] and len(mine["u"]) == len(theirs["u"]) == 1

    # The regex given up ("" in a heartbeat): its topics leave the subscription at once.
    dropped = hb(reloaded, member, group.members[member].member_epoch, subscribed_regex="", subscribed_topics=("u",))
    assert dropped.error is E.NONE and group.members[member].regex_topics == ()
    assert group.subscribed_topics() == {"u"} and group.members[member].subscribed_regex is None
