"""Zig-zag varints of Kafka's record format (protobuf style, 32- and 64-bit)."""

from __future__ import annotations

from .errors import CorruptRecordError

_MAX_VARLONG_BYTES = 10


def zigzag_encode(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def zigzag_decode(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def encode_varint(value: int) -> bytes:
    """Signed zig-zag varint (Kafka's `ByteUtils.writeVarint` / `writeVarlong`)."""
    v = zigzag_encode(value) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def decode_varint(buf, pos: int) -> tuple[int, int]:
    """Decode a signed zig-zag varint at `pos`; returns (value, next position)."""
    result = 0
    shift = 0
    end = len(buf)
    for _ in range(_MAX_VARLONG_BYTES):
        if pos >= end:
            raise CorruptRecordError("varint runs past the end of the record")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return zigzag_decode(result), pos
        shift += 7
    raise CorruptRecordError("varint longer than 10 bytes")


def encode_unsigned_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
