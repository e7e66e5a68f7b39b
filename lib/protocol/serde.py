"""Kafka's generated-message primitive types, for the records of `__consumer_offsets` and the
consumer protocol blobs (the same encoding as the wire protocol, big-endian):

    int8/int16/int32/int64 | UUID = 16 bytes (most significant half first) |
    STRING = int16 length + UTF-8 (-1 = null when nullable) |
    BYTES = int32 length + bytes (-1 = null) | ARRAY = int32 count (-1 = null)
    flexible versions: COMPACT_STRING/BYTES/ARRAY = unsigned varint (length + 1, 0 = null),
    and each struct ends with tagged fields: uvarint count, then (uvarint tag, uvarint size,
    bytes) per field; unknown tags are skipped, as Kafka's readers do.

Every malformed input raises CorruptRecordError with the position and the reason.
"""

from __future__ import annotations

import struct
import uuid

from topiclake.segments.errors import CorruptRecordError
from topiclake.segments.varint import encode_unsigned_varint

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class Reader:
    def __init__(self, buf: bytes, what: str):
        self.buf = memoryview(buf)
        self.pos = 0
        self.what = what  # names the structure in error messages

    def fail(self, reason: str) -> CorruptRecordError:
        return CorruptRecordError(f"{self.what}: {reason}", position=self.pos)

    def _take(self, n: int, field: str) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise self.fail(f"{field} needs {n} bytes, {len(self.buf) - self.pos} left")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def _fixed(self, s: struct.Struct, field: str) -> int:
        return s.unpack(self._take(s.size, field))[0]

    def int8(self, field: str) -> int:
        return self._fixed(_I8, field)

    def int16(self, field: str) -> int:
        return self._fixed(_I16, field)

    def int32(self, field: str) -> int:
        return self._fixed(_I32, field)

    def int64(self, field: str) -> int:
        return self._fixed(_I64, field)

    def uuid(self, field: str) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self._take(16, field)))

    def uvarint(self, field: str) -> int:
        result = shift = 0
        for _ in range(5):
            b = self._take(1, field)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
        raise self.fail(f"{field}: unsigned varint longer than 5 bytes")

    def _length(self, flexible: bool, classic: struct.Struct, field: str) -> int:
        """Length of a string/bytes/array; -1 means null."""
        return self.uvarint(field) - 1 if flexible else self._fixed(classic, field)

    def string(self, field: str, *, flexible: bool = False, nullable: bool = False) -> str | None:
        n = self._length(flexible, _I16, field)
        if n < 0:
            if nullable and n == -1:
                return None
            raise self.fail(f"{field}: null or negative length {n} for a non-nullable string")
        raw = self._take(n, field)
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"{field}: invalid UTF-8 ({exc.reason})") from None

    def bytes_(self, field: str, *, flexible: bool = False, nullable: bool = False) -> bytes | None:
        n = self._length(flexible, _I32, field)
        if n < 0:
            if nullable and n == -1:
                return None
            raise self.fail(f"{field}: null or negative length {n} for non-nullable bytes")
        return bytes(self._take(n, field))

    def array_len(self, field: str, *, flexible: bool = False) -> int:
        n = self._length(flexible, _I32, field)
        if n < 0:
            raise self.fail(f"{field}: null array")
        # Each element takes at least one byte: refuse absurd counts before allocating.
        if n > len(self.buf) - self.pos:
            raise self.fail(f"{field}: {n} elements cannot fit in {len(self.buf) - self.pos} bytes")
        return n

    def tagged_fields(self, field: str = "tagged fields") -> dict[int, bytes]:
        """The tagged fields section: tag -> raw value (callers skip the tags they do not model)."""
        tags = {}
        for _ in range(self.uvarint(f"{field} count")):
            tag = self.uvarint(f"{field} tag")
            tags[tag] = bytes(self._take(self.uvarint(f"{field} size"), f"{field} value"))
        return tags

    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def end(self) -> None:
        if self.pos != len(self.buf):
            raise self.fail(f"{len(self.buf) - self.pos} unexpected trailing bytes")


class Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def int8(self, v: int) -> "Writer":
        self.out += _I8.pack(v)
        return self

    def int16(self, v: int) -> "Writer":
        self.out += _I16.pack(v)
        return self

    def int32(self, v: int) -> "Writer":
        self.out += _I32.pack(v)
        return self

    def int64(self, v: int) -> "Writer":
        self.out += _I64.pack(v)
        return self

    def uuid(self, v: uuid.UUID) -> "Writer":
        self.out += v.bytes
        return self

    def _length(self, n: int, flexible: bool, classic: struct.Struct) -> None:
        self.out += encode_unsigned_varint(n + 1) if flexible else classic.pack(n)

    def string(self, v: str | None, *, flexible: bool = False) -> "Writer":
        if v is None:
            self._length(-1, flexible, _I16)
        else:
            raw = v.encode("utf-8")
            if len(raw) > 0x7FFF:
                raise ValueError(f"string of {len(raw)} bytes exceeds Kafka's int16 length")
            self._length(len(raw), flexible, _I16)
            self.out += raw
        return self

    def bytes_(self, v: bytes | None, *, flexible: bool = False) -> "Writer":
        if v is None:
            self._length(-1, flexible, _I32)
        else:
            self._length(len(v), flexible, _I32)
            self.out += v
        return self

    def array_len(self, n: int, *, flexible: bool = False) -> "Writer":
        self._length(n, flexible, _I32)
        return self

    def tagged_fields(self, tags: dict[int, bytes] | None = None) -> "Writer":
        """The tagged fields section: `tags` (tag -> raw value) in ascending tag order, or none."""
        tags = tags or {}
        self.out += encode_unsigned_varint(len(tags))
        for tag in sorted(tags):
            self.out += encode_unsigned_varint(tag) + encode_unsigned_varint(len(tags[tag])) + tags[tag]
        return self

    def getvalue(self) -> bytes:
        return bytes(self.out)


# ---------------------------------------------- compound types the record schemas share
TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]  # (topic id, partitions) per topic


def write_topic_partitions(w: Writer, tps: TopicPartitions) -> None:
    """A flexible array of TopicPartitions (topicId UUID | partitions []int32 | tags)."""
    w.array_len(len(tps), flexible=True)
    for topic_id, partitions in tps:
        w.uuid(topic_id).array_len(len(partitions), flexible=True)
        for p in partitions:
            w.int32(p)
        w.tagged_fields()


def read_topic_partitions(r: Reader, field: str) -> TopicPartitions:
    out = []
    for _ in range(r.array_len(field, flexible=True)):
        topic_id = r.uuid("topicId")
        partitions = tuple(r.int32("partition") for _ in range(r.array_len("partitions", flexible=True)))
        r.tagged_fields(f"{field} tagged fields")
        out.append((topic_id, partitions))
    return tuple(out)


def write_strings(w: Writer, strings: tuple[str, ...]) -> None:
    w.array_len(len(strings), flexible=True)
    for s in strings:
        w.string(s, flexible=True)


def read_strings(r: Reader, field: str) -> tuple[str, ...]:
    return tuple(r.string(field, flexible=True) for _ in range(r.array_len(field, flexible=True)))
