"""The codecs of Kafka's record batches, both directions, byte-compatible with the Java client.

- gzip: RFC 1952 (what java.util.zip.GZIPOutputStream writes).
- snappy: written in the xerial/snappy-java framed form that the Java producer writes; read both
  that form and raw snappy blocks (what librdkafka and sarama write).
- lz4: the standard LZ4 frame with independent 64 KiB blocks (KafkaLZ4BlockOutputStream). Magic v0
  messages carried a wrong header checksum; that is repaired before decoding.
- zstd: standard zstd frames, content size known or not, one or several frames.

Decoding is bounded: every codec stops once its output would pass `max_bytes` (1 GiB unless
told) and raises CorruptRecordError, so a compression bomb never inflates in memory.
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
# decompress() reads it at each call, when it is not given max_bytes.
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


def decompress(codec: int, data, *, legacy_lz4: bool = False, max_bytes: int | None = None) -> bytes:
    """Inflate a batch's records section. Any codec failure becomes CorruptRecordError.

    Every codec stops as soon as its output would pass `max_bytes` (default `_MAX_INFLATED_BYTES`,
    read at call time) and refuses the data, so a compression bomb costs at most about `max_bytes`
    of memory, never what it claims to inflate to. Uncompressed data is returned as is.
    """
    if max_bytes is None:
        max_bytes = _MAX_INFLATED_BYTES
    elif max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0, not {max_bytes}")
    try:
        if codec == Compression.NONE:
            return bytes(data)
        if codec == Compression.GZIP:
            return _gzip_decompress(data, max_bytes)
        if codec == Compression.SNAPPY:
            return _snappy_decompress(data, max_bytes)
        if codec == Compression.LZ4:
            if legacy_lz4:
                data = _fix_legacy_lz4_header(bytes(data))
            return _lz4_decompress(data, max_bytes)
        if codec == Compression.ZSTD:
            return _zstd_decompress(data, max_bytes)
    except CorruptRecordError:
        raise
    except Exception as exc:  # noqa: BLE001 - every codec library has its own exception types
        raise CorruptRecordError(f"cannot decompress {_codec_label(codec)} data: {exc}") from None
    raise CorruptRecordError(f"unknown compression codec {codec}")


def decompress_into(codec: int, data, out: memoryview) -> int | None:
    """Inflate a v2 batch's lz4 or zstd records section into `out` (a reused buffer: no new bytes
    object, no fresh pages); the number of bytes written, or None wherever `decompress` must judge:
    another codec, a payload that is not exactly one frame, a frame whose output may not fit in
    `out`, or any codec error (`decompress` then gives its own verdict, word for word)."""
    view = memoryview(data)
    limit = min(len(out), _MAX_INFLATED_BYTES)  # past the limit, decompress() refuses the data
    try:
        if codec == Compression.LZ4:
            end, bound = _lz4_frame(view)
        elif codec == Compression.ZSTD:
            end, bound, _ = _zstd_frame(view, 0, limit, limit)
        else:
            return None
        if end != len(view) or not 0 <= bound < limit:
            return None
        if codec == Compression.LZ4:
            return cramjam.lz4.decompress_into(view, out[:max(bound, 1)])
        return _zstd_read_into(view, out[:bound + 1])  # + 1: the frame ends before the buffer does
    except Exception:  # noqa: BLE001 - malformed frames and every codec error: decompress() reports them
        return None


def _zstd_read_into(frame: memoryview, out: memoryview) -> int | None:
    """One zstd frame inflated into `out` with the module's decompression context (faster here than
    a new context per call, as cramjam makes); None if it filled `out` (more than its bound)."""
    written = 0
    with _ZSTD_DECOMPRESSOR.stream_reader(frame) as reader:
        while size := reader.readinto(out[written:]):
            written += size
    return written if written < len(out) else None


def _codec_label(codec: int) -> str:
    try:
        return Compression(codec).label
    except ValueError:
        return f"codec {codec}"


def _too_big(label: str, max_bytes: int, declared: int | None = None) -> CorruptRecordError:
    detail = f" (it declares {declared} bytes)" if declared is not None else ""
    return CorruptRecordError(f"{label} data inflates past the {max_bytes}-byte limit{detail}")


_GZIP_MAGIC = b"\x1f\x8b"


def _gzip_decompress(data, max_bytes: int) -> bytes:
    """Every gzip member, one after the other, as Java's GZIPInputStream (what Kafka reads
    with) does; bytes after a member that do not start another one are ignored, as there."""
    parts = []
    produced = 0
    rest = data
    while True:
        # wbits=47: a gzip or zlib header, detected. One call per member: the output grows in
        # blocks as it is written, never pre-allocated to max_length.
        inflater = zlib.decompressobj(wbits=47)
        out = inflater.decompress(rest, max_bytes - produced + 1)
        produced += len(out)
        if produced > max_bytes:
            raise _too_big("gzip", max_bytes)
        if not inflater.eof:  # the output had room, so the input ran out first
            raise CorruptRecordError("cannot decompress gzip data: incomplete or truncated stream")
        parts.append(out)
        rest = inflater.unused_data
        if not rest.startswith(_GZIP_MAGIC):
            return parts[0] if len(parts) == 1 else b"".join(parts)


def _xerial_snappy_compress(data: bytes) -> bytes:
    out = [_XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1)]
    view = memoryview(data)
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        out.append(struct.pack(">i", len(block)))
        out.append(block)
    return b"".join(out)


def _snappy_decompress(data, max_bytes: int) -> bytes:
    # A raw snappy block starts with its uncompressed length (a varint) and the decoder refuses a
    # block whose output differs from it, so that length bounds the output exactly.
    data = memoryview(data)
    if bytes(data[:8]) != _XERIAL_MAGIC:
        declared = cramjam.snappy.decompress_raw_len(data)
        if declared > max_bytes:
            raise _too_big("snappy", max_bytes, declared)
        return bytes(cramjam.snappy.decompress_raw(data))
    pos = _XERIAL_HEADER.size
    parts = []
    total = 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("truncated xerial snappy block header")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CorruptRecordError(f"xerial snappy block of {size} bytes runs past the end")
        block = data[pos : pos + size]
        total += cramjam.snappy.decompress_raw_len(block)
        if total > max_bytes:
            raise _too_big("snappy", max_bytes)
        parts.append(bytes(cramjam.snappy.decompress_raw(block)))
        pos += size
    return b"".join(parts)


_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_FIRST_CHUNK = 256 * 1024  # output asked of the first decoder call when the frame has no size


def _lz4_decompress(data, max_bytes: int) -> bytes:
    # python-lz4 allocates `max_length` up front for each call, so the output is asked for in
    # chunks growing geometrically (a handful of calls even for a bomb), each capped by what is
    # left of the budget. As with lz4.frame.decompress (used before), only the first frame counts
    # and bytes after it are ignored.
    chunk = max(_LZ4_FIRST_CHUNK, 4 * len(data))
    if len(data) >= 14 and data[4] & 0x08 and data[:4] == _LZ4_MAGIC:  # FLG.ContentSize: 8 bytes after BD
        declared = int.from_bytes(data[6:14], "little")
        if declared > max_bytes:
            raise _too_big("lz4", max_bytes, declared)
        # One call for an honest frame (+ 1: to see it end); the cap only spares a big allocation
        # for a small frame that lies (LZ4 inflates at most ~255 times).
        chunk = min(declared, 256 * len(data) + 65536) + 1
    context = lz4.frame.create_decompression_context()
    out, read, done = lz4.frame.decompress_chunk(context, data, max_length=min(chunk, max_bytes + 1))
    if done and len(out) <= max_bytes:
        return out  # the usual case: one call
    view = memoryview(data)
    parts = [out]
    total = len(out)
    pos = read
    while True:
        if total > max_bytes:
            raise _too_big("lz4", max_bytes)
        if done:
            return b"".join(parts)
        out, read, done = lz4.frame.decompress_chunk(context, view[pos:],
                                                     max_length=min(max(chunk, total), max_bytes - total + 1))
        if not out and not read and not done:
            raise CorruptRecordError("cannot decompress lz4 data: incomplete or truncated frame")
        parts.append(out)
        total += len(out)
        pos += read


_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}  # BD's block maximum size


def _lz4_frame(view: memoryview) -> tuple[int, int]:
    """(end, output bound) of the lz4 frame at the start of `view`, from its frame descriptor and
    block headers, without decoding; ValueError if it is not a whole frame."""
    if len(view) < 7 or bytes(view[:4]) != _LZ4_MAGIC:
        raise ValueError("not an lz4 frame")
    flags, block_max = view[4], _LZ4_BLOCK_MAX[view[5] >> 4 & 0x07]
    pos = 7 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)  # + content size, dictionary id
    block_checksum = 4 if flags & 0x10 else 0
    bound = 0
    while True:
        (size,) = _U32.unpack_from(view, pos)  # struct.error past the end
        pos += 4
        if size == 0:  # the end mark
            break
        pos += (size & 0x7FFFFFFF) + block_checksum
        bound += block_max
    pos += 4 if flags & 0x04 else 0  # content checksum
    if pos > len(view):
        raise ValueError("truncated lz4 frame")
    return pos, bound


_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE_MASK, _ZSTD_SKIPPABLE_MAGIC = 0xFFFFFFF0, 0x184D2A50
_ZSTD_BLOCK_MAX = 128 * 1024  # the format's Block_Maximum_Size cap: the most one block regenerates
_ZSTD_STREAM_CHUNK = 1 << 20  # output per step when a frame must be streamed against the budget
_U32 = struct.Struct("<I")
_U24 = struct.Struct("<HB")


class _MalformedZstd(Exception):
    pass


def _zstd_decompress(data, max_bytes: int) -> bytes:
    try:
        declared = zstandard.frame_content_size(data)
    except zstandard.ZstdError:
        declared = -1  # not a frame header: the frame walk below reports it
    if declared > max_bytes:
        raise _too_big("zstd", max_bytes, declared)
    if declared > 0:  # (python-zstandard returns b"" for a content size of 0 without looking further)
        try:
            # Fast path: one frame that records its content size (what this library writes): the
            # decoder allocates that size and fails rather than write past it.
            return _ZSTD_DECOMPRESSOR.decompress(data, allow_extra_data=False)
        except zstandard.ZstdError:
            pass
    # Frames without a content size (streaming writers), several frames, or corrupt data: find
    # each frame's end and a bound on its output from its block headers, then inflate it into a
    # buffer of that bound.
    view = memoryview(data)
    parts = []
    total = 0
    pos = 0
    while pos < len(view):
        left = max_bytes - total
        end, bound, _ = _zstd_frame(view, pos, left, max_bytes)
        frame = view[pos:end]
        pos = end
        if bound < 0:  # skippable frame
            continue
        if bound <= left:  # the decoder fails rather than write past the bound
            out = _ZSTD_DECOMPRESSOR.decompress(frame, max_output_size=max(bound, 1))
        else:  # a frame whose compressed blocks may or may not fit: inflate it step by step
            pieces = []
            size = 0
            stream = zstandard.ZstdDecompressor()  # its own: a generator holds its context between steps
            for piece in stream.read_to_iter(frame, write_size=min(_ZSTD_STREAM_CHUNK, left + 1)):
                size += len(piece)
                if size > left:
                    raise _too_big("zstd", max_bytes)
                pieces.append(piece)
            out = b"".join(pieces)
        parts.append(out)
        total += len(out)
    return parts[0] if len(parts) == 1 else b"".join(parts)  # no copy for the usual single frame


def _zstd_frame(view: memoryview, pos: int, left: int, max_bytes: int) -> tuple[int, int, int]:
    """(end, output bound, declared content size or -1) of the frame at `pos`; bound -1: skippable.

    Reads the frame header and the block headers (RFC 8878) without decoding: one step per block
    (up to 128 KiB of output each). Refuses a frame whose declared size, or whose raw and RLE
    blocks alone, take more than `left` bytes; CorruptRecordError if the frame is cut short.
    """
    n = len(view)
    if pos + 4 > n:
        raise CorruptRecordError("truncated zstd frame")
    (magic,) = _U32.unpack_from(view, pos)
    if magic & _ZSTD_SKIPPABLE_MASK == _ZSTD_SKIPPABLE_MAGIC:  # 4-byte length, then that many bytes
        if pos + 8 > n or pos + 8 + _U32.unpack_from(view, pos + 4)[0] > n:
            raise CorruptRecordError("truncated zstd frame")
        return pos + 8 + _U32.unpack_from(view, pos + 4)[0], -1, -1
    if magic != _ZSTD_MAGIC:
        raise _MalformedZstd(f"no zstd frame at byte {pos} (magic {magic:#010x})")
    if pos + 5 > n:
        raise CorruptRecordError("truncated zstd frame")
    descriptor = view[pos + 4]
    if descriptor & 0x08:
        raise _MalformedZstd(f"reserved bit set in the zstd frame header at byte {pos}")
    single_segment = descriptor & 0x20
    fcs_size = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
    p = pos + 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 0x03]  # + window, dictionary id
    if p + fcs_size > n:
        raise CorruptRecordError("truncated zstd frame")
    declared = -1
    if fcs_size:
        declared = int.from_bytes(view[p : p + fcs_size], "little") + (256 if fcs_size == 2 else 0)
        if declared > left:
            raise _too_big("zstd", max_bytes, declared if left == max_bytes else None)
    p += fcs_size
    bound = exact = 0  # exact: what the raw and RLE blocks regenerate, byte for byte
    unpack = _U24.unpack_from
    try:
        while True:  # one step per block: kept lean, a hostile frame may hold many tiny blocks
            low, high = unpack(view, p)  # struct.error past the end
            kind, size = (low >> 1) & 0x03, (low >> 3) | (high << 13)
            if kind == 2:  # compressed: `size` bytes, regenerating at most a whole block
                p += 3 + size
                bound += _ZSTD_BLOCK_MAX
            elif kind == 1:  # RLE: one byte, repeated `size` times
                p += 4
                exact += size
            elif kind == 0:  # raw
                p += 3 + size
                exact += size
            else:
                raise _MalformedZstd(f"reserved block type in the zstd block header at byte {p}")
            if exact > left:
                raise _too_big("zstd", max_bytes)
            if low & 0x01:  # last block
                break
    except struct.error:
        raise CorruptRecordError("truncated zstd frame") from None
    if descriptor & 0x04:  # content checksum
        p += 4
    if p > n:
        raise CorruptRecordError("truncated zstd frame")
    return p, (declared if declared >= 0 else bound + exact), declared


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
