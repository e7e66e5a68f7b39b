"""The records of `__consumer_offsets`, in Kafka's exact byte layouts.

A record's key is `int16 key version` + key struct; its value is `int16 value version` + value
struct, or null (a tombstone: the compacted topic forgets the key). Key versions:

    0, 1  OffsetCommitKey     group STRING | topic STRING | partition int32   (written as 1)
    2     GroupMetadataKey    group STRING
    3+    KIP-848 / share / streams records: decoded as UnknownKey, which the loader skips

OffsetCommitValue (written as v3, or v1 when an explicit expire timestamp is given — Kafka's
`offsetCommitValueVersion`):
    v0, v2  offset i64 | metadata STRING | commitTimestamp i64
    v1      offset i64 | metadata STRING | commitTimestamp i64 | expireTimestamp i64
    v3      offset i64 | leaderEpoch i32 | metadata STRING | commitTimestamp i64
    v4      v3 in flexible form: COMPACT_STRING metadata, then tagged fields

GroupMetadataValue (written as v3):
    protocolType STRING | generation i32 | protocol NULLABLE_STRING | leader NULLABLE_STRING |
    currentStateTimestamp i64 (v2+) | members ARRAY of
        memberId STRING | groupInstanceId NULLABLE_STRING (v3+) | clientId STRING |
        clientHost STRING | rebalanceTimeout i32 (v1+) | sessionTimeout i32 |
        subscription BYTES | assignment BYTES
    v4 is the flexible form (compact strings/bytes/arrays, tagged fields per member and at the end)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from topiclake.segments.errors import CorruptRecordError

from .java import string_hash_code, utils_abs
from .serde import Reader, Writer

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3
NO_TIMESTAMP = -1
NO_LEADER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int
    version: int = field(default=OFFSET_COMMIT_KEY_VERSION, compare=False)


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str
    version: int = field(default=GROUP_METADATA_KEY_VERSION, compare=False)


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A key type this coordinator does not handle (KIP-848, share and streams groups)."""

    version: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = NO_LEADER_EPOCH
    expire_timestamp: int | None = None  # only v1 carries one (old per-commit retention)
    version: int = field(default=OFFSET_COMMIT_VALUE_VERSION, compare=False)  # as read


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = NO_TIMESTAMP
    members: tuple[MemberMetadata, ...] = ()
    version: int = field(default=GROUP_METADATA_VALUE_VERSION, compare=False)  # as read


Key = OffsetCommitKey | GroupMetadataKey | UnknownKey
Value = OffsetCommitValue | GroupMetadataValue


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """One record to append to (or read from) `__consumer_offsets`; value None = tombstone."""

    key: OffsetCommitKey | GroupMetadataKey
    value: Value | None

    def key_bytes(self) -> bytes:
        return encode_key(self.key)

    def value_bytes(self) -> bytes | None:
        return encode_value(self.value)


def offset_commit_record(group: str, topic: str, partition: int,
                         value: OffsetCommitValue | None) -> CoordinatorRecord:
    return CoordinatorRecord(OffsetCommitKey(group, topic, partition), value)


def group_metadata_record(group: str, value: GroupMetadataValue | None) -> CoordinatorRecord:
    return CoordinatorRecord(GroupMetadataKey(group), value)


# ---------------------------------------------------------------------------------- keys

def encode_key(key: OffsetCommitKey | GroupMetadataKey) -> bytes:
    if isinstance(key, OffsetCommitKey):
        return (Writer().int16(OFFSET_COMMIT_KEY_VERSION).string(key.group).string(key.topic)
                .int32(key.partition).getvalue())
    if isinstance(key, GroupMetadataKey):
        return Writer().int16(GROUP_METADATA_KEY_VERSION).string(key.group).getvalue()
    raise TypeError(f"cannot encode key {key!r}")


def decode_key(data: bytes | None) -> Key:
    if data is None:
        raise CorruptRecordError("__consumer_offsets record without a key")
    r = Reader(data, "__consumer_offsets key")
    version = r.int16("key version")
    if version in (0, 1):
        key: Key = OffsetCommitKey(r.string("group"), r.string("topic"), r.int32("partition"), version)
    elif version == 2:
        key = GroupMetadataKey(r.string("group"), version)
    else:
        return UnknownKey(version)
    r.end()
    return key


# -------------------------------------------------------------------------------- values

