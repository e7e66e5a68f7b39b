"""Kafka record batch v2: header layout, attributes, CRC-32C, records, building and patching.

Byte layout (Kafka's DefaultRecordBatch), all big-endian, 61 bytes of header:

    baseOffset i64 | length i32 | partitionLeaderEpoch i32 | magic i8 (=2) | crc u32 |
    attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64 |
    producerId i64 | producerEpoch i16 | baseSequence i32 | recordsCount i32 | records...

`length` counts the bytes after itself. The CRC-32C covers attributes..end, so baseOffset and the
leader epoch can be rewritten without recomputing it.

Each record (DefaultRecord):
    length varint | attributes i8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value | headerCount varint |
    [headerKeyLength varint | headerKey utf8 | headerValueLength varint | headerValue]

This module is the reference (pure Python) decoder; `topiclake.segments.arrow` decodes the same
bytes columnar with the native kernel and is tested against this one.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from typing import Iterator, NamedTuple, Sequence

import crc32c

from .compression import Compression, compress, decompress
from .errors import CorruptRecordError
from .varint import decode_varint, encode_varint

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61 == RECORD_BATCH_OVERHEAD
LOG_OVERHEAD = 12  # baseOffset + length: the bytes not counted by `length`
MAGIC_OFFSET = 16  # position of the magic byte in any message format
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # CRC-32C covers [21, end)
MIN_LENGTH_FIELD = HEADER_SIZE - LOG_OVERHEAD  # 49
CURRENT_MAGIC = 2

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20
CONTROL_BIT = _CONTROL_BIT  # public: Produce checks it on the raw attributes
_DELETE_HORIZON_BIT = 0x40

_BASE_OFFSET = struct.Struct(">q")
_PARTITION_LEADER_EPOCH = struct.Struct(">i")
_LENGTH = struct.Struct(">i")
_U32 = struct.Struct(">I")


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def label(self) -> str:
        return "CreateTime" if self is TimestampType.CREATE_TIME else "LogAppendTime"


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record. `headers` is a tuple of (key, value-or-None)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class BatchHeader(NamedTuple):
    """The fixed 61-byte header of a v2 batch (field names follow DefaultRecordBatch). A named
    tuple, not a frozen dataclass: one is made per batch on every path that reads headers, and
    `BatchHeader(*HEADER.unpack_from(...))` costs 0.25 us this way, 1.3 us as a dataclass."""

    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies on disk / on the wire."""
        return self.length + LOG_OVERHEAD

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(1 if self.attributes & _TIMESTAMP_TYPE_BIT else 0)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & _DELETE_HORIZON_BIT)

    @property
    def delete_horizon(self) -> int | None:
        """With bit 6 set, baseTimestamp holds the tombstone delete horizon (KIP-534)."""
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0


def make_attributes(
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    is_transactional: bool = False,
    is_control: bool = False,
    has_delete_horizon: bool = False,
) -> int:
    attributes = int(compression) & COMPRESSION_MASK
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= _TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= _TRANSACTIONAL_BIT
    if is_control:
        attributes |= _CONTROL_BIT
    if has_delete_horizon:
        attributes |= _DELETE_HORIZON_BIT
    return attributes


def compute_crc(batch) -> int:
    """CRC-32C of attributes..end of a whole batch's bytes."""
    return crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:])


def peek_magic(buf, pos: int = 0) -> int:
    return buf[pos + MAGIC_OFFSET]


