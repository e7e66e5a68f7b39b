"""The records of `__consumer_offsets`, in Kafka's exact byte layouts.

A record's key is `int16 key version` + key struct; its value is `int16 value version` + value
struct, or null (a tombstone: the compacted topic forgets the key). Key versions:

    0, 1  OffsetCommitKey     group STRING | topic STRING | partition int32   (written as 1)
    2     GroupMetadataKey    group STRING
    3-8   KIP-848 consumer-group records (ConsumerGroupKey, below)
    10-15 share-group records (KIP-932): their layouts are in `share_records`
    9, 16+ Kafka 4.0's share partition metadata, streams records: UnknownKey, which the loader skips

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

KIP-848 consumer groups (`group-coordinator/src/main/resources/common/message/ConsumerGroup*.json`).
Keys are not flexible: `int16 type` + group STRING (+ member STRING for 5, 7, 8). Values are all
version 0 and flexible (compact strings/arrays, every struct ends with tagged fields; tags we do
not model - MetadataHash, AssignmentEpochs ... - are skipped on read and never written).
TopicPartitions = topicId UUID | partitions []int32.

    3  ConsumerGroupMetadata               epoch i32
    4  ConsumerGroupPartitionMetadata      topics [] of topicId UUID | topicName STRING |
                                           numPartitions i32 | partitionMetadata [] of
                                           (partition i32 | racks []STRING)
    5  ConsumerGroupMemberMetadata         instanceId N_STRING | rackId N_STRING | clientId STRING |
                                           clientHost STRING | subscribedTopicNames []STRING |
                                           subscribedTopicRegex N_STRING | rebalanceTimeoutMs i32 |
                                           serverAssignor N_STRING | tag 0: ClassicMemberMetadata
                                           (a member using the classic protocol, KIP-848 migration):
                                           nullable struct = 0x01 | sessionTimeoutMs i32 |
                                           supportedProtocols [] of (name STRING | metadata BYTES)
    6  ConsumerGroupTargetAssignmentMetadata  assignmentEpoch i32
    7  ConsumerGroupTargetAssignmentMember    topicPartitions []TopicPartitions
    8  ConsumerGroupCurrentMemberAssignment   memberEpoch i32 | previousMemberEpoch i32 | state i8 |
                                           assignedPartitions []TopicPartitions |
                                           partitionsPendingRevocation []TopicPartitions
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from topiclake.protocol.serde import (Reader, TopicPartitions, Writer, read_strings, read_topic_partitions,
                                      write_strings, write_topic_partitions)
from topiclake.segments.batch import NO_TIMESTAMP
from topiclake.segments.errors import CorruptRecordError

from ..constants import NO_LEADER_EPOCH
from . import share_records
from .share_records import SG, ShareGroupKey

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3
CONSUMER_GROUP_VALUE_VERSION = 0


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


class CG:
    """The KIP-848 record types (= key versions)."""

    METADATA = 3
    PARTITION_METADATA = 4
    MEMBER_METADATA = 5
    TARGET_ASSIGNMENT_METADATA = 6
    TARGET_ASSIGNMENT_MEMBER = 7
    CURRENT_MEMBER_ASSIGNMENT = 8
    PER_MEMBER = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})
    ALL = frozenset(range(3, 9))


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """The key of a KIP-848 record: `type` 3-8; `member_id` only for types 5, 7 and 8."""

    type: int
    group: str
    member_id: str | None = None

    def __post_init__(self) -> None:
        if self.type not in CG.ALL or (self.member_id is not None) != (self.type in CG.PER_MEMBER):
            raise ValueError(f"invalid consumer group key {self!r}")


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A key type this coordinator does not handle (share and streams groups)."""

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


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int
    partition_racks: tuple[tuple[int, tuple[str, ...]], ...] = ()  # (partition, racks); unused since 4.0


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    topics: tuple[TopicMetadata, ...] = ()


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a member of a consumer group that speaks the classic protocol (JoinGroup/SyncGroup)
    joined with: its session timeout and its protocols, (name, metadata) in its order."""

    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None  # tag 0; None: a consumer-protocol member


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int




@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    """Type 7: the partitions the assignor gave a member at the assignment epoch."""

    topic_partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    """Type 8: where a member is on its way to the target (what it owns, what it must give up)."""

    member_epoch: int
    previous_member_epoch: int
    state: int  # Kafka's MemberState: 0 STABLE, 1 UNREVOKED_PARTITIONS, 2 UNRELEASED_PARTITIONS
    assigned_partitions: TopicPartitions
    partitions_pending_revocation: TopicPartitions


ConsumerGroupValue = (ConsumerGroupMetadataValue | ConsumerGroupPartitionMetadataValue |
                      ConsumerGroupMemberMetadataValue | ConsumerGroupTargetAssignmentMetadataValue |
                      ConsumerGroupTargetAssignmentMemberValue | ConsumerGroupCurrentMemberAssignmentValue)
Key = OffsetCommitKey | GroupMetadataKey | ConsumerGroupKey | ShareGroupKey | UnknownKey
Value = OffsetCommitValue | GroupMetadataValue | ConsumerGroupValue | share_records.ShareGroupValue


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """One record to append to (or read from) `__consumer_offsets`; value None = tombstone."""

    key: OffsetCommitKey | GroupMetadataKey | ConsumerGroupKey | ShareGroupKey
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


# ------------------------------------------------------------------ keys and values
# What each record type (key version) is: `RECORD_TYPES` at the end of this module, the one table.

def encode_key(key: OffsetCommitKey | GroupMetadataKey | ConsumerGroupKey | ShareGroupKey) -> bytes:
    if isinstance(key, OffsetCommitKey):
        return (Writer().int16(OFFSET_COMMIT_KEY_VERSION).string(key.group).string(key.topic)
                .int32(key.partition).getvalue())
    if isinstance(key, GroupMetadataKey):
        return Writer().int16(GROUP_METADATA_KEY_VERSION).string(key.group).getvalue()
    if isinstance(key, (ConsumerGroupKey, ShareGroupKey)):  # int16 type | group | member (per-member types)
        w = Writer().int16(key.type).string(key.group)
        if key.member_id is not None:
            w.string(key.member_id)
        return w.getvalue()
    raise TypeError(f"cannot encode key {key!r}")


def decode_key(data: bytes | None) -> Key:
    if data is None:
        raise CorruptRecordError("__consumer_offsets record without a key")
    r = Reader(data, "__consumer_offsets key")
    version = r.int16("key version")
    record_type = RECORD_TYPES.get(version)
    if record_type is None:
        return UnknownKey(version)
    key = record_type.read_key(version, r)
    r.end()
    return key


def encode_value(value: Value | None) -> bytes | None:
    if value is None:
        return None
    write = _VALUE_WRITERS.get(type(value))
    if write is None:
        raise TypeError(f"cannot encode value {value!r}")
    return write(value)


def decode_value(key: Key, data: bytes | None) -> Value | None:
    """Decode the value belonging to `key` (None stays None: a tombstone)."""
    if data is None:
        return None
    number = key.version if isinstance(key, (OffsetCommitKey, GroupMetadataKey)) else getattr(key, "type", None)
    record_type = RECORD_TYPES.get(number)
    if record_type is None:
        raise ValueError(f"no value schema for {key!r}")
    return record_type.read_value(key, data)


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


# ------------------------------------------------------------ KIP-848 consumer groups

def _encode_partition_metadata(w: Writer, v: ConsumerGroupPartitionMetadataValue) -> None:
    w.array_len(len(v.topics), flexible=True)
    for t in v.topics:
        w.uuid(t.topic_id).string(t.topic_name, flexible=True).int32(t.num_partitions)
        w.array_len(len(t.partition_racks), flexible=True)
        for partition, racks in t.partition_racks:
            w.int32(partition)
            write_strings(w, racks)
            w.tagged_fields()
        w.tagged_fields()


def _encode_member_metadata(w: Writer, v: ConsumerGroupMemberMetadataValue) -> None:
    w.string(v.instance_id, flexible=True).string(v.rack_id, flexible=True)
    w.string(v.client_id, flexible=True).string(v.client_host, flexible=True)
    write_strings(w, v.subscribed_topic_names)
    w.string(v.subscribed_topic_regex, flexible=True).int32(v.rebalance_timeout_ms)
    w.string(v.server_assignor, flexible=True)


CLASSIC_MEMBER_METADATA_TAG = 0
_NULLABLE_STRUCT_PRESENT = 1  # a nullable struct's leading marker byte (-1 would be null)


def _consumer_value_tags(value: ConsumerGroupValue) -> dict[int, bytes] | None:
    if isinstance(value, ConsumerGroupMemberMetadataValue) and value.classic_member_metadata is not None:
        c = value.classic_member_metadata
        w = Writer().int8(_NULLABLE_STRUCT_PRESENT).int32(c.session_timeout_ms)
        w.array_len(len(c.supported_protocols), flexible=True)
        for name, metadata in c.supported_protocols:
            w.string(name, flexible=True).bytes_(metadata, flexible=True).tagged_fields()
        return {CLASSIC_MEMBER_METADATA_TAG: w.tagged_fields().getvalue()}
    return None


def _decode_classic_member_metadata(data: bytes) -> ClassicMemberMetadata | None:
    r = Reader(data, "ClassicMemberMetadata")
    if r.int8("present") < 0:
        return None
    session_timeout = r.int32("sessionTimeoutMs")
    protocols = []
    for _ in range(r.array_len("supportedProtocols", flexible=True)):
        name = r.string("name", flexible=True)
        protocols.append((name, r.bytes_("metadata", flexible=True)))
        r.tagged_fields("supportedProtocols tagged fields")
    r.tagged_fields("ClassicMemberMetadata tagged fields")
    r.end()
    return ClassicMemberMetadata(session_timeout, tuple(protocols))


def _encode_current_assignment(w: Writer, v: ConsumerGroupCurrentMemberAssignmentValue) -> None:
    w.int32(v.member_epoch).int32(v.previous_member_epoch).int8(v.state)
    write_topic_partitions(w, v.assigned_partitions)
    write_topic_partitions(w, v.partitions_pending_revocation)


_CONSUMER_ENCODERS = {
    ConsumerGroupMetadataValue: lambda w, v: w.int32(v.epoch),
    ConsumerGroupPartitionMetadataValue: _encode_partition_metadata,
    ConsumerGroupMemberMetadataValue: _encode_member_metadata,
    ConsumerGroupTargetAssignmentMetadataValue: lambda w, v: w.int32(v.assignment_epoch),
    ConsumerGroupTargetAssignmentMemberValue: lambda w, v: write_topic_partitions(w, v.topic_partitions),
    ConsumerGroupCurrentMemberAssignmentValue: _encode_current_assignment,
}


def _decode_partition_metadata(r: Reader) -> ConsumerGroupPartitionMetadataValue:
    topics = []
    for _ in range(r.array_len("topics", flexible=True)):
        topic_id = r.uuid("topicId")
        name = r.string("topicName", flexible=True)
        count = r.int32("numPartitions")
        racks = []
        for _ in range(r.array_len("partitionMetadata", flexible=True)):
            partition = r.int32("partition")
            racks.append((partition, read_strings(r, "racks")))
            r.tagged_fields("partitionMetadata tagged fields")
        r.tagged_fields("topics tagged fields")
        topics.append(TopicMetadata(topic_id, name, count, tuple(racks)))
    return ConsumerGroupPartitionMetadataValue(tuple(topics))


def _decode_member_metadata(r: Reader) -> ConsumerGroupMemberMetadataValue:
    return ConsumerGroupMemberMetadataValue(
        instance_id=r.string("instanceId", flexible=True, nullable=True),
        rack_id=r.string("rackId", flexible=True, nullable=True),
        client_id=r.string("clientId", flexible=True),
        client_host=r.string("clientHost", flexible=True),
        subscribed_topic_names=read_strings(r, "subscribedTopicNames"),
        subscribed_topic_regex=r.string("subscribedTopicRegex", flexible=True, nullable=True),
        rebalance_timeout_ms=r.int32("rebalanceTimeoutMs"),
        server_assignor=r.string("serverAssignor", flexible=True, nullable=True))


def _decode_current_assignment(r: Reader) -> ConsumerGroupCurrentMemberAssignmentValue:
    return ConsumerGroupCurrentMemberAssignmentValue(
        r.int32("memberEpoch"), r.int32("previousMemberEpoch"), r.int8("state"),
        read_topic_partitions(r, "assignedPartitions"), read_topic_partitions(r, "partitionsPendingRevocation"))


_CONSUMER_DECODERS = {  # record type -> (value schema name, decoder)
    CG.METADATA: ("ConsumerGroupMetadataValue", lambda r: ConsumerGroupMetadataValue(r.int32("epoch"))),
    CG.PARTITION_METADATA: ("ConsumerGroupPartitionMetadataValue", _decode_partition_metadata),
    CG.MEMBER_METADATA: ("ConsumerGroupMemberMetadataValue", _decode_member_metadata),
    CG.TARGET_ASSIGNMENT_METADATA: ("ConsumerGroupTargetAssignmentMetadataValue",
                                    lambda r: ConsumerGroupTargetAssignmentMetadataValue(r.int32("assignmentEpoch"))),
    CG.TARGET_ASSIGNMENT_MEMBER: ("ConsumerGroupTargetAssignmentMemberValue",
                                  lambda r: ConsumerGroupTargetAssignmentMemberValue(
                                      read_topic_partitions(r, "topicPartitions"))),
    CG.CURRENT_MEMBER_ASSIGNMENT: ("ConsumerGroupCurrentMemberAssignmentValue", _decode_current_assignment),
}


def decode_consumer_group_value(record_type: int, data: bytes) -> ConsumerGroupValue:
    name, decode = _CONSUMER_DECODERS[record_type]
    r = Reader(data, name)
    version = r.int16("value version")
    if version != CONSUMER_GROUP_VALUE_VERSION:
        raise r.fail(f"unsupported value version {version}")
    value = decode(r)
    tags = r.tagged_fields()
    r.end()
    if isinstance(value, ConsumerGroupMemberMetadataValue) and CLASSIC_MEMBER_METADATA_TAG in tags:
        value = dataclasses.replace(value, classic_member_metadata=_decode_classic_member_metadata(
            tags[CLASSIC_MEMBER_METADATA_TAG]))
    return value


# ------------------------------------------------------------------ the record-type table
@dataclass(frozen=True, slots=True)
class RecordType:
    """How the key (after its int16 type) and the value of one record type read."""

    read_key: Callable[[int, Reader], Key]
    read_value: Callable[[Key, bytes], Value]


def _read_offset_commit_key(version: int, r: Reader) -> OffsetCommitKey:
    return OffsetCommitKey(r.string("group"), r.string("topic"), r.int32("partition"), version)


def _group_key_reader(key_class: type, per_member: frozenset[int]) -> Callable[[int, Reader], Key]:
    """KIP-848 and share-group keys: group STRING, then member STRING for per-member types."""
    def read(record_type: int, r: Reader) -> Key:
        group = r.string("groupId")
        return key_class(record_type, group, r.string("memberId") if record_type in per_member else None)

    return read


_OFFSET_COMMIT = RecordType(_read_offset_commit_key, lambda _key, data: decode_offset_commit_value(data))
_CONSUMER_GROUP = RecordType(_group_key_reader(ConsumerGroupKey, CG.PER_MEMBER),
                             lambda key, data: decode_consumer_group_value(key.type, data))
_SHARE_GROUP = RecordType(_group_key_reader(ShareGroupKey, SG.PER_MEMBER),
                          lambda key, data: share_records.decode_value(key.type, data))

# Every record type of __consumer_offsets this coordinator keeps, by key version; others
# (Kafka 4.0's type 9, streams groups) decode as UnknownKey and are skipped.
RECORD_TYPES: dict[int, RecordType] = {
    0: _OFFSET_COMMIT,
    1: _OFFSET_COMMIT,
    GROUP_METADATA_KEY_VERSION: RecordType(lambda version, r: GroupMetadataKey(r.string("group"), version),
                                           lambda _key, data: decode_group_metadata_value(data)),
    **{t: _CONSUMER_GROUP for t in CG.ALL},
    **{t: _SHARE_GROUP for t in SG.ALL},
}


def _encode_consumer_group_value(value: ConsumerGroupValue) -> bytes:
    w = Writer().int16(CONSUMER_GROUP_VALUE_VERSION)
    _CONSUMER_ENCODERS[type(value)](w, value)
    return w.tagged_fields(_consumer_value_tags(value)).getvalue()


_VALUE_WRITERS: dict[type, Callable[[Any], bytes]] = {
    OffsetCommitValue: _encode_offset_value,
    GroupMetadataValue: _encode_group_value,
    **{cls: _encode_consumer_group_value for cls in _CONSUMER_ENCODERS},
    **{cls: share_records.encode_value for cls in share_records.VALUE_TYPES},
}
