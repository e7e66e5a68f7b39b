"""The decode kernel's fast paths (issue 33): its CRC-32C, the reused buffer lz4 and zstd sections
are inflated into, the order of errors once CRCs are checked in the kernel, and a round trip of
decode_to_arrow against kafka-python, an independent writer and reader."""

from __future__ import annotations

import struct

import crc32c as crc32c_package
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from topiclake.segments import arrow
from topiclake.segments.batch import CRC_OFFSET, HEADER_SIZE, Record, build_batch, iter_batches
from topiclake.segments.compression import Compression, compress, decompress, decompress_into
from topiclake.segments.errors import CorruptRecordError

pytestmark = pytest.mark.skipif(not arrow.HAS_NATIVE, reason="native extension not built")
FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
INFLATING = [Compression.LZ4, Compression.ZSTD]


def kernel():
    from topiclake.segments._native import _decode

    return _decode


# ---------------------------------------------------------------------------------------------
# CRC-32C


@pytest.mark.skipif(not arrow._KERNEL_CRC, reason="no crc32 instruction on this CPU")
@FAST
@given(st.binary(max_size=300) | st.integers(0, 80_000).map(lambda n: bytes(range(256)) * (n // 256) + b"x" * (n % 7)))
def test_kernel_crc32c_is_the_crc32c_packages(data):
    """Three interleaved lanes of 8 KiB, then of 256 bytes, then single bytes: every length."""
    assert kernel().crc32c(data) == crc32c_package.crc32c(data)


def flip_crc(batch: bytes) -> bytes:
    out = bytearray(batch)
    struct.pack_into(">I", out, CRC_OFFSET, struct.unpack_from(">I", out, CRC_OFFSET)[0] ^ 1)
    return bytes(out)


@pytest.mark.parametrize("codec", [Compression.NONE, *INFLATING])
def test_crc_mismatch_is_batch_pys_own_error(codec):
    good = build_batch([Record(0, 1, b"k", b"v")], compression=codec)
    bad = flip_crc(build_batch([Record(1, 1, b"k", b"w")], compression=codec))
    messages = []
    for decode in (arrow.decode_to_arrow_native, arrow.decode_to_arrow_reference):
        with pytest.raises(CorruptRecordError, match="CRC mismatch") as err:
            decode(good + bad, source="seg.log")
        assert (err.value.source, err.value.position) == ("seg.log", len(good))
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    assert arrow.decode_to_arrow_native(good + bad, validate=False)["value"].to_pylist() == [b"v", b"w"]


def test_an_earlier_batchs_crc_comes_before_a_later_walk_error():
    """The kernel checks CRCs after the walk has gone on; the error is still the first bad batch's."""
    bad = flip_crc(build_batch([Record(0, 1, b"k", b"v")]))
    truncated = build_batch([Record(1, 1, b"k", b"v")])[:-3]
    for decode in (arrow.decode_to_arrow_native, arrow.decode_to_arrow_reference):
        with pytest.raises(CorruptRecordError, match="CRC mismatch") as err:
            decode(bad + truncated, source="seg.log")
        assert err.value.position == 0


def test_an_impossible_count_after_a_bad_crc_reports_the_crc():
    bad = flip_crc(build_batch([Record(0, 1, b"k", b"v")]))
    impossible = bytearray(build_batch([Record(1, 1, b"k", b"v")]))
    struct.pack_into(">i", impossible, HEADER_SIZE - 4, 1 << 30)  # recordsCount
    with pytest.raises(CorruptRecordError, match="cannot fit") as err:  # no CRC checks: the count
        arrow.decode_to_arrow_native(bad + bytes(impossible), validate=False, source="a")
    assert err.value.position == len(bad)
    with pytest.raises(CorruptRecordError, match="CRC mismatch") as err:
        arrow.decode_to_arrow_native(bad + bytes(impossible), source="a")
    assert err.value.position == 0


# ---------------------------------------------------------------------------------------------
# Inflating into a reused buffer


@pytest.mark.parametrize("codec", INFLATING)
def test_decompress_into_gives_decompress_bytes_or_leaves_it_to_decompress(codec):
    data = bytes(range(256)) * 600
    frame = compress(codec, data)
    out = memoryview(bytearray(1 << 20))
    size = decompress_into(int(codec), frame, out)
    assert size == len(data) and out[:size] == data
    assert decompress_into(int(codec), frame, out[:1000]) is None  # its bound does not fit
    assert decompress_into(int(codec), frame + frame, out) is None  # two frames: decompress() decides
    assert decompress_into(int(codec), frame[:-3], out) is None  # truncated: decompress() raises
    with pytest.raises(CorruptRecordError):
        decompress(int(codec), frame[:-3])
    assert decompress_into(int(Compression.GZIP), compress(Compression.GZIP, data), out) is None


@pytest.mark.parametrize("codec", INFLATING)
def test_sections_filling_the_inflate_buffer_are_decoded_in_order(codec, monkeypatch):
    monkeypatch.setattr(arrow, "_CHUNK_BYTES", 4096)  # a few batches fill it
    batches = [build_batch([Record(i * 10 + j, 5, b"k%d" % j, bytes([i]) * 300) for j in range(10)],
                           base_offset=i * 10, compression=codec) for i in range(12)]
    huge = build_batch([Record(120, 5, None, b"z" * 9000)], base_offset=120, compression=codec)  # > the buffer
    table = arrow.decode_to_arrow_native(b"".join(batches) + huge)
    assert table.equals(arrow.decode_to_arrow_reference(b"".join(batches) + huge))
    assert table["offset"].to_pylist() == list(range(121)) and table.column("offset").num_chunks > 2
    assert len(arrow._INFLATE_POOL[-1]) == 4096  # handed back for the next call


# ---------------------------------------------------------------------------------------------
# Against kafka-python

_field = st.none() | st.binary(max_size=40)
_records = st.lists(st.tuples(_field, _field, st.lists(st.tuples(st.text(max_size=6), _field), max_size=2),
                              st.integers(0, 10**6)), min_size=1, max_size=30)


@FAST
@given(st.lists(_records, min_size=1, max_size=3), st.sampled_from([0, 2, 3, 4]))
def test_round_trip_against_kafka_python(batches, codec):
    """kafka-python writes the batches, decode_to_arrow reads them, and so does kafka-python's reader."""
    data = b""
    for i, records in enumerate(batches):
        builder = MemoryRecordsBuilder(magic=2, compression_type=codec, batch_size=1 << 24)
        for key, value, headers, ts in records:
            assert builder.append(1_700_000_000_000 + ts, key, value, headers) is not None
        builder.close()
        batch = bytearray(builder.buffer())
        batch[:8] = (i * 100).to_bytes(8, "big")  # base offset, outside the CRC
        data += bytes(batch)
    table = arrow.decode_to_arrow(data)
    theirs = [(r.offset, r.timestamp, r.key, r.value, [{"key": k, "value": v} for k, v in r.headers])
              for batch in MemoryRecords(data) for r in batch]
    ours = zip(table["offset"].to_pylist(), table["timestamp"].cast(pa.int64()).to_pylist(),
               table["key"].to_pylist(), table["value"].to_pylist(), table["headers"].to_pylist())
    assert list(ours) == theirs
    # (kafka-python leaves a batch uncompressed where compressing would not shrink it)
    assert {b.header.compression for b in iter_batches(data)} <= {Compression.NONE, Compression(codec)}
