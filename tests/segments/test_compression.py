"""Codecs: both directions, and the forms other writers use."""

from __future__ import annotations

import gzip
import struct
import tracemalloc
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard

from topiclake.segments import arrow, compression
from topiclake.segments.batch import Record, build_batch, iter_batches
from topiclake.segments.compression import Compression, _xxh32, compress, decompress
from topiclake.segments.errors import CorruptRecordError
from topiclake.segments.legacy import iter_entries

PAYLOAD = b"".join(struct.pack(">i", i) + b"kafka" * (i % 7) for i in range(20_000))


@pytest.mark.parametrize("codec", list(Compression))
def test_round_trip(codec):
    assert decompress(codec, compress(codec, PAYLOAD)) == PAYLOAD


def test_snappy_reads_raw_blocks_and_java_framing():
    framed = compress(Compression.SNAPPY, PAYLOAD)
    assert framed.startswith(b"\x82SNAPPY\x00")  # what the Java producer writes
    raw = bytes(cramjam.snappy.compress_raw(PAYLOAD))  # what librdkafka and sarama write
    assert decompress(Compression.SNAPPY, raw) == PAYLOAD == decompress(Compression.SNAPPY, framed)


def test_gzip_matches_the_standard_format():
    assert gzip.decompress(compress(Compression.GZIP, PAYLOAD)) == PAYLOAD
    assert decompress(Compression.GZIP, gzip.compress(PAYLOAD)) == PAYLOAD


def test_zstd_streamed_frames_without_content_size_and_several_frames():
    stream = zstandard.ZstdCompressor().compressobj()
    streamed = stream.compress(PAYLOAD) + stream.flush()
    assert decompress(Compression.ZSTD, streamed) == PAYLOAD
    two = compress(Compression.ZSTD, b"first") + compress(Compression.ZSTD, b"second")
    assert decompress(Compression.ZSTD, two) == b"firstsecond"


def test_lz4_frame_is_kafkas_independent_64k_blocks():
    frame = compress(Compression.LZ4, PAYLOAD)
    assert frame[:4] == b"\x04\x22\x4d\x18"
    flags, block_descriptor = frame[4], frame[5]
    assert flags & 0x20  # block independence
    assert block_descriptor == 0x40  # 64 KiB max block size
    assert decompress(Compression.LZ4, frame) == PAYLOAD


def test_xxh32_known_values():
    assert _xxh32(b"") == 0x02CC5D05
    assert _xxh32(b"a") == 0x550D7456
    assert _xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


@pytest.mark.parametrize("codec", [c for c in Compression if c is not Compression.NONE])
def test_garbage_is_a_corrupt_record(codec):
    with pytest.raises(CorruptRecordError, match="cannot decompress"):
        decompress(codec, b"\x00\x01 definitely not compressed data \xff" * 3)
    with pytest.raises(CorruptRecordError):
        decompress(codec, compress(codec, PAYLOAD)[:-5] if codec is not Compression.SNAPPY else b"\x82SNAPPY\x00"
                   + struct.pack(">ii", 1, 1) + struct.pack(">i", 999) + b"x")


def test_unknown_codec():
    with pytest.raises(CorruptRecordError, match="unknown compression codec 5"):
        decompress(5, b"abc")


# ---------------------------------------------------------------------------------------------
# Compression bombs: every codec stops at `max_bytes` while inflating

LIMIT = 1 << 20
BOMB = bytes(4 << 20)  # 4 MiB of zeros: a few KiB compressed in every codec


def _zstd_streamed(data: bytes) -> bytes:
    stream = zstandard.ZstdCompressor().compressobj()
    return stream.compress(data) + stream.flush()


