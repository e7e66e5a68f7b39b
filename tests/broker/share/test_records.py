"""Kafka's byte layouts of the share records: `__share_group_state` (ShareSnapshot/ShareUpdate)
and the share-group records of `__consumer_offsets` (types 10-15), and the replay that lays
updates over a snapshot."""

import struct
import uuid

import pytest

from topiclake.broker.group import records as offsets_records
from topiclake.broker.group.share_records import (SG, ShareGroupCurrentMemberAssignmentValue, ShareGroupKey,
                                                  ShareGroupMemberMetadataValue, ShareGroupMetadataValue,
                                                  ShareGroupStatePartitionMetadataValue,
                                                  ShareGroupTargetAssignmentMemberValue,
                                                  ShareGroupTargetAssignmentMetadataValue, TopicPartitionsInfo)
from topiclake.broker.share.persisted import PersistedState, apply_update, from_snapshot, overlay
from topiclake.broker.share.state_records import (SNAPSHOT_TYPE, UPDATE_TYPE, DeliveryState, ShareSnapshotValue,
                                                  ShareStateKey, ShareStateRecord, ShareUpdateValue, StateBatch,
                                                  decode_record)
from topiclake.segments.errors import CorruptRecordError

TOPIC = uuid.UUID("52a6c09f-d16a-4d78-ab10-04af6554588d")
KEY = ShareStateKey("gs1", TOPIC, 3)


def test_snapshot_bytes_follow_kafkas_schema():
    value = ShareSnapshotValue(1, 2, 0, 40, 1000, 2000, (StateBatch(40, 44, DeliveryState.ACKNOWLEDGED, 1),),
                               delivery_complete_count=5)
    record = ShareStateRecord(SNAPSHOT_TYPE, KEY, value)
    assert record.key_bytes() == struct.pack(">hh3s16si", 0, 3, b"gs1", TOPIC.bytes, 3)
    expected = (struct.pack(">hiiiqqq", 0, 1, 2, 0, 40, 1000, 2000)
                + bytes([2]) + struct.pack(">qqbh", 40, 44, 2, 1) + b"\x00"  # compact array of 1, batch tags
                + bytes([1, 0, 4]) + struct.pack(">i", 5))  # tagged fields: DeliveryCompleteCount (tag 0)
    assert record.value_bytes() == expected
    assert decode_record(record.key_bytes(), record.value_bytes()) == record


def test_update_and_tombstone_round_trip_and_unknown_types_are_skipped():
    update = ShareStateRecord(UPDATE_TYPE, KEY, ShareUpdateValue(1, 0, -1, (StateBatch(5, 5, 4, 3),)))
    assert update.value_bytes()[-1:] == b"\x00"  # no DeliveryCompleteCount when unknown
    assert decode_record(update.key_bytes(), update.value_bytes()) == update
    tomb = ShareStateRecord(SNAPSHOT_TYPE, KEY, None)
    assert decode_record(tomb.key_bytes(), None) == tomb
    assert decode_record(struct.pack(">h", 9) + b"rest", b"") is None
    with pytest.raises(CorruptRecordError):
        decode_record(update.key_bytes(), update.value_bytes()[:-3])


def test_updates_lay_over_the_snapshot_and_the_start_offset_prunes():
    state = from_snapshot(ShareSnapshotValue(0, 1, 0, 10, 0, 0, (StateBatch(10, 19, DeliveryState.AVAILABLE, 1),)))
    state = apply_update(state, ShareUpdateValue(0, 0, -1, (StateBatch(12, 13, DeliveryState.ACKNOWLEDGED, 1),)))
    assert state.batches == (StateBatch(10, 11, 0, 1), StateBatch(12, 13, 2, 1), StateBatch(14, 19, 0, 1))
    state = apply_update(state, ShareUpdateValue(0, 0, 12, (StateBatch(14, 19, DeliveryState.ARCHIVED, 2),)))
    assert (state.start_offset, state.batches) == (12, (StateBatch(12, 13, 2, 1), StateBatch(14, 19, 4, 2)))
    assert state.state_epoch == 1 and state.end_offset == 19
    assert overlay((StateBatch(0, 9, 0, 1),), (StateBatch(0, 9, 0, 1),)) == (StateBatch(0, 9, 0, 1),)
    assert PersistedState(0, 7).end_offset == 6


@pytest.mark.parametrize("key,value", [
    (ShareGroupKey(SG.MEMBER_METADATA, "g", "m"),
     ShareGroupMemberMetadataValue("rack", "cid", "/127.0.0.1", ("a", "b"))),
    (ShareGroupKey(SG.METADATA, "g"), ShareGroupMetadataValue(7)),
    (ShareGroupKey(SG.TARGET_ASSIGNMENT_METADATA, "g"), ShareGroupTargetAssignmentMetadataValue(7)),
    (ShareGroupKey(SG.TARGET_ASSIGNMENT_MEMBER, "g", "m"), ShareGroupTargetAssignmentMemberValue(((TOPIC, (0, 1)),))),
    (ShareGroupKey(SG.CURRENT_MEMBER_ASSIGNMENT, "g", "m"),
     ShareGroupCurrentMemberAssignmentValue(7, 6, 0, ((TOPIC, (1,)),))),
    (ShareGroupKey(SG.STATE_PARTITION_METADATA, "g"),
     ShareGroupStatePartitionMetadataValue(initialized_topics=(TopicPartitionsInfo(TOPIC, "t", (0, 1)),))),
])
def test_share_group_records_round_trip_through_consumer_offsets(key, value):
    record = offsets_records.CoordinatorRecord(key, value)
    decoded = offsets_records.decode_record(record.key_bytes(), record.value_bytes())
    assert decoded == record
    assert record.key_bytes()[:2] == struct.pack(">h", key.type)
    assert record.value_bytes()[:2] == b"\x00\x00"  # value version 0


def test_share_group_epoch_bytes():
    record = offsets_records.CoordinatorRecord(ShareGroupKey(SG.METADATA, "g"), ShareGroupMetadataValue(7))
    assert record.key_bytes() == struct.pack(">hh1s", 11, 1, b"g")
    assert record.value_bytes() == struct.pack(">hi", 0, 7) + b"\x00"
    assert isinstance(offsets_records.decode_key(struct.pack(">hh1s", 9, 1, b"g")), offsets_records.UnknownKey)
