"""segments.arrow's plain runs: the kernel walks the headers of consecutive uncompressed v2 batches
(`_decode.walk_plain`) and Python's walkers take every other unit. The walk never judges: it stops
before anything unusual, and the table and the errors are what Python's walk gives."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topiclake.segments import arrow
from topiclake.segments.batch import HEADER_SIZE, Record, assemble_batch, build_batch, iter_batches
from topiclake.segments.compression import Compression
from topiclake.segments.errors import CorruptRecordError

pytestmark = pytest.mark.skipif(not arrow.HAS_NATIVE, reason="native extension not built")
walk_plain = arrow._decode.walk_plain if arrow.HAS_NATIVE else None
INT16, INT32, INT64 = (-(1 << 15), (1 << 15) - 1), (-(1 << 31), (1 << 31) - 1), (-(1 << 63), (1 << 63) - 1)


def python_meta(buf: bytes, check_crc: bool) -> list[int]:
    """decode_batches' 9 meta fields per batch, from batch.py's own header parse."""
    meta = []
    for batch in iter_batches(buf, validate=False):
        h = batch.header
        meta += [h.records_count, h.base_offset, h.base_timestamp, h.max_timestamp, h.attributes, h.producer_id,
                 h.producer_epoch, HEADER_SIZE, h.crc if check_crc else -1]
    return meta


header_st = st.fixed_dictionaries({
    "base_offset": st.integers(*INT64), "partition_leader_epoch": st.integers(*INT32),
    # any bits but the codec's: a plain batch, whatever else its attributes say (the sign bit too)
    "attributes": st.integers(*INT16).map(lambda a: a & ~0x07), "last_offset_delta": st.integers(*INT32),
    "base_timestamp": st.integers(*INT64), "max_timestamp": st.integers(*INT64), "producer_id": st.integers(*INT64),
    "producer_epoch": st.integers(*INT16), "base_sequence": st.integers(*INT32),
    "records_count": st.integers(*INT32), "records_section": st.binary(max_size=40)})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(header_st, min_size=1, max_size=5), st.booleans())
def test_the_walk_reads_every_header_field_as_batch_py_does(headers, check_crc):
    buf = b"".join(assemble_batch(**h) for h in headers)
    next_pos, meta, spans = walk_plain(buf, 0, len(buf), 1 << 40, False, check_crc)
    assert next_pos == len(buf)
    assert list(array("q", meta)) == python_meta(buf, check_crc)
    sizes = [HEADER_SIZE + len(h["records_section"]) for h in headers]
    assert list(array("q", spans)) == [v for i, size in enumerate(sizes) for v in (sum(sizes[:i]), size)]


def plain(offset: int, value: bytes = b"v") -> bytes:
    return build_batch([Record(offset, 1_000 + offset, b"k%d" % offset, value)])


@pytest.mark.parametrize("unusual", ["lz4", "magic 1", "short length", "past the end", "header cut"])
def test_the_walk_stops_before_anything_unusual(unusual):
    first, second = plain(0), plain(1)
    if unusual == "lz4":
        tail = build_batch([Record(2, 0, b"k", b"v")], compression=Compression.LZ4)
    elif unusual == "magic 1":
        tail = bytearray(plain(2))
        tail[16] = 1
    elif unusual == "short length":
        tail = bytearray(plain(2))
        tail[8:12] = (HEADER_SIZE - 12 - 1).to_bytes(4, "big")
    elif unusual == "past the end":
        tail = plain(2)[:-1]
    else:
        tail = plain(2)[:HEADER_SIZE - 1]
    buf = first + second + bytes(tail)
    next_pos, meta, _ = walk_plain(buf, 0, len(buf), 1 << 40, False, True)
    assert next_pos == len(first + second) and len(meta) == 2 * 9 * 8
    # from the unusual unit on nothing, and `end` bounds the walk like the buffer's end
    assert walk_plain(buf, next_pos, len(buf), 1 << 40, True, True)[0] == next_pos
    assert walk_plain(buf, 0, len(first) + len(second) - 1, 1 << 40, True, True)[0] == len(first)


def test_the_walk_keeps_to_its_budget_and_takes_one_batch_when_told():
    batches = [plain(i, b"x" * 50) for i in range(4)]
    section = len(batches[0]) - HEADER_SIZE
    buf = b"".join(batches)
    assert walk_plain(buf, 0, len(buf), 2 * section, False, True)[0] == 2 * len(batches[0])
    assert walk_plain(buf, 0, len(buf), section - 1, False, True)[0] == 0
    assert walk_plain(buf, 0, len(buf), section - 1, True, True)[0] == len(batches[0])
    with pytest.raises(ValueError):
        walk_plain(buf, 0, len(buf) + 1, 1, False, True)


def test_chunks_of_plain_runs_around_compressed_batches_and_a_batch_bigger_than_a_chunk(monkeypatch):
    monkeypatch.setattr(arrow, "_CHUNK_BYTES", 300)
    parts = [plain(i, b"v" * 60) for i in range(6)]
    parts.insert(3, build_batch([Record(100, 0, b"z", b"zstd")], compression=Compression.ZSTD))
    parts.append(plain(200, b"w" * 700))  # alone in its chunk
    parts.append(plain(201))
    buf = b"".join(parts)
    table = arrow.decode_to_arrow_native(buf, source="runs")
    assert table.equals(arrow.decode_to_arrow_reference(buf))
    assert table["offset"].to_pylist() == [0, 1, 2, 100, 3, 4, 5, 200, 201]
    # a native call holds at most _CHUNK_BYTES of records sections (69 bytes a small batch here),
    # unless one batch alone is bigger: 3 plain + the inflated zstd + 1, then 2, the big one, the last
    assert [b.num_rows for b in table.to_batches()] == [5, 2, 1, 1]


def test_a_bad_crc_deep_in_a_run_names_its_batch():
    parts = [plain(i) for i in range(5)]
    bad = bytearray(parts[3])
    bad[-2] ^= 0x01  # the last byte of the last value (the header count follows it)
    parts[3] = bytes(bad)
    with pytest.raises(CorruptRecordError, match="CRC mismatch") as err:
        arrow.decode_to_arrow_native(b"".join(parts), source="seg.log")
    assert (err.value.source, err.value.position) == ("seg.log", sum(map(len, parts[:3])))
    # not checked when not asked: the flipped byte is in the last record's value
    values = arrow.decode_to_arrow_native(b"".join(parts), validate=False)["value"].to_pylist()
    assert values[3] == b"w" and values[4] == b"v"
