"""Codecs: both directions, and the forms other writers use."""

from __future__ import annotations

import gzip
import struct

import cramjam
import pytest
import zstandard

from topiclake.segments.compression import Compression, _xxh32, compress, decompress
from topiclake.segments.errors import CorruptRecordError

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
