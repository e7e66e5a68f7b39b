import json

import pytest
from hypothesis import given, strategies as st

from topiclake.protocol.consumer_protocol import (ConsumerAssignment, ConsumerSubscription, decode_assignment,
                                                      decode_subscription, encode_assignment, encode_subscription)
from topiclake.broker.group.records import (CoordinatorRecord, GroupMetadataKey, GroupMetadataValue, MemberMetadata,
                                            OffsetCommitKey, OffsetCommitValue, UnknownKey, decode_group_metadata_value,
                                            decode_key, decode_offset_commit_value, decode_record, encode_key,
                                            encode_value, group_metadata_record, offset_commit_record)
from topiclake.protocol.serde import Writer
from topiclake.segments.errors import CorruptRecordError
from tests.support.paths import CONFORMANCE

VECTORS = CONFORMANCE / "consumer_offsets_vectors.json"


def _vectors():
    return json.loads(VECTORS.read_text())


def _usable():
    return [v for v in _vectors() if "decoded_value" in v]


def test_vector_file_found():
    assert VECTORS.is_file(), VECTORS
    assert len(_usable()) == 3


@pytest.mark.parametrize("vector", _usable(), ids=lambda v: v["source"].rsplit(" ", 1)[-1])
def test_conformance_vector_decodes(vector):
    key = decode_key(bytes.fromhex(vector["key_hex"])) if "key_hex" in vector else None
    want_key = vector.get("decoded_key")
    if want_key is not None:
        assert key.version == want_key["keyVersion"]
        if want_key["type"] == "OffsetCommitKey":
            assert key == OffsetCommitKey(want_key["group"], want_key["topic"], want_key["partition"])
        else:
            assert key == GroupMetadataKey(want_key["group"])
    raw = bytes.fromhex(vector["value_hex"])
    want = vector["decoded_value"]
    if "protocolType" in want:
        value = decode_group_metadata_value(raw)
        assert value.version == want["valueVersion"]
        assert (value.protocol_type, value.generation, value.protocol, value.leader) == (
            want["protocolType"], want["generation"], want["protocol"], want["leader"])
        assert value.current_state_timestamp == -1  # v1 has none
        for got, exp in zip(value.members, want["members"], strict=True):
            assert (got.member_id, got.client_id, got.client_host) == (
                exp["memberId"], exp["clientId"], exp["clientHost"])
            assert (got.rebalance_timeout, got.session_timeout) == (exp["rebalanceTimeout"], exp["sessionTimeout"])
            assert got.group_instance_id is None
            assert got.subscription == bytes.fromhex(exp["subscription"])
            assert got.assignment == bytes.fromhex(exp["assignment"])
            a = decode_assignment(got.assignment)
            assert a.version == exp["assignment_decoded"]["version"]
            assert [[t, list(ps)] for t, ps in a.partitions] == exp["assignment_decoded"]["assigned"]
            assert a.user_data == b""
            # Burrow's subscription blob is empty: not a valid ConsumerProtocolSubscription.
            with pytest.raises(CorruptRecordError, match="ConsumerProtocolSubscription"):
                decode_subscription(got.subscription)
    else:
        value = decode_offset_commit_value(raw)
        assert value.version == want["valueVersion"]
        assert (value.offset, value.metadata, value.commit_timestamp) == (
            want["offset"], want["metadata"], want["commitTimestamp"])
        assert value.leader_epoch == want.get("leaderEpoch", -1)
        assert value.expire_timestamp is None


def test_unusable_vector_is_rejected_clearly():
    [bad] = [v for v in _vectors() if "decoded_value" not in v]
    with pytest.raises(CorruptRecordError, match=r"OffsetCommitValue: tagged fields count needs 1 bytes, 0 left"):
        decode_offset_commit_value(bytes.fromhex(bad["value_hex"]))
    # The same bytes with the tagged-field count Kafka writes decode fine.
    fixed = decode_offset_commit_value(bytes.fromhex(bad["value_hex"]) + b"\x00")
    assert (fixed.version, fixed.offset, fixed.leader_epoch, fixed.metadata, fixed.commit_timestamp) == (
        4, 8372, 0, "testdata", 1637)


def test_offset_value_versions():
    v = OffsetCommitValue(5, "m", 100, 7)
    assert encode_value(v)[:2] == b"\x00\x03"
    assert decode_offset_commit_value(encode_value(v)) == v
    with_expiry = OffsetCommitValue(5, "m", 100, -1, 900)
    assert encode_value(with_expiry)[:2] == b"\x00\x01"
    assert decode_offset_commit_value(encode_value(with_expiry)) == with_expiry
    v2 = Writer().int16(2).int64(5).string("m").int64(100).getvalue()
    assert decode_offset_commit_value(v2) == OffsetCommitValue(5, "m", 100)
    with pytest.raises(CorruptRecordError, match="unsupported value version 5"):
        decode_offset_commit_value(b"\x00\x05" + v2[2:])
    with pytest.raises(CorruptRecordError, match="trailing"):
        decode_offset_commit_value(encode_value(v) + b"\x00")


