"""Control records (Kafka's ControlRecordType / EndTransactionMarker).

A control batch (attribute bit 5) holds one record whose key is int16 version + int16 type and,
for transaction markers, whose value is int16 version + int32 coordinator epoch.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from .batch import NO_PARTITION_LEADER_EPOCH, Record, TimestampType, build_batch
from .errors import CorruptRecordError

_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")


class ControlRecordType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6
    UNKNOWN = -1


@dataclass(frozen=True, slots=True)
class ControlRecord:
    type: ControlRecordType
    raw_type: int  # the type as stored, kept when it is not one Kafka knows
    coordinator_epoch: int | None = None  # for ABORT/COMMIT


def parse_control_key(key: bytes | None) -> tuple[ControlRecordType, int]:
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError(f"control record key of {0 if key is None else len(key)} bytes (needs 4)")
    _version, raw = _KEY.unpack_from(key)
    try:
        return ControlRecordType(raw), raw
    except ValueError:
        return ControlRecordType.UNKNOWN, raw


def parse_control_record(record: Record) -> ControlRecord:
    kind, raw = parse_control_key(record.key)
    epoch = None
    if kind in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        if record.value is None or len(record.value) < _END_TXN_VALUE.size:
            raise CorruptRecordError("end-transaction marker value shorter than 6 bytes")
        _v, epoch = _END_TXN_VALUE.unpack_from(record.value)
    return ControlRecord(kind, raw, epoch)


def build_end_txn_marker(*, offset: int, timestamp: int, producer_id: int, producer_epoch: int,
                         commit: bool, coordinator_epoch: int = 0,
                         partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """A COMMIT/ABORT control batch, as the transaction coordinator writes it."""
    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    record = Record(offset, timestamp, _KEY.pack(0, kind), _END_TXN_VALUE.pack(0, coordinator_epoch))
    return build_batch([record], producer_id=producer_id, producer_epoch=producer_epoch,
                       is_transactional=True, is_control=True, timestamp_type=TimestampType.CREATE_TIME,
                       partition_leader_epoch=partition_leader_epoch)