# Each codec in the forms other writers use; zstd's without a content size and multi-frame forms
# take another path than the sized single frame, as do lz4 frames with and without a stored size.
ENCODINGS = {
    "gzip": (Compression.GZIP, lambda p: compress(Compression.GZIP, p)),
    "snappy-xerial": (Compression.SNAPPY, lambda p: compress(Compression.SNAPPY, p)),
    "snappy-raw": (Compression.SNAPPY, lambda p: bytes(cramjam.snappy.compress_raw(p))),
    "lz4": (Compression.LZ4, lambda p: compress(Compression.LZ4, p)),
    "lz4-sized-linked": (Compression.LZ4, lambda p: lz4.frame.compress(p, store_size=True, block_linked=True)),
    "zstd": (Compression.ZSTD, lambda p: compress(Compression.ZSTD, p)),
    "zstd-streamed": (Compression.ZSTD, _zstd_streamed),
    "zstd-frames": (Compression.ZSTD, lambda p: _zstd_streamed(p[:1000]) + _zstd_streamed(p[1000:])),
}


def _too_big(codec: Compression, limit: int):
    return pytest.raises(CorruptRecordError, match=rf"\b{codec.label} data inflates past the {limit}-byte limit")


@pytest.mark.parametrize("form", list(ENCODINGS))
def test_bomb_is_refused_and_decodes_under_a_larger_limit(form):
    codec, encode = ENCODINGS[form]
    bomb = encode(BOMB)
    assert len(bomb) < 300_000
    with _too_big(codec, LIMIT):
        decompress(codec, bomb, max_bytes=LIMIT)
    with _too_big(codec, len(BOMB) - 1):  # one byte over is over
        decompress(codec, bomb, max_bytes=len(BOMB) - 1)
    assert decompress(codec, bomb, max_bytes=len(BOMB)) == BOMB  # the limit itself is allowed
    assert decompress(codec, memoryview(bomb), max_bytes=8 * len(BOMB)) == BOMB
    assert decompress(codec, bomb) == BOMB  # the default limit (1 GiB)


@pytest.mark.parametrize("form", list(ENCODINGS))
def test_round_trips_in_every_form_under_a_tight_limit(form):
    codec, encode = ENCODINGS[form]
    for payload in (PAYLOAD, b"", b"x"):
        assert decompress(codec, encode(payload), max_bytes=len(payload)) == payload


@pytest.mark.parametrize("form", ["gzip", "snappy-xerial", "lz4", "zstd-streamed"])
def test_bomb_is_refused_before_inflating_it(form):
    """No call inflates the whole bomb first: the memory peak stays near the limit, far below 8 MiB."""
    codec, encode = ENCODINGS[form]
    bomb = encode(bytes(8 << 20))
    tracemalloc.start()
    try:
        with _too_big(codec, LIMIT):
            decompress(codec, bomb, max_bytes=LIMIT)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * LIMIT


def test_declared_sizes_are_refused_before_decoding():
    huge = 3 << 30  # a header may claim anything (snappy: up to 4 GiB)
    raw = bytes(cramjam.snappy.compress_raw(b"abc"))
    claims_huge = bytes([0x80 | (huge >> 7 * i) & 0x7F for i in range(4)]) + bytes([huge >> 28]) + raw[1:]
    with _too_big(Compression.SNAPPY, LIMIT):
        decompress(Compression.SNAPPY, claims_huge, max_bytes=LIMIT)
    sized = lz4.frame.compress(b"abc" * 1000, store_size=True)
    with pytest.raises(CorruptRecordError, match=r"lz4 data inflates past the 2999-byte limit \(it declares 3000"):
        decompress(Compression.LZ4, sized, max_bytes=2999)
    with pytest.raises(CorruptRecordError, match=r"zstd data inflates past the 2999-byte limit \(it declares 3000"):
        decompress(Compression.ZSTD, compress(Compression.ZSTD, b"abc" * 1000), max_bytes=2999)


