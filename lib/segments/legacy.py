"""Legacy message sets, magic v0 and v1 (read only; topiclake never writes them).

    offset i64 | messageSize i32 | crc u32 | magic i8 | attributes i8 | [timestamp i64, v1 only] |
    keyLength i32 | key | valueLength i32 | value

The CRC is plain CRC-32 (zlib) over magic..end. A compressed message ("wrapper") carries a whole
inner message set as its value. Inner offsets are absolute in v0 and relative (0..n-1) in v1,
where the wrapper's offset is the absolute offset of the last inner message. Kafka's
AbstractLegacyRecordBatch has the rules; KafkaLZ4BlockInputStream the v0 LZ4 quirk.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import Iterator

from .batch import LOG_OVERHEAD, MAGIC_OFFSET, NO_TIMESTAMP, Record, TimestampType
from .compression import Compression, decompress
from .errors import CorruptRecordError

_V0 = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_V0_MIN_SIZE = 4 + 1 + 1 + 4 + 4  # crc..valueLength with null key and value
_V1_MIN_SIZE = _V0_MIN_SIZE + 8
_CODEC_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_MAX_NESTING = 1  # Kafka allows exactly one level of wrapping


@dataclass(frozen=True, slots=True)
class LegacyEntry:
    """One top-level message (possibly a compressed wrapper) of a legacy message set."""

    offset: int
    magic: int
    attributes: int
    crc: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    position: int
    size: int
    inner: tuple[Record, ...] = field(default=(), repr=False)

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & _CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 0:
            return TimestampType.CREATE_TIME
        return TimestampType(1 if self.attributes & _TIMESTAMP_TYPE_BIT else 0)

    def records(self) -> tuple[Record, ...]:
        if self.compression is Compression.NONE:
            return (Record(self.offset, self.timestamp, self.key, self.value),)
        return self.inner

    @property
    def base_offset(self) -> int:
        return self.records()[0].offset if self.records() else self.offset

    @property
    def last_offset(self) -> int:
        return self.offset


def _parse_message(view, pos: int, end: int, source: str | None) -> tuple[int, int, int, int, int, bytes | None,
                                                                           bytes | None, int]:
    """Returns (offset, magic, attributes, crc, timestamp, key, value, next position)."""
    if end - pos < LOG_OVERHEAD:
        raise CorruptRecordError(f"truncated legacy message: {end - pos} trailing bytes", source=source, position=pos)
    offset, size = _I64.unpack_from(view, pos)[0], _I32.unpack_from(view, pos + 8)[0]
    if size < _V0_MIN_SIZE:
        raise CorruptRecordError(f"impossible legacy message size {size}", source=source, position=pos)
    msg_end = pos + LOG_OVERHEAD + size
    if msg_end > end:
        raise CorruptRecordError(f"truncated legacy message: needs {size + LOG_OVERHEAD} bytes, {end - pos} left",
                                 source=source, position=pos)
    _, _, crc, magic, attributes = _V0.unpack_from(view, pos)
    if magic not in (0, 1):
        raise CorruptRecordError(f"unsupported magic {magic} in a legacy message set", source=source, position=pos)
    if magic == 1 and size < _V1_MIN_SIZE:
        raise CorruptRecordError(f"impossible v1 message size {size}", source=source, position=pos)
    computed = zlib.crc32(view[pos + MAGIC_OFFSET : msg_end])
    if computed != crc:
        raise CorruptRecordError(f"CRC-32 mismatch in v{magic} message at offset {offset}: "
                                 f"stored {crc:#010x}, computed {computed:#010x}", source=source, position=pos)
    cursor = pos + MAGIC_OFFSET + 2
    timestamp = NO_TIMESTAMP  # v0 messages have none
    if magic == 1:
        timestamp = _I64.unpack_from(view, cursor)[0]
        cursor += 8
    key, cursor = _read_i32_bytes(view, cursor, msg_end, source, pos)
    value, cursor = _read_i32_bytes(view, cursor, msg_end, source, pos)
    if cursor != msg_end:
        raise CorruptRecordError(f"legacy message size {size} does not match its fields", source=source, position=pos)
    return offset, magic, attributes, crc, timestamp, key, value, msg_end


def _read_i32_bytes(view, pos: int, limit: int, source, msg_pos) -> tuple[bytes | None, int]:
    if pos + 4 > limit:
        raise CorruptRecordError("legacy message field runs past its end", source=source, position=msg_pos)
    (size,) = _I32.unpack_from(view, pos)
    pos += 4
    if size < 0:
        return None, pos
    if pos + size > limit:
        raise CorruptRecordError(f"legacy field of {size} bytes runs past the message end", source=source,
                                 position=msg_pos)
    return bytes(view[pos : pos + size]), pos + size


def iter_entries(buf, *, start: int = 0, end: int | None = None, source: str | None = None,
                 allow_partial_tail: bool = False) -> Iterator[LegacyEntry]:
    """Walk the top-level messages of a v0/v1 message set, inflating compressed wrappers."""
    view = memoryview(buf)
    end = len(view) if end is None else end
    pos = start
    while pos < end:
        if allow_partial_tail and (end - pos < LOG_OVERHEAD
                                   or pos + LOG_OVERHEAD + _I32.unpack_from(view, pos + 8)[0] > end):
            return
        offset, magic, attributes, crc, timestamp, key, value, next_pos = _parse_message(view, pos, end, source)
        codec = attributes & _CODEC_MASK
        inner: tuple[Record, ...] = ()
        if codec != Compression.NONE:
            inner = _inflate_wrapper(offset, magic, attributes, timestamp, value, source, pos)
        yield LegacyEntry(offset, magic, attributes, crc, timestamp, key, value, pos, next_pos - pos, inner)
        pos = next_pos


def _inflate_wrapper(offset: int, magic: int, attributes: int, timestamp: int, value: bytes | None,
                     source: str | None, pos: int) -> tuple[Record, ...]:
    codec = attributes & _CODEC_MASK
    if codec > Compression.LZ4:
        raise CorruptRecordError(f"unknown compression codec {codec} for magic {magic}", source=source, position=pos)
    if value is None:
        raise CorruptRecordError("compressed legacy message without a value", source=source, position=pos)
    try:
        data = decompress(codec, value, legacy_lz4=(magic == 0))
    except CorruptRecordError as exc:
        raise exc.at(source=source, position=pos) from None
    inner = []
    view = memoryview(data)
    cursor = 0
    while cursor < len(view):
        try:
            i_offset, i_magic, i_attr, _crc, i_ts, i_key, i_value, cursor = _parse_message(view, cursor, len(view),
                                                                                             None)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"inside compressed message: {exc.reason}", source=source, position=pos) from None
        if i_attr & _CODEC_MASK:
            raise CorruptRecordError("nested compressed message", source=source, position=pos)
        if i_magic != magic:
            raise CorruptRecordError(f"inner magic {i_magic} differs from wrapper magic {magic}",
                                     source=source, position=pos)
        if magic == 1 and attributes & _TIMESTAMP_TYPE_BIT:
            i_ts = timestamp
        inner.append((i_offset, i_ts, i_key, i_value))
    if not inner:
        return ()
    if magic == 1:  # relative inner offsets; the wrapper holds the last absolute offset
        last_relative = inner[-1][0]
        return tuple(Record(offset - last_relative + o, ts, k, v) for o, ts, k, v in inner)
    return tuple(Record(o, ts, k, v) for o, ts, k, v in inner)