def _group_value(**kw):
    member = MemberMetadata("m-1", "inst-\U0001F600", "client", "/10.0.0.1", 30000, 10000,
                            encode_subscription(ConsumerSubscription(("t",))),
                            encode_assignment(ConsumerAssignment((("t", (0, 1)),))))
    return GroupMetadataValue(**{"protocol_type": "consumer", "generation": 4, "protocol": "range",
                                 "leader": "m-1", "current_state_timestamp": 1234, "members": (member,), **kw})


def test_group_value_round_trip_and_nulls():
    for v in (_group_value(), _group_value(protocol=None, leader=None, members=())):
        raw = encode_value(v)
        assert raw[:2] == b"\x00\x03"
        assert decode_group_metadata_value(raw) == v


def test_group_value_v4_flexible():
    v = _group_value()
    m = v.members[0]
    w = Writer().int16(4).string(v.protocol_type, flexible=True).int32(v.generation)
    w.string(v.protocol, flexible=True).string(v.leader, flexible=True).int64(v.current_state_timestamp)
    w.array_len(1, flexible=True)
    for s in (m.member_id, m.group_instance_id, m.client_id, m.client_host):
        w.string(s, flexible=True)
    w.int32(m.rebalance_timeout).int32(m.session_timeout)
    w.bytes_(m.subscription, flexible=True).bytes_(m.assignment, flexible=True)
    w.out += b"\x01\x05\x02zz"  # an unknown tagged field in the member: skipped
    w.tagged_fields()
    got = decode_group_metadata_value(w.getvalue())
    assert got == v and got.version == 4


def test_group_value_v0_uses_session_timeout_as_rebalance_timeout():
    w = Writer().int16(0).string("consumer").int32(1).string("range").string("m")
    w.array_len(1).string("m").string("c").string("h").int32(9000).bytes_(b"s").bytes_(b"a")
    [member] = decode_group_metadata_value(w.getvalue()).members
    assert member.rebalance_timeout == member.session_timeout == 9000


def test_keys_and_records():
    key = OffsetCommitKey("g", "t", 3)
    assert encode_key(key) == bytes.fromhex("0001") + b"\x00\x01g\x00\x01t" + (3).to_bytes(4, "big")
    assert decode_key(encode_key(key)) == key
    assert decode_key(b"\x00\x00\x00\x01g\x00\x01t\x00\x00\x00\x03") == key  # key version 0
    assert decode_key(encode_key(GroupMetadataKey("ü"))) == GroupMetadataKey("ü")
    assert decode_key(b"\x00\x09anything") == UnknownKey(9)  # Kafka 4.0's share partition metadata: skipped
    assert decode_record(b"\x00\x11\x00", b"\x00\x00") == UnknownKey(17)  # streams groups: skipped
    tomb = offset_commit_record("g", "t", 3, None)
    assert tomb.value_bytes() is None
    assert decode_record(tomb.key_bytes(), None) == tomb
    rec = group_metadata_record("g", _group_value())
    assert decode_record(rec.key_bytes(), rec.value_bytes()) == rec
    with pytest.raises(CorruptRecordError, match="without a key"):
        decode_key(None)
    with pytest.raises(CorruptRecordError, match="group needs"):
        decode_key(b"\x00\x02\x00\x09abc")


names = st.text(max_size=20)


@given(names, names, st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1), names,
       st.integers(-(2**63), 2**63 - 1), st.integers(-(2**31), 2**31 - 1))
def test_offset_record_round_trip(group, topic, partition, offset, metadata, ts, epoch):
    rec = CoordinatorRecord(OffsetCommitKey(group, topic, partition), OffsetCommitValue(offset, metadata, ts, epoch))
    assert decode_record(rec.key_bytes(), rec.value_bytes()) == rec


tps = st.lists(st.tuples(names, st.lists(st.integers(-(2**31), 2**31 - 1), max_size=4).map(tuple)),
               max_size=4).map(tuple)


@given(st.lists(names, max_size=4).map(tuple), st.none() | st.binary(max_size=8), tps,
       st.integers(-(2**31), 2**31 - 1), st.none() | names)
def test_subscription_round_trip(topics, user_data, owned, generation, rack):
    s = ConsumerSubscription(topics, user_data, owned, generation, rack)
    assert decode_subscription(encode_subscription(s)) == s
    v0 = decode_subscription(encode_subscription(s, 0))
    assert (v0.topics, v0.user_data, v0.owned_partitions, v0.generation_id, v0.version) == (
        topics, user_data, (), -1, 0)


@given(tps, st.none() | st.binary(max_size=8), st.integers(0, 3))
def test_assignment_round_trip(partitions, user_data, version):
    a = ConsumerAssignment(partitions, user_data)
    got = decode_assignment(encode_assignment(a, version))
    assert got == a and got.version == version


def test_newer_consumer_protocol_versions_read_as_newest():
    raw = encode_subscription(ConsumerSubscription(("a", "b"), None, (("a", (1,)),), 5, "r1"))
    future = b"\x00\x07" + raw[2:] + b"extra"
    got = decode_subscription(future)
    assert got.topics == ("a", "b") and got.rack_id == "r1" and got.version == 7
