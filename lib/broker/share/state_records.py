"""The records of `__share_group_state` (KIP-932's share coordinator), in Kafka's byte layouts
(`share-coordinator/src/main/resources/common/message/Share{Snapshot,Update}{Key,Value}.json`).

One key per share-partition: `int16 type` (0 ShareSnapshot, 1 ShareUpdate), then, not flexible,
groupId STRING | topicId UUID | partition int32. Values are version 0, flexible:

    ShareSnapshotValue  snapshotEpoch i32 | stateEpoch i32 | leaderEpoch i32 | startOffset i64 |
                        [tag 0: deliveryCompleteCount i32, Kafka 4.2] | createTimestamp i64 |
                        writeTimestamp i64 | stateBatches []StateBatch
    ShareUpdateValue    snapshotEpoch i32 | leaderEpoch i32 | startOffset i64 (-1: unchanged) |
                        [tag 0: deliveryCompleteCount i32] | stateBatches []StateBatch
    StateBatch          firstOffset i64 | lastOffset i64 | deliveryState i8 (0 Available,
                        2 Acknowledged, 4 Archived) | deliveryCount i16

A snapshot is the whole state of its share-partition; an update carries the batches that
changed since (laid over the state, later wins). A null snapshot value deletes the state.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from topiclake.segments.errors import CorruptRecordError
from topiclake.segments.varint import encode_unsigned_varint

from topiclake.protocol.serde import Reader, Writer

SNAPSHOT_TYPE = 0
UPDATE_TYPE = 1
VALUE_VERSION = 0
NO_OFFSET = -1
UNKNOWN_COUNT = -1
_DELIVERY_COMPLETE_COUNT_TAG = 0
_I32 = struct.Struct(">i")


class DeliveryState:
    """Persisted delivery states (an acquired record is persisted as available)."""

    AVAILABLE = 0
    ACKNOWLEDGED = 2
    ARCHIVED = 4
    ALL = frozenset({AVAILABLE, ACKNOWLEDGED, ARCHIVED})


@dataclass(frozen=True, slots=True)
class ShareStateKey:
    group: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """Kafka's SharePartitionKey.asCoordinatorKey(): what picks the state partition."""
        import base64

        topic = base64.urlsafe_b64encode(self.topic_id.bytes).decode().rstrip("=")
        return f"{self.group}:{topic}:{self.partition}"


@dataclass(frozen=True, slots=True)
class StateBatch:
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareSnapshotValue:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int = UNKNOWN_COUNT


@dataclass(frozen=True, slots=True)
class ShareUpdateValue:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int  # NO_OFFSET: unchanged
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int = UNKNOWN_COUNT


@dataclass(frozen=True, slots=True)
class ShareStateRecord:
    """One record of `__share_group_state`; a snapshot with value None is a tombstone."""

    type: int
    key: ShareStateKey
    value: ShareSnapshotValue | ShareUpdateValue | None

    def key_bytes(self) -> bytes:
        return (Writer().int16(self.type).string(self.key.group).uuid(self.key.topic_id)
                .int32(self.key.partition).getvalue())

    def value_bytes(self) -> bytes | None:
        return None if self.value is None else encode_value(self.value)


def _write_batches(w: Writer, batches: tuple[StateBatch, ...]) -> None:
    w.array_len(len(batches), flexible=True)
    for b in batches:
        w.int64(b.first_offset).int64(b.last_offset).int8(b.delivery_state).int16(b.delivery_count)
        w.tagged_fields()


def _write_count_tag(w: Writer, count: int) -> None:
    if count < 0:
        w.tagged_fields()
        return
    w.out += encode_unsigned_varint(1) + encode_unsigned_varint(_DELIVERY_COMPLETE_COUNT_TAG)
    w.out += encode_unsigned_varint(_I32.size) + _I32.pack(count)


def encode_value(value: ShareSnapshotValue | ShareUpdateValue) -> bytes:
    w = Writer().int16(VALUE_VERSION)
    if isinstance(value, ShareSnapshotValue):
        w.int32(value.snapshot_epoch).int32(value.state_epoch).int32(value.leader_epoch).int64(value.start_offset)
        w.int64(value.create_timestamp).int64(value.write_timestamp)
    else:
        w.int32(value.snapshot_epoch).int32(value.leader_epoch).int64(value.start_offset)
    _write_batches(w, value.state_batches)
    _write_count_tag(w, value.delivery_complete_count)
    return w.getvalue()


def _read_batches(r: Reader) -> tuple[StateBatch, ...]:
    out = []
    for _ in range(r.array_len("stateBatches", flexible=True)):
        batch = StateBatch(r.int64("firstOffset"), r.int64("lastOffset"), r.int8("deliveryState"),
                           r.int16("deliveryCount"))
        if batch.last_offset < batch.first_offset or batch.delivery_state not in DeliveryState.ALL:
            raise r.fail(f"invalid state batch {batch}")
        r.tagged_fields("stateBatches tagged fields")
        out.append(batch)
    return tuple(out)


def _read_count_tag(r: Reader) -> int:
    count = UNKNOWN_COUNT
    for _ in range(r.uvarint("tagged fields count")):
        tag, size = r.uvarint("tag"), r.uvarint("tag size")
        raw = r._take(size, "tagged field")
        if tag == _DELIVERY_COMPLETE_COUNT_TAG and size == _I32.size:
            count = _I32.unpack(raw)[0]
    return count


def decode_record(key: bytes | None, value: bytes | None) -> ShareStateRecord | None:
    """One record as read from the log; None for a record type this coordinator does not know."""
    if key is None:
        raise CorruptRecordError("__share_group_state record without a key")
    r = Reader(key, "__share_group_state key")
    record_type = r.int16("record type")
    if record_type not in (SNAPSHOT_TYPE, UPDATE_TYPE):
        return None
    k = ShareStateKey(r.string("groupId"), r.uuid("topicId"), r.int32("partition"))
    r.end()
    if value is None:
        return ShareStateRecord(record_type, k, None)
    name = "ShareSnapshotValue" if record_type == SNAPSHOT_TYPE else "ShareUpdateValue"
    r = Reader(value, name)
    version = r.int16("value version")
    if version != VALUE_VERSION:
        raise r.fail(f"unsupported value version {version}")
    if record_type == SNAPSHOT_TYPE:
        head = (r.int32("snapshotEpoch"), r.int32("stateEpoch"), r.int32("leaderEpoch"), r.int64("startOffset"),
                r.int64("createTimestamp"), r.int64("writeTimestamp"))
        batches = _read_batches(r)
        decoded: ShareSnapshotValue | ShareUpdateValue = ShareSnapshotValue(*head, batches, _read_count_tag(r))
    else:
        head = (r.int32("snapshotEpoch"), r.int32("leaderEpoch"), r.int64("startOffset"))
        batches = _read_batches(r)
        decoded = ShareUpdateValue(*head, batches, _read_count_tag(r))
    r.end()
    return ShareStateRecord(record_type, k, decoded)
