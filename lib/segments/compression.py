"""The codecs of Kafka's record batches, both directions, byte-compatible with the Java client.

- gzip: RFC 1952 (what java.util.zip.GZIPOutputStream writes).
- snappy: written in the xerial/snappy-java framed form that the Java producer writes; read both
  that form and raw snappy blocks (what librdkafka and sarama write).
- lz4: the standard LZ4 frame with independent 64 KiB blocks (KafkaLZ4BlockOutputStream). Magic v0
  messages carried a wrong header checksum; that is repaired before decoding.
- zstd: standard zstd frames, content size known or not, one or several frames.
"""

from __future__ import annotations

import enum
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from .errors import CorruptRecordError


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, value: "str | int | Compression") -> "Compression":
        if isinstance(value, Compression):
            return value
        if isinstance(value, int):
            return cls(value)
        try:
            return cls[value.upper()]
        except KeyError:
            raise ValueError(f"unknown compression {value!r}: use one of none, gzip, snappy, lz4, zstd") from None


_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")  # magic, version (1), compatible version (1)
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size
# A batch inflating past this is hostile or broken (Kafka's own limit on a batch is ~2 GiB).
_MAX_INFLATED_BYTES = 1 << 30
_ZSTD_COMPRESSOR = zstandard.ZstdCompressor(level=3)
_ZSTD_DECOMPRESSOR = zstandard.ZstdDecompressor()


def compress(codec: Compression, data: bytes) -> bytes:
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        return zlib.compress(data, 6, wbits=31)
    if codec is Compression.SNAPPY:
        return _xerial_snappy_compress(data)
    if codec is Compression.LZ4:
        return lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if codec is Compression.ZSTD:
        return _ZSTD_COMPRESSOR.compress(data)
    raise CorruptRecordError(f"unknown compression codec {int(codec)}")


def decompress(codec: int, data, *, legacy_lz4: bool = False) -> bytes:
    """Inflate a batch's records section. Any codec failure becomes CorruptRecordError."""
    try:
        if codec == Compression.NONE:
            return bytes(data)
        if codec == Compression.GZIP:
            return zlib.decompress(data, wbits=47)
        if codec == Compression.SNAPPY:
            return _snappy_decompress(data)
        if codec == Compression.LZ4:
            if legacy_lz4:
                data = _fix_legacy_lz4_header(bytes(data))
            return lz4.frame.decompress(bytes(data))
        if codec == Compression.ZSTD:
            return _zstd_decompress(data)
    except CorruptRecordError:
        raise
    except Exception as exc:  # every codec library has its own exception types
        raise CorruptRecordError(f"cannot decompress {_codec_label(codec)} data: {exc}") from None
    raise CorruptRecordError(f"unknown compression codec {codec}")


def _codec_label(codec: int) -> str:
    try:
        return Compression(codec).label
    except ValueError:
        return f"codec {codec}"


def _xerial_snappy_compress(data: bytes) -> bytes:
    out = [_XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1)]
    view = memoryview(data)
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        out.append(struct.pack(">i", len(block)))
        out.append(block)
    return b"".join(out)


def _snappy_decompress(data) -> bytes:
    data = memoryview(data)
    if bytes(data[:8]) != _XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(data))
    pos = _XERIAL_HEADER.size
    parts = []
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("truncated xerial snappy block header")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CorruptRecordError(f"xerial snappy block of {size} bytes runs past the end")
        parts.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + size])))
        pos += size
    return b"".join(parts)


def _zstd_decompress(data) -> bytes:
    data = bytes(data)
    try:
        declared = zstandard.frame_content_size(data)
    except zstandard.ZstdError:
        declared = -1  # not a frame header: the decoder below reports it
    if declared > _MAX_INFLATED_BYTES:
        raise CorruptRecordError(f"zstd frame declares {declared} bytes, over the {_MAX_INFLATED_BYTES} limit")
    try:
        # Fast path: one frame that records its content size (what the Java and Python clients write).
        return _ZSTD_DECOMPRESSOR.decompress(data, allow_extra_data=False)
    except zstandard.ZstdError:
        pass
    # Frames without a content size (streaming writers) or several concatenated frames.
    parts = []
    while data:
        obj = _ZSTD_DECOMPRESSOR.decompressobj()
        parts.append(obj.decompress(data))
        if not obj.eof:
            raise CorruptRecordError("truncated zstd frame")
        data = obj.unused_data
    return b"".join(parts)


def _fix_legacy_lz4_header(data: bytes) -> bytes:
    """Kafka < 0.10 hashed the frame descriptor including the magic number (KAFKA-3160)."""
    if len(data) < 7:
        return data
    flags = data[4]
    descriptor_end = 6 + (8 if flags & 0x08 else 0)  # FLG, BD, optional content size
    if len(data) <= descriptor_end:
        return data
    checksum = (_xxh32(data[4:descriptor_end]) >> 8) & 0xFF
    return data[:descriptor_end] + bytes([checksum]) + data[descriptor_end + 1 :]


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32 of a short input (only ever a frame descriptor of a few bytes)."""
    n = len(data)
    pos = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed, (seed - _P1) & _M32]
        while pos + 16 <= n:
            for i in range(4):
                (lane,) = struct.unpack_from("<I", data, pos)
                v[i] = (_rotl((v[i] + lane * _P2) & _M32, 13) * _P1) & _M32
                pos += 4
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        (lane,) = struct.unpack_from("<I", data, pos)
        h = (_rotl((h + lane * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (_rotl((h + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h