def test_zstd_frames_share_one_budget_and_skippable_frames_are_skipped():
    skippable = b"\x50\x2a\x4d\x18" + struct.pack("<I", 3) + b"abc"
    frames = compress(Compression.ZSTD, b"a" * 600) + skippable + _zstd_streamed(b"b" * 600)
    assert decompress(Compression.ZSTD, frames, max_bytes=1200) == b"a" * 600 + b"b" * 600
    with _too_big(Compression.ZSTD, 1199):
        decompress(Compression.ZSTD, frames, max_bytes=1199)
    with pytest.raises(CorruptRecordError, match="truncated zstd frame"):
        decompress(Compression.ZSTD, frames[:-1])
    with pytest.raises(CorruptRecordError, match="cannot decompress zstd data"):
        decompress(Compression.ZSTD, frames + b"junk")
    # An empty frame then more: the later frames are read, not dropped (nor trailing junk ignored).
    empty_first = compress(Compression.ZSTD, b"") + _zstd_streamed(b"after")
    assert decompress(Compression.ZSTD, empty_first) == b"after"
    with pytest.raises(CorruptRecordError, match="cannot decompress zstd data"):
        decompress(Compression.ZSTD, compress(Compression.ZSTD, b"") + b"junk")


def test_gzip_reads_every_member_like_javas_gzipinputstream():
    two = gzip.compress(b"one") + gzip.compress(b"two")
    assert decompress(Compression.GZIP, two) == b"onetwo"
    assert decompress(Compression.GZIP, two + b"trailing junk") == b"onetwo"  # not a member: ignored
    with pytest.raises(CorruptRecordError, match="gzip data inflates past the 5-byte limit"):
        decompress(Compression.GZIP, two, max_bytes=5)  # the limit spans the members
    with pytest.raises(CorruptRecordError, match="truncated"):
        decompress(Compression.GZIP, two[:-4])


def test_lz4_keeps_reading_only_the_first_frame():
    lz4_two = compress(Compression.LZ4, b"one") + compress(Compression.LZ4, b"two")
    assert decompress(Compression.LZ4, lz4_two, max_bytes=3) == b"one"


def test_negative_limit_is_a_caller_error():
    with pytest.raises(ValueError):
        decompress(Compression.GZIP, compress(Compression.GZIP, b"x"), max_bytes=-1)


# The public decoding paths (RecordBatch.records, decode_to_arrow, legacy wrappers) all inflate
# through decompress() with its default limit, the module constant, shrunk here to 1 MiB.

def _legacy_gzip_wrapper(value: bytes) -> bytes:
    """A magic-1 gzip wrapper holding one message whose value is `value`."""
    def message(offset: int, attributes: int, payload: bytes) -> bytes:
        body = struct.pack(">bbq", 1, attributes, 0) + struct.pack(">i", -1) + struct.pack(">i", len(payload)) + payload
        return struct.pack(">qi", offset, 4 + len(body)) + struct.pack(">I", zlib.crc32(body)) + body
    return message(0, int(Compression.GZIP), compress(Compression.GZIP, message(0, 0, value)))


@pytest.mark.parametrize("codec", [c for c in Compression if c is not Compression.NONE])
def test_batch_decoding_refuses_a_bomb_batch(codec, monkeypatch):
    batch = build_batch([Record(0, 1_000, b"k", BOMB)], compression=codec)
    assert len(batch) < 300_000
    assert arrow.decode_to_arrow(batch)["value"][0].as_py() == BOMB  # under the default limit it decodes

    monkeypatch.setattr(compression, "_MAX_INFLATED_BYTES", LIMIT)
    (parsed,) = iter_batches(batch, source="bomb.log")
    with _too_big(codec, LIMIT) as caught:
        parsed.records()
    assert (caught.value.source, caught.value.position) == ("bomb.log", 0)
    with _too_big(codec, LIMIT):
        arrow.decode_to_arrow_reference(batch)
    if arrow.HAS_NATIVE:
        with _too_big(codec, LIMIT):
            arrow.decode_to_arrow_native(batch)


def test_legacy_wrapper_decoding_refuses_a_bomb(monkeypatch):
    wrapper = _legacy_gzip_wrapper(BOMB)
    assert arrow.decode_to_arrow(wrapper)["value"][0].as_py() == BOMB
    monkeypatch.setattr(compression, "_MAX_INFLATED_BYTES", LIMIT)
    with _too_big(Compression.GZIP, LIMIT):
        list(iter_entries(wrapper))
    with _too_big(Compression.GZIP, LIMIT):
        arrow.decode_to_arrow(wrapper)
