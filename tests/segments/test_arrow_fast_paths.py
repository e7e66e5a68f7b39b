"""The decode kernel's fast paths (issue 33): its CRC-32C, the reused buffer lz4 and zstd sections
are inflated into, the order of errors once CRCs are checked in the kernel, and a round trip of
decode_to_arrow against kafka-python, an independent writer and reader."""

from __future__ import annotations

import random
import struct

import crc32c as crc32c_package
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from topiclake.segments import arrow
from topiclake.segments.batch import CRC_OFFSET, HEADER_SIZE, Record, assemble_batch, build_batch, iter_batches
from topiclake.segments.compression import Compression, compress, decompress, decompress_into
from topiclake.segments.errors import CorruptRecordError
from topiclake.segments.varint import encode_varint

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


@pytest.mark.skipif(not arrow._KERNEL_CRC, reason="no crc32 instruction on this CPU")
def test_kernel_crc32c_folding_every_tail_and_alignment():
    """From 256 bytes on, a CPU with AVX-512 VPCLMULQDQ folds 256 then 64 bytes a step and the crc32
    instruction takes the last 0-63: every tail, unaligned starts, many 256-byte steps."""
    data = random.Random(33).randbytes(70_000)
    for start in (0, 1, 3, 8, 61):
        for size in [*range(200, 600), 1023, 1024, 4095, 3 * 8192 + 17, len(data) - start]:
            view = memoryview(data)[start:start + size]
            assert kernel().crc32c(view) == crc32c_package.crc32c(view), (start, size)


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
    # a few batches fill it: an lz4 section needs room for its bound (64 KiB a block: the frame's
    # block size; 4 KiB never held one), a zstd one for its content size
    room = 72_000 if codec == Compression.LZ4 else 8_000
    monkeypatch.setattr(arrow, "_CHUNK_BYTES", room)
    inflated = []
    monkeypatch.setattr(arrow, "decompress_into", lambda *args: inflated.append(decompress_into(*args)) or inflated[-1])
    batches = [build_batch([Record(i * 10 + j, 5, b"k%d" % j, bytes([i]) * 300) for j in range(10)],
                           base_offset=i * 10, compression=codec) for i in range(12)]
    huge = build_batch([Record(120, 5, None, b"z" * 80_000)], base_offset=120, compression=codec)  # > the buffer
    table = arrow.decode_to_arrow_native(b"".join(batches) + huge)
    assert table.equals(arrow.decode_to_arrow_reference(b"".join(batches) + huge))
    assert table["offset"].to_pylist() == list(range(121)) and table.column("offset").num_chunks > 2
    assert len(arrow._INFLATE_POOL[-1]) == room  # handed back for the next call
    assert sum(size is not None for size in inflated) == 12  # every batch but the huge one went into it


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


# ---------------------------------------------------------------------------------------------
# Varints of every length: the kernel's fast path takes those of up to 9 bytes, its exact path the rest

INT64 = (-(1 << 63), (1 << 63) - 1)
# the smallest and largest zig-zag value of every length (1-10 bytes), and int64's extremes
VARINT_EDGES = sorted({0, 1, 2, (1 << 64) - 2, (1 << 64) - 1} | {1 << 7 * k for k in range(10)}
                      | {(1 << 7 * k) - 1 for k in range(1, 11)})
zigzagged = st.sampled_from(VARINT_EDGES) | st.integers(0, (1 << 70) - 1)


def varint_of_length(zigzag: int, length: int) -> bytes:
    """`zigzag` as a varint of exactly `length` bytes: overlong (0x80 groups) where it is small."""
    assert zigzag >> 7 * length == 0
    groups = [zigzag >> 7 * i & 0x7F for i in range(length)]
    return bytes(g | 0x80 for g in groups[:-1]) + bytes(groups[-1:])


def unzigzag(zigzag: int) -> int:
    return zigzag >> 1 ^ -(zigzag & 1)


def batch_of(section: bytes, records_count: int, base: int = 0) -> bytes:
    """A batch of hand-made records: base offset and timestamps `base`, no producer."""
    return assemble_batch(base_offset=base, partition_leader_epoch=0, attributes=0, last_offset_delta=0,
                          base_timestamp=base, max_timestamp=base, producer_id=-1, producer_epoch=-1,
                          base_sequence=-1, records_count=records_count, records_section=section)


