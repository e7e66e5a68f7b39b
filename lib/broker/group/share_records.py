"""Share-group records of `__consumer_offsets` (KIP-932), in Kafka's byte layouts
(`group-coordinator/src/main/resources/common/message/ShareGroup*.json`).

Keys are not flexible: `int16 type` + group STRING (+ member STRING for 10, 13 and 14). Values
are version 0 and flexible (compact strings and arrays, tagged fields after every struct; tags
we do not model, such as MetadataHash, are skipped on read and never written).
TopicPartitions = topicId UUID | partitions []int32.

    10  ShareGroupMemberMetadata          rackId N_STRING | clientId STRING | clientHost STRING |
                                          subscribedTopicNames []STRING
    11  ShareGroupMetadata                epoch i32
    12  ShareGroupTargetAssignmentMetadata  assignmentEpoch i32
    13  ShareGroupTargetAssignmentMember    topicPartitions []TopicPartitions
    14  ShareGroupCurrentMemberAssignment   memberEpoch i32 | previousMemberEpoch i32 | state i8 |
                                          assignedPartitions []TopicPartitions
    15  ShareGroupStatePartitionMetadata  initializingTopics [] | initializedTopics [] of
                                          (topicId UUID | topicName STRING | partitions []int32) |
                                          deletingTopics [] of (topicId UUID | topicName STRING)

Type 9 (ShareGroupPartitionMetadata, Kafka 4.0 only) is read as unknown and skipped.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from topiclake.protocol.serde import (Reader, TopicPartitions, Writer, read_strings, read_topic_partitions,
                                      write_strings, write_topic_partitions)

SHARE_GROUP_VALUE_VERSION = 0


class SG:
    """The share-group record types (= key versions)."""

    MEMBER_METADATA = 10
    METADATA = 11
    TARGET_ASSIGNMENT_METADATA = 12
    TARGET_ASSIGNMENT_MEMBER = 13
    CURRENT_MEMBER_ASSIGNMENT = 14
    STATE_PARTITION_METADATA = 15
    PER_MEMBER = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})
    ALL = frozenset(range(10, 16))


@dataclass(frozen=True, slots=True)
class ShareGroupKey:
    """The key of a share-group record: `type` 10-15; `member_id` only for 10, 13 and 14."""

    type: int
    group: str
    member_id: str | None = None

    def __post_init__(self) -> None:
        if self.type not in SG.ALL or (self.member_id is not None) != (self.type in SG.PER_MEMBER):
            raise ValueError(f"invalid share group key {self!r}")




@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataValue:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataValue:
    epoch: int


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberValue:
    topic_partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # Kafka's MemberState byte; share members are always 0 (STABLE)
    assigned_partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class TopicPartitionsInfo:
    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    topic_id: uuid.UUID
    topic_name: str


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataValue:
    """Which topic partitions have share-partition state in `__share_group_state`."""

    initializing_topics: tuple[TopicPartitionsInfo, ...] = ()
    initialized_topics: tuple[TopicPartitionsInfo, ...] = ()
    deleting_topics: tuple[TopicInfo, ...] = ()


ShareGroupValue = (ShareGroupMemberMetadataValue | ShareGroupMetadataValue | ShareGroupTargetAssignmentMetadataValue
                   | ShareGroupTargetAssignmentMemberValue | ShareGroupCurrentMemberAssignmentValue
                   | ShareGroupStatePartitionMetadataValue)


# --------------------------------------------------------------------------- values

def _write_infos(w: Writer, infos: tuple, with_partitions: bool) -> None:
    w.array_len(len(infos), flexible=True)
    for info in infos:
        w.uuid(info.topic_id).string(info.topic_name, flexible=True)
        if with_partitions:
            w.array_len(len(info.partitions), flexible=True)
            for p in info.partitions:
                w.int32(p)
        w.tagged_fields()


def _read_infos(r: Reader, field: str, with_partitions: bool) -> tuple:
    out = []
    for _ in range(r.array_len(field, flexible=True)):
        topic_id, name = r.uuid("topicId"), r.string("topicName", flexible=True)
        if with_partitions:
            parts = tuple(r.int32("partition") for _ in range(r.array_len("partitions", flexible=True)))
            out.append(TopicPartitionsInfo(topic_id, name, parts))
        else:
            out.append(TopicInfo(topic_id, name))
        r.tagged_fields(f"{field} tagged fields")
    return tuple(out)


def _encode_member_metadata(w: Writer, v: ShareGroupMemberMetadataValue) -> None:
    w.string(v.rack_id, flexible=True).string(v.client_id, flexible=True).string(v.client_host, flexible=True)
    write_strings(w, v.subscribed_topic_names)


def _decode_member_metadata(r: Reader) -> ShareGroupMemberMetadataValue:
    rack = r.string("rackId", flexible=True, nullable=True)
    client_id, client_host = r.string("clientId", flexible=True), r.string("clientHost", flexible=True)
    return ShareGroupMemberMetadataValue(rack, client_id, client_host, read_strings(r, "subscribedTopicNames"))


def _encode_current(w: Writer, v: ShareGroupCurrentMemberAssignmentValue) -> None:
    w.int32(v.member_epoch).int32(v.previous_member_epoch).int8(v.state)
    write_topic_partitions(w, v.assigned_partitions)


def _encode_state_metadata(w: Writer, v: ShareGroupStatePartitionMetadataValue) -> None:
    _write_infos(w, v.initializing_topics, True)
    _write_infos(w, v.initialized_topics, True)
    _write_infos(w, v.deleting_topics, False)


_ENCODERS = {
    ShareGroupMemberMetadataValue: _encode_member_metadata,
    ShareGroupMetadataValue: lambda w, v: w.int32(v.epoch),
    ShareGroupTargetAssignmentMetadataValue: lambda w, v: w.int32(v.assignment_epoch),
    ShareGroupTargetAssignmentMemberValue:
        lambda w, v: write_topic_partitions(w, v.topic_partitions),
    ShareGroupCurrentMemberAssignmentValue: _encode_current,
    ShareGroupStatePartitionMetadataValue: _encode_state_metadata,
}

_DECODERS = {  # record type -> (value schema name, decoder)
    SG.MEMBER_METADATA: ("ShareGroupMemberMetadataValue", _decode_member_metadata),
    SG.METADATA: ("ShareGroupMetadataValue", lambda r: ShareGroupMetadataValue(r.int32("epoch"))),
    SG.TARGET_ASSIGNMENT_METADATA: ("ShareGroupTargetAssignmentMetadataValue",
                                    lambda r: ShareGroupTargetAssignmentMetadataValue(r.int32("assignmentEpoch"))),
    SG.TARGET_ASSIGNMENT_MEMBER: ("ShareGroupTargetAssignmentMemberValue",
                                  lambda r: ShareGroupTargetAssignmentMemberValue(
                                      read_topic_partitions(r, "topicPartitions"))),
    SG.CURRENT_MEMBER_ASSIGNMENT: ("ShareGroupCurrentMemberAssignmentValue",
                                   lambda r: ShareGroupCurrentMemberAssignmentValue(
                                       r.int32("memberEpoch"), r.int32("previousMemberEpoch"), r.int8("state"),
                                       read_topic_partitions(r, "assignedPartitions"))),
    SG.STATE_PARTITION_METADATA: ("ShareGroupStatePartitionMetadataValue",
                                  lambda r: ShareGroupStatePartitionMetadataValue(
                                      _read_infos(r, "initializingTopics", True),
                                      _read_infos(r, "initializedTopics", True),
                                      _read_infos(r, "deletingTopics", False))),
}


VALUE_TYPES = tuple(_ENCODERS)  # the value classes of share-group records


def encode_value(value: ShareGroupValue) -> bytes:
    w = Writer().int16(SHARE_GROUP_VALUE_VERSION)
    _ENCODERS[type(value)](w, value)
    return w.tagged_fields().getvalue()


def decode_value(record_type: int, data: bytes) -> ShareGroupValue:
    name, decode = _DECODERS[record_type]
    r = Reader(data, name)
    version = r.int16("value version")
    if version != SHARE_GROUP_VALUE_VERSION:
        raise r.fail(f"unsupported value version {version}")
    value = decode(r)
    r.tagged_fields()
    r.end()
    return value