def read_header(buf, pos: int = 0) -> BatchHeader:
    """Parse the header at `pos`; checks only that 61 bytes are there and the magic is 2."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"truncated batch header: {len(buf) - pos} of {HEADER_SIZE} bytes", position=pos)
    header = BatchHeader(*HEADER.unpack_from(buf, pos))
    if header.magic != CURRENT_MAGIC:
        raise CorruptRecordError(f"batch magic {header.magic} is not 2", position=pos)
    _check_codec(header, None, pos)
    return header


def _check_codec(header: BatchHeader, source: str | None, pos: int) -> None:
    codec = header.attributes & COMPRESSION_MASK
    if codec > Compression.ZSTD:
        raise CorruptRecordError(f"unknown compression codec {codec} in batch at offset {header.base_offset}",
                                 source=source, position=pos)


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """A v2 batch over its exact bytes (`data` holds header and records, nothing more)."""

    header: BatchHeader
    data: bytes | memoryview = field(repr=False)
    position: int | None = None  # where the batch starts in its source, for error messages
    source: str | None = None

    # -- convenience pass-throughs, so call sites read like Kafka's RecordBatch
    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def last_offset(self) -> int:
        return self.header.last_offset

    @property
    def next_offset(self) -> int:
        return self.header.next_offset

    @property
    def size(self) -> int:
        return self.header.size

    @property
    def is_control(self) -> bool:
        return self.header.is_control

    @property
    def is_transactional(self) -> bool:
        return self.header.is_transactional

    @property
    def compression(self) -> Compression:
        return self.header.compression

    def _error(self, reason: str) -> CorruptRecordError:
        return CorruptRecordError(reason, source=self.source, position=self.position)

    def is_valid(self) -> bool:
        return self.header.length >= MIN_LENGTH_FIELD and compute_crc(self.data) == self.header.crc

    def ensure_valid(self) -> None:
        """Kafka's ensureValid(): size and CRC-32C."""
        if self.header.length < MIN_LENGTH_FIELD:
            raise self._error(f"batch length {self.header.length} is below the minimum {MIN_LENGTH_FIELD}")
        computed = compute_crc(self.data)
        if computed != self.header.crc:
            raise self._error(
                f"CRC mismatch in batch at offset {self.header.base_offset}: "
                f"stored {self.header.crc:#010x}, computed {computed:#010x}"
            )

    def records_bytes(self) -> bytes:
        """The records section, decompressed."""
        raw = memoryview(self.data)[HEADER_SIZE:]
        try:
            return decompress(int(self.header.attributes & COMPRESSION_MASK), raw)
        except CorruptRecordError as exc:
            raise exc.at(source=self.source, position=self.position) from None
        except ValueError:
            raise self._error(f"unknown compression codec {self.header.attributes & COMPRESSION_MASK}") from None

    def records(self) -> list[Record]:
        """Decode every record (reference path: Python objects, use arrow.py for bulk work)."""
        h = self.header
        try:
            return _decode_records(self.records_bytes(), h.records_count, h.base_offset, h.base_timestamp,
                                   h.max_timestamp if h.timestamp_type == TimestampType.LOG_APPEND_TIME else None)
        except CorruptRecordError as exc:
            raise exc.at(source=self.source, position=self.position) from None


def _decode_records(buf: bytes, count: int, base_offset: int, base_timestamp: int,
                    log_append_time: int | None) -> list[Record]:
    if count < 0:
        raise CorruptRecordError(f"negative record count {count}")
    records: list[Record] = []
    pos = 0
    end = len(buf)
    for _ in range(count):
        if pos >= end:
            raise CorruptRecordError(f"Incorrect declared batch size: {count} records declared, {len(records)} found")
        length, pos = decode_varint(buf, pos)
        record_end = pos + length
        if length < 0 or record_end > end:
            raise CorruptRecordError(f"record length {length} runs past the end of the batch")
        pos += 1  # record attributes: unused
        ts_delta, pos = decode_varint(buf, pos)
        offset_delta, pos = decode_varint(buf, pos)
        key, pos = _read_bytes(buf, pos, record_end)
        value, pos = _read_bytes(buf, pos, record_end)
        header_count, pos = decode_varint(buf, pos)
        if header_count < 0:
            raise CorruptRecordError(f"negative header count {header_count}")
        headers = []
        for _h in range(header_count):
            hkey, pos = _read_bytes(buf, pos, record_end)
            if hkey is None:
                raise CorruptRecordError("null header key")
            hvalue, pos = _read_bytes(buf, pos, record_end)
            try:
                headers.append((hkey.decode("utf-8"), hvalue))
            except UnicodeDecodeError:
                raise CorruptRecordError("header key is not UTF-8") from None
        if pos != record_end:
            raise CorruptRecordError(f"record declares {length} bytes but its fields take {length + pos - record_end}")
        timestamp = log_append_time if log_append_time is not None else base_timestamp + ts_delta
        records.append(Record(base_offset + offset_delta, timestamp, key, value, tuple(headers)))
    if pos != end:
        raise CorruptRecordError(f"Incorrect declared batch size: {end - pos} bytes left after {count} records")
    return records