@st.composite
def varint_st(draw, values=zigzagged) -> tuple[bytes, int]:
    """(bytes, signed value): a zig-zag value drawn from `values`, encoded in 1-10 bytes (the shortest or longer)."""
    zigzag = draw(values)
    return varint_of_length(zigzag, draw(st.integers(max(1, -(-zigzag.bit_length() // 7)), 10))), unzigzag(zigzag)


@st.composite
def field_st(draw, data_st=st.none() | st.binary(max_size=10)) -> tuple[bytes, bytes | None]:
    """A length-prefixed field, its length a varint of any length; null is any negative length."""
    data = draw(data_st)
    length = st.just(2 * len(data)) if data is not None else zigzagged.map(lambda z: z | 1)
    return draw(varint_st(length))[0] + (data or b""), data


@st.composite
def record_with_varints_st(draw) -> tuple[bytes, tuple]:
    """(record, (offset delta, timestamp delta, key, value, headers)) with every varint's length drawn."""
    ts_bytes, ts_delta = draw(varint_st())
    offset_bytes, offset_delta = draw(varint_st())
    key_bytes, key = draw(field_st())
    value_bytes, value = draw(field_st())
    headers = draw(st.lists(st.tuples(field_st(st.text("ab", max_size=9).map(str.encode)), field_st()), max_size=2))
    body = b"\x00" + ts_bytes + offset_bytes + key_bytes + value_bytes
    body += draw(varint_st(st.just(2 * len(headers))))[0] + b"".join(k + v for (k, _), (v, _) in headers)
    row = (offset_delta, ts_delta, key, value, [{"key": k.decode(), "value": v} for (_, k), (_, v) in headers])
    return draw(varint_st(st.just(2 * len(body))))[0] + body, row


@FAST
@given(st.lists(record_with_varints_st(), min_size=1, max_size=4), st.sampled_from([0, 1 << 40, INT64[0], INT64[1]]))
def test_varints_of_every_length_and_value(records, base):
    """Each varint of 1-10 bytes, shortest or overlong, at every distance from its record's end
    (header values of 0-10 bytes follow the last ones): the exact values, or an error where an
    offset or timestamp leaves int64, from both decoders."""
    buf = batch_of(b"".join(record for record, _ in records), len(records), base)
    expected = [(base + offset_delta, base + ts_delta, key, value, headers)
                for _, (offset_delta, ts_delta, key, value, headers) in records]
    for decode in (arrow.decode_to_arrow_native, arrow.decode_to_arrow_reference):
        if all(INT64[0] <= n <= INT64[1] for row in expected for n in row[:2]):
            table = decode(buf)
            assert list(zip(table["offset"].to_pylist(), table["timestamp"].cast(pa.int64()).to_pylist(),
                            table["key"].to_pylist(), table["value"].to_pylist(),
                            table["headers"].to_pylist())) == expected
        else:
            with pytest.raises(CorruptRecordError, match="does not fit in 64 bits"):
                decode(buf)


@pytest.mark.parametrize("value_size", [0, 10])  # the deltas a few bytes from the record's end, or 12 and more
def test_every_bit_of_every_varint_length(value_size):
    """Each zig-zag bit (and all of them, and none) in every varint length that holds it, shortest
    and overlong, as a record's timestamp and offset deltas: int64's whole range, exactly."""
    zigzags = {0, (1 << 64) - 1} | {1 << bit for bit in range(64)} | {(1 << 7 * k) - 1 for k in range(1, 10)}
    varints = [(varint_of_length(z, n), unzigzag(z)) for z in sorted(zigzags)
               for n in range(max(1, -(-z.bit_length() // 7)), 11)]
    section = b""
    for encoded, _ in varints:
        body = b"\x00" + encoded + encoded + encode_varint(-1) + encode_varint(value_size) + b"v" * value_size
        section += encode_varint(len(body) + 1) + body + encode_varint(0)
    buf = batch_of(section, len(varints))
    for decode in (arrow.decode_to_arrow_native, arrow.decode_to_arrow_reference):
        table = decode(buf)
        assert table["offset"].to_pylist() == [value for _, value in varints]
        assert table["timestamp"].cast(pa.int64()).to_pylist() == [value for _, value in varints]


@pytest.mark.parametrize("length", range(1, 11))
def test_a_varint_cut_by_its_record_or_the_section_end_is_an_error(length):
    """A varint of `length` bytes cut after each of its bytes, by its record's end (more bytes follow
    in the section: the varint must not run on into them) and by the section's end. The reference
    reads on and finds the record's length wrong instead: its own words."""
    last = varint_of_length(0, length)  # the header count (0), the record's last field
    body = b"\x00" + encode_varint(0) * 2 + encode_varint(-1) + encode_varint(10) + b"v" * 10 + last
    whole = encode_varint(len(body)) + body
    for kept in range(length):  # bytes of the varint before the end
        by_record = encode_varint(len(body) - length + kept) + body + b"\x00" * 8, 1
        by_section = whole + varint_of_length(2 * len(body), length)[:kept], 2  # the second record's length
        for section, count in (by_record, by_section) if kept else (by_record,):
            with pytest.raises(CorruptRecordError, match="varint runs past the end of the record"):
                arrow.decode_to_arrow_native(batch_of(section, count))
            with pytest.raises(CorruptRecordError):
                arrow.decode_to_arrow_reference(batch_of(section, count))