def encode_value(value: Value | None) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, OffsetCommitValue):
        return _encode_offset_value(value)
    if isinstance(value, GroupMetadataValue):
        return _encode_group_value(value)
    raise TypeError(f"cannot encode value {value!r}")


def decode_value(key: Key, data: bytes | None) -> Value | None:
    """Decode the value belonging to `key` (None stays None: a tombstone)."""
    if data is None:
        return None
    if isinstance(key, OffsetCommitKey):
        return decode_offset_commit_value(data)
    if isinstance(key, GroupMetadataKey):
        return decode_group_metadata_value(data)
    raise ValueError(f"no value schema for {key!r}")


def decode_record(key: bytes | None, value: bytes | None) -> CoordinatorRecord | UnknownKey:
    """One record as read from the log; UnknownKey for record types the loader skips."""
    k = decode_key(key)
    if isinstance(k, UnknownKey):
        return k
    return CoordinatorRecord(k, decode_value(k, value))


def _encode_offset_value(v: OffsetCommitValue) -> bytes:
    w = Writer()
    if v.expire_timestamp is not None:
        w.int16(OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY).int64(v.offset).string(v.metadata)
        w.int64(v.commit_timestamp).int64(v.expire_timestamp)
    else:
        w.int16(OFFSET_COMMIT_VALUE_VERSION).int64(v.offset).int32(v.leader_epoch)
        w.string(v.metadata).int64(v.commit_timestamp)
    return w.getvalue()


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    r = Reader(data, "OffsetCommitValue")
    version = r.int16("value version")
    if not 0 <= version <= 4:
        raise r.fail(f"unsupported value version {version}")
    flexible = version >= 4
    offset = r.int64("offset")
    epoch = r.int32("leaderEpoch") if version >= 3 else NO_LEADER_EPOCH
    metadata = r.string("metadata", flexible=flexible)
    commit_ts = r.int64("commitTimestamp")
    expire_ts = r.int64("expireTimestamp") if version == 1 else None
    if flexible:
        r.tagged_fields()
    r.end()
    return OffsetCommitValue(offset, metadata, commit_ts, epoch, expire_ts, version)


def _encode_group_value(v: GroupMetadataValue) -> bytes:
    w = Writer().int16(GROUP_METADATA_VALUE_VERSION).string(v.protocol_type).int32(v.generation)
    w.string(v.protocol).string(v.leader).int64(v.current_state_timestamp)
    w.array_len(len(v.members))
    for m in v.members:
        w.string(m.member_id).string(m.group_instance_id).string(m.client_id).string(m.client_host)
        w.int32(m.rebalance_timeout).int32(m.session_timeout)
        w.bytes_(m.subscription).bytes_(m.assignment)
    return w.getvalue()


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    r = Reader(data, "GroupMetadataValue")
    version = r.int16("value version")
    if not 0 <= version <= 4:
        raise r.fail(f"unsupported value version {version}")
    fx = version >= 4
    protocol_type = r.string("protocolType", flexible=fx)
    generation = r.int32("generation")
    protocol = r.string("protocol", flexible=fx, nullable=True)
    leader = r.string("leader", flexible=fx, nullable=True)
    state_ts = r.int64("currentStateTimestamp") if version >= 2 else NO_TIMESTAMP
    members = []
    for _ in range(r.array_len("members", flexible=fx)):
        member_id = r.string("memberId", flexible=fx)
        instance_id = r.string("groupInstanceId", flexible=fx, nullable=True) if version >= 3 else None
        client_id = r.string("clientId", flexible=fx)
        client_host = r.string("clientHost", flexible=fx)
        rebalance_timeout = r.int32("rebalanceTimeout") if version >= 1 else None
        session_timeout = r.int32("sessionTimeout")
        subscription = r.bytes_("subscription", flexible=fx)
        assignment = r.bytes_("assignment", flexible=fx)
        if fx:
            r.tagged_fields("member tagged fields")
        # v0 has no rebalance timeout; Kafka's loader uses the session timeout in its place.
        members.append(MemberMetadata(
            member_id, instance_id, client_id, client_host,
            session_timeout if rebalance_timeout is None else rebalance_timeout,
            session_timeout, subscription, assignment))
    if fx:
        r.tagged_fields()
    r.end()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, tuple(members), version)


def partition_for_group(group_id: str, num_partitions: int = 50) -> int:
    """The `__consumer_offsets` partition that owns a group: Utils.abs(hashCode) % n."""
    return utils_abs(string_hash_code(group_id)) % num_partitions