def _read_bytes(buf, pos: int, limit: int) -> tuple[bytes | None, int]:
    size, pos = decode_varint(buf, pos)
    if size < 0:
        return None, pos
    if pos + size > limit:
        raise CorruptRecordError(f"field of {size} bytes runs past the end of the record")
    return bytes(buf[pos : pos + size]), pos + size


def iter_batches(buf, *, start: int = 0, end: int | None = None, source: str | None = None,
                 allow_partial_tail: bool = False, validate: bool = True) -> Iterator[RecordBatch]:
    """Walk v2 batches in `buf[start:end]`.

    With allow_partial_tail (reading a file being appended to, Kafka's FileLogInputStream), a
    batch cut off at the end stops the walk silently; otherwise it is CorruptRecordError.
    Legacy magic (0/1) raises CorruptRecordError here: use `legacy.iter_messages` for old data.
    """
    view = memoryview(buf)
    end = len(view) if end is None else end
    pos = start
    while pos < end:
        remaining = end - pos
        if remaining < LOG_OVERHEAD:
            if allow_partial_tail:
                return
            raise CorruptRecordError(f"truncated batch: {remaining} trailing bytes", source=source, position=pos)
        (length,) = _LENGTH.unpack_from(view, pos + 8)
        if length < 14:  # Kafka: a size smaller than the smallest legacy message header
            raise CorruptRecordError(f"impossible batch length {length}", source=source, position=pos)
        size = length + LOG_OVERHEAD
        if size > remaining:
            if allow_partial_tail:
                return
            raise CorruptRecordError(f"truncated batch: needs {size} bytes, {remaining} left",
                                     source=source, position=pos)
        if remaining < HEADER_SIZE or length < MIN_LENGTH_FIELD:
            magic = view[pos + MAGIC_OFFSET] if remaining > MAGIC_OFFSET else None
            if magic == CURRENT_MAGIC or magic is None:
                raise CorruptRecordError(f"batch length {length} is below the v2 minimum {MIN_LENGTH_FIELD}",
                                         source=source, position=pos)
        magic = view[pos + MAGIC_OFFSET]
        if magic != CURRENT_MAGIC:
            raise CorruptRecordError(f"unsupported magic {magic} (expected 2)", source=source, position=pos)
        header = BatchHeader(*HEADER.unpack_from(view, pos))
        _check_codec(header, source, pos)
        batch = RecordBatch(header, view[pos : pos + size], pos, source)
        if validate:
            batch.ensure_valid()
        yield batch
        pos += size


# ---------------------------------------------------------------------------------------------
# Writing

def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
                  headers: Sequence[tuple[str, bytes | None]] = ()) -> bytes:
    body = bytearray(b"\x00")  # record attributes (unused)
    body += encode_varint(timestamp_delta)
    body += encode_varint(offset_delta)
    _append_bytes(body, key)
    _append_bytes(body, value)
    body += encode_varint(len(headers))
    for hkey, hvalue in headers:
        _append_bytes(body, hkey.encode("utf-8"))
        _append_bytes(body, hvalue)
    return encode_varint(len(body)) + bytes(body)


def _append_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += encode_varint(-1)
    else:
        out += encode_varint(len(data))
        out += data


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int | None = None,
    compression: Compression | str | int = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    delete_horizon: int | None = None,
    last_offset_delta: int | None = None,
    max_timestamp: int | None = None,
) -> bytes:
    """Encode a v2 batch. Records keep their own offsets (offset deltas may have gaps, as after
    compaction); base_offset defaults to the first record's offset. `last_offset_delta` overrides
    the span (Kafka's overrideLastOffset, used to keep a cleaned batch's original last offset).
    With a delete horizon, baseTimestamp carries the horizon and timestamp deltas are relative to it.
    An empty batch (no records) gets baseTimestamp -1 unless a horizon is set, like writeEmptyHeader.
    """
    compression = Compression.parse(compression)
    if base_offset is None:
        if not records:
            raise ValueError("an empty batch needs an explicit base_offset")
        base_offset = records[0].offset
    timestamps = [r.timestamp for r in records]
    if delete_horizon is not None:
        base_timestamp = delete_horizon
    elif records:
        base_timestamp = timestamps[0]
    else:
        base_timestamp = NO_TIMESTAMP
    if max_timestamp is None:
        max_timestamp = max(timestamps) if records else NO_TIMESTAMP
    if last_offset_delta is None:
        last_offset_delta = (records[-1].offset - base_offset) if records else 0
    body = b"".join(
        encode_record(r.offset - base_offset, r.timestamp - base_timestamp, r.key, r.value, r.headers)
        for r in records
    )
    return build_batch_from_section(
        body, len(records), base_offset=base_offset, compression=compression, timestamp_type=timestamp_type,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        is_transactional=is_transactional, is_control=is_control, partition_leader_epoch=partition_leader_epoch,
        has_delete_horizon=delete_horizon is not None, last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp, max_timestamp=max_timestamp)


def build_batch_from_section(records_section: bytes, records_count: int, *, base_offset: int,
                             compression: Compression | str | int, timestamp_type: TimestampType, producer_id: int,
                             producer_epoch: int, base_sequence: int, is_transactional: bool, is_control: bool,
                             partition_leader_epoch: int, has_delete_horizon: bool, last_offset_delta: int,
                             base_timestamp: int, max_timestamp: int) -> bytes:
    """The second half of `build_batch`, for records already encoded as `encode_record` does
    (uncompressed, deltas against base_offset / base_timestamp): the log cleaner encodes its kept
    records natively and finishes the batch here, so both paths write the same bytes."""
    compression = Compression.parse(compression)
    if records_count:
        records_section = compress(compression, records_section)
    else:
        compression = Compression.NONE  # writeEmptyHeader: an empty batch is never compressed
    attributes = make_attributes(compression, timestamp_type, is_transactional, is_control, has_delete_horizon)
    return assemble_batch(
        base_offset=base_offset, partition_leader_epoch=partition_leader_epoch, attributes=attributes,
        last_offset_delta=last_offset_delta, base_timestamp=base_timestamp, max_timestamp=max_timestamp,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        records_count=records_count, records_section=records_section,
    )


def assemble_batch(*, base_offset: int, partition_leader_epoch: int, attributes: int, last_offset_delta: int,
                   base_timestamp: int, max_timestamp: int, producer_id: int, producer_epoch: int,
                   base_sequence: int, records_count: int, records_section: bytes) -> bytes:
    """Header + already encoded (and compressed) records section, with the CRC computed."""
    length = HEADER_SIZE - LOG_OVERHEAD + len(records_section)
    out = bytearray(HEADER.pack(base_offset, length, partition_leader_epoch, CURRENT_MAGIC, 0, attributes,
                                last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,
                                base_sequence, records_count))
    out += records_section
    _U32.pack_into(out, CRC_OFFSET, compute_crc(out))
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# In-place patching (the broker's append path: no re-encoding of records)

def set_base_offset(batch: bytearray, pos: int, base_offset: int) -> None:
    """Outside the CRC: no recomputation needed."""
    _BASE_OFFSET.pack_into(batch, pos, base_offset)


def set_partition_leader_epoch(batch: bytearray, pos: int, epoch: int) -> None:
    _PARTITION_LEADER_EPOCH.pack_into(batch, pos + 12, epoch)


def set_log_append_time(batch: bytearray, pos: int, timestamp: int) -> None:
    """Mark the batch LogAppendTime with maxTimestamp = broker time, recomputing the CRC
    (what Kafka's LogValidator does for message.timestamp.type=LogAppendTime)."""
    size = _LENGTH.unpack_from(batch, pos + 8)[0] + LOG_OVERHEAD
    attributes = struct.unpack_from(">h", batch, pos + ATTRIBUTES_OFFSET)[0] | _TIMESTAMP_TYPE_BIT
    struct.pack_into(">h", batch, pos + ATTRIBUTES_OFFSET, attributes)
    struct.pack_into(">q", batch, pos + 35, timestamp)  # maxTimestamp
    _U32.pack_into(batch, pos + CRC_OFFSET, compute_crc(memoryview(batch)[pos : pos + size]))
