"""segments.arrow: the native kernel against its reference twin, on real, generated and hostile bytes.

The rule every test holds: the native decoder returns exactly the reference table, or both raise
CorruptRecordError — never another exception, never a crash.
"""

from __future__ import annotations

import importlib
import json
import struct
import sys
import zlib

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from topiclake.segments import _native, arrow
from topiclake.segments.batch import HEADER_SIZE, Record, TimestampType, assemble_batch, build_batch
from topiclake.segments.compression import Compression, compress
from topiclake.segments.errors import CorruptRecordError
from topiclake.segments.varint import encode_varint
from tests.support.paths import CONFORMANCE

VECTORS = json.loads((CONFORMANCE / "vectors.json").read_text())
KAFKA_LOGS = sorted(CONFORMANCE.glob("kafka-3.8-segments/*/*/*.log"))

pytestmark = pytest.mark.skipif(not arrow.HAS_NATIVE, reason="native extension not built")
FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def decode_both(buf, **kwargs) -> pa.Table | None:
    """Both decoders on the same bytes: equal tables, or CorruptRecordError from both (-> None)."""
    try:
        expected = arrow.decode_to_arrow_reference(buf, **kwargs)
    except CorruptRecordError:
        with pytest.raises(CorruptRecordError):
            arrow.decode_to_arrow_native(buf, **kwargs)
        return None
    table = arrow.decode_to_arrow_native(buf, **kwargs)
    table.validate(full=True)  # offsets, bitmaps and UTF-8 of the kernel's buffers
    assert table.schema == arrow.RECORD_SCHEMA
    assert table.equals(expected), (table.to_pylist()[:3], expected.to_pylist()[:3])
    return table


# ---------------------------------------------------------------------------------------------
# Bytes real Kafka software wrote


@pytest.mark.parametrize("vector", VECTORS, ids=[v["source"].rsplit(" ", 1)[-1][:40] for v in VECTORS])
def test_conformance_vectors(vector):
    buf = bytes.fromhex(vector["hex"])
    if not vector["expect_crc_ok"]:
        for decode in (arrow.decode_to_arrow_native, arrow.decode_to_arrow_reference):
            with pytest.raises(CorruptRecordError, match="CRC"):
                decode(buf, source="vector")
        decode_both(buf, validate=False)
        return
    table = decode_both(buf)
    decoded = vector["decoded_by_independent_decoder"]
    hex_or_none = lambda b: None if b is None else b.hex()  # noqa: E731
    assert [hex_or_none(k) for k in table["key"].to_pylist()] == [r["key"] for r in decoded["records"]]
    assert [hex_or_none(v) for v in table["value"].to_pylist()] == [r["value"] for r in decoded["records"]]
    assert table["offset"].to_pylist() == [decoded["baseOffset"] + r["offsetDelta"] for r in decoded["records"]]
    assert set(table["is_control"].to_pylist()) <= {decoded["isControl"]}


@pytest.mark.parametrize("path", KAFKA_LOGS, ids=[str(p.relative_to(CONFORMANCE)) for p in KAFKA_LOGS])
def test_kafka_segments(path):
    buf = path.read_bytes()
    table = decode_both(buf, source=str(path))
    assert table.num_rows > 0
    offsets = table["offset"].to_pylist()
    assert offsets == sorted(offsets)
    decode_both(buf, min_offset=offsets[len(offsets) // 2], max_offset=offsets[-1] - 1)
    decode_both(buf[:-7], allow_partial_tail=True)


# ---------------------------------------------------------------------------------------------
# Generated batches

keys = st.none() | st.binary(max_size=40)
header = st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=12))
records_st = st.lists(st.tuples(keys, keys, st.lists(header, max_size=3), st.integers(0, 5),
                                st.integers(-(1 << 40), 1 << 40)), min_size=1, max_size=12)


@st.composite
def batch_st(draw) -> tuple[bytes, list[Record], dict]:
    base_offset = draw(st.integers(0, 1 << 62))
    base_ts = draw(st.integers(0, 1 << 41))
    records, offset = [], base_offset
    for key, value, headers, gap, ts in draw(records_st):
        records.append(Record(offset, base_ts + ts, key, value, tuple(headers)))
        offset += 1 + gap  # compaction leaves gaps
    options = dict(
        compression=draw(st.sampled_from(list(Compression))),
        timestamp_type=draw(st.sampled_from(list(TimestampType))),
        is_transactional=draw(st.booleans()),
        is_control=draw(st.booleans()),
        producer_id=draw(st.integers(-1, 1 << 40)),
        producer_epoch=draw(st.integers(-1, 32767)),
    )
    return build_batch(records, **options), records, options


@FAST
@given(st.lists(batch_st(), min_size=1, max_size=4), st.data())
def test_generated_batches(batches, data):
    buf = b"".join(b for b, _, _ in batches)
    table = decode_both(buf)
    expected = [r for _, records, _ in batches for r in records]
    assert table["offset"].to_pylist() == [r.offset for r in expected]
    assert table["key"].to_pylist() == [r.key for r in expected]  # None stays null, b"" stays empty
    assert table["value"].to_pylist() == [r.value for r in expected]
    assert table["headers"].to_pylist() == [[{"key": k, "value": v} for k, v in r.headers] for r in expected]
    start = 0
    for _, records, options in batches:
        timestamps = table["timestamp"].slice(start, len(records)).cast(pa.int64()).to_pylist()
        if options["timestamp_type"] is TimestampType.LOG_APPEND_TIME:
            assert timestamps == [max(r.timestamp for r in records)] * len(records)
        else:
            assert timestamps == [r.timestamp for r in records]
        start += len(records)
    lo = data.draw(st.sampled_from(table["offset"].to_pylist()))
    filtered = decode_both(buf, min_offset=lo, max_offset=lo + data.draw(st.integers(0, 20)))
    assert filtered.num_rows >= 1 and min(filtered["offset"].to_pylist()) >= lo


# ---------------------------------------------------------------------------------------------
# Hostile bytes


@FAST
@given(st.lists(batch_st(), min_size=1, max_size=3), st.lists(st.tuples(st.integers(0), st.integers(0, 255)),
                                                              max_size=4),
       st.integers(0), st.booleans(), st.booleans())
def test_corrupted_bytes(batches, flips, cut, validate, partial_tail):
    """Valid multi-batch buffers with bytes overwritten and tails cut; without CRC checks the
    kernel itself meets the hostile bytes."""
    buf = bytearray(b"".join(b for b, _, _ in batches))
    for where, byte in flips:
        buf[where % len(buf)] = byte
    if cut % 3 == 0:
        del buf[len(buf) - cut % 16:]
    decode_both(bytes(buf), validate=validate, allow_partial_tail=partial_tail, source="fuzz")


def raw_varint(value: int) -> bytes:
    """Zig-zag varint of any size (10-byte varints reach 70 bits, which the decoders must handle)."""
    v = (value << 1) ^ (value >> 80)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    return bytes(out + bytes([v]))


# Record fields: well formed, or (in hostile records) absurd 10-byte varints, random bytes, bad
# UTF-8 and lengths/counts off by one.
absurd = st.integers(-(1 << 69), (1 << 69) - 1).map(raw_varint) | st.just(b"\x80" * 9 + b"\x01")
def length_prefixed(data: bytes) -> bytes:
    return encode_varint(len(data)) + data


good_field = st.just(encode_varint(-1)) | st.binary(max_size=5).map(length_prefixed)
bad_field = (st.sampled_from(["é€😀".encode(), b"\xed\xa0\x80", b"\xc0\xaf"]).map(length_prefixed)
             | absurd | st.binary(max_size=4) | st.just(b"\xff" * 10))  # 11-byte varint


@st.composite
def record_st(draw, hostile: bool) -> bytes:
    field = good_field | bad_field if hostile else good_field
    delta = st.integers(-5, 5).map(encode_varint) | absurd  # absurd deltas are valid bytes
    off_by = st.sampled_from([0, 0, -1, 1]) if hostile else st.just(0)
    header_key = field if hostile else st.text(max_size=4).map(str.encode).map(length_prefixed)
    headers = draw(st.lists(st.tuples(header_key, field), max_size=3))
    body = b"\x00" + draw(delta) + draw(delta) + draw(field) + draw(field)
    body += encode_varint(len(headers) + draw(off_by)) + b"".join(k + v for k, v in headers)
    return encode_varint(len(body) + draw(off_by)) + body


@FAST
@given(st.lists(st.booleans().flatmap(lambda hostile: st.lists(record_st(hostile), max_size=5)), min_size=1,
                max_size=3),
       st.sampled_from([0, 0, 0, -1, 1]), st.sampled_from([0, 1 << 40, (1 << 63) - 3, -(1 << 63)]),
       st.sampled_from([0, 0x08, 0x30]))
def test_hostile_record_sections(sections, count_off_by, base_offset, attributes):
    """Record sections built field by field reach every branch of the record parser."""
    buf = b"".join(
        assemble_batch(base_offset=base_offset, partition_leader_epoch=0, attributes=attributes, last_offset_delta=0,
                       base_timestamp=base_offset // 2, max_timestamp=-base_offset // 3, producer_id=7,
                       producer_epoch=1, base_sequence=0, records_count=len(records) + count_off_by,
                       records_section=b"".join(records))
        for records in sections)
    decode_both(buf)


def raw_record(key_bytes: bytes) -> bytes:
    body = b"\x00" + encode_varint(0) + encode_varint(0) + encode_varint(-1) + encode_varint(1) + b"v"
    body += encode_varint(1) + encode_varint(len(key_bytes)) + key_bytes + encode_varint(-1)
    return encode_varint(len(body)) + body


utf8_edges = st.lists(st.sampled_from([0x41, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xED, 0xEF,
                                        0xF0, 0xF4, 0xF5, 0xFF]), max_size=6).map(bytes)


@FAST
@given(utf8_edges | st.binary(max_size=8)
       | st.text(st.characters(min_codepoint=0xD000, max_codepoint=0x10FFFF, categories=None), max_size=3)
       .map(lambda t: t.encode("utf-8", "surrogatepass")))
@example(b"\xed\xa0\x80")  # a surrogate
@example(b"\xf4\x90\x80\x80")  # past U+10FFFF
@example(b"\xe0\x80\xaf")  # overlong
@example("ok😀".encode())
def test_header_key_utf8(key):
    """Header keys must be UTF-8 exactly as Python's strict decoder defines it."""
    buf = assemble_batch(base_offset=0, partition_leader_epoch=0, attributes=0, last_offset_delta=0,
                         base_timestamp=0, max_timestamp=0, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                         records_count=1, records_section=raw_record(key))
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        with pytest.raises(CorruptRecordError, match="UTF-8"):
            arrow.decode_to_arrow_native(buf)
    else:
        assert arrow.decode_to_arrow_native(buf)["headers"].to_pylist() == [[{"key": text, "value": None}]]


def test_error_names_source_and_batch_position():
    first = build_batch([Record(0, 1, b"k", b"v")])
    second = bytearray(build_batch([Record(1, 1, b"k", b"v")]))
    second[HEADER_SIZE] = 0x7E  # record length 63: past the end of the batch
    for decode in (arrow.decode_to_arrow_native, arrow.decode_to_arrow_reference):
        with pytest.raises(CorruptRecordError) as err:
            decode(first + bytes(second), source="seg.log", validate=False)
        assert (err.value.source, err.value.position) == ("seg.log", len(first))


def test_impossible_record_count_is_refused_before_allocating():
    batch = assemble_batch(base_offset=0, partition_leader_epoch=0, attributes=0, last_offset_delta=0,
                           base_timestamp=0, max_timestamp=0, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                           records_count=(1 << 31) - 1, records_section=b"\x00" * 64)
    with pytest.raises(CorruptRecordError, match="cannot fit"):
        arrow.decode_to_arrow_native(batch)
    decode_both(batch)


# ---------------------------------------------------------------------------------------------
# Legacy message sets, mixed with v2 in one buffer


def legacy_message(offset: int, magic: int, key: bytes | None, value: bytes | None, *, timestamp: int = 0,
                   attributes: int = 0) -> bytes:
    def field(data: bytes | None) -> bytes:
        return struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data

    body = struct.pack(">bb", magic, attributes) + (struct.pack(">q", timestamp) if magic else b"")
    body += field(key) + field(value)
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message


def legacy_wrapper(last_offset: int, magic: int, inner: list[bytes], *, timestamp: int = 0, lat: bool = False):
    """A gzip wrapper; v1 inner offsets are relative, the wrapper carries the last absolute one."""
    attributes = int(Compression.GZIP) | (0x08 if lat else 0)
    return legacy_message(last_offset, magic, None, compress(Compression.GZIP, b"".join(inner)),
                          timestamp=timestamp, attributes=attributes)


def test_mixed_legacy_and_v2(monkeypatch):
    monkeypatch.setattr(arrow, "_CHUNK_BYTES", 100)  # several native calls, flushed around legacy runs
    parts = [
        legacy_message(0, 0, b"k0", b"v0"),
        legacy_message(1, 0, None, b"v1"),
        legacy_message(2, 1, b"k2", None, timestamp=1_000),
        legacy_wrapper(5, 1, [legacy_message(i, 1, b"in", b"%d" % i, timestamp=7) for i in range(3)],
                       timestamp=2_000, lat=True),
        build_batch([Record(6, 3_000, b"k6", b"v6", (("h", b"x"),)), Record(7, 3_001, None, None)]),
        build_batch([Record(8, 3_002, b"k8", b"v8")], compression=Compression.LZ4),
        legacy_message(9, 1, b"k9", b"v9", timestamp=4_000),
        build_batch([Record(10, 5_000, b"k10", b"v10")]),
    ]
    buf = b"".join(parts)
    table = decode_both(buf, source="mixed")
    assert table["offset"].to_pylist() == list(range(11))
    ts = table["timestamp"].cast(pa.int64()).to_pylist()
    assert ts[:2] == [None, None]  # magic 0 has no timestamp
    assert ts[2:6] == [1_000, 2_000, 2_000, 2_000]  # LogAppendTime wrapper stamps its inner messages
    assert table["timestamp_type"].to_pylist()[3:6] == [1, 1, 1]
    assert table["key"].to_pylist()[:3] == [b"k0", None, b"k2"] and table["value"][2].as_py() is None
    decode_both(buf, min_offset=4, max_offset=8)
    table = decode_both(buf, start=sum(map(len, parts[:2])), end=len(buf) - len(parts[-1]))
    assert table["offset"].to_pylist() == list(range(2, 10))
    decode_both(buf[:-5], allow_partial_tail=True)
    decode_both(buf[:-5])


# ---------------------------------------------------------------------------------------------
# The import-time choice between the kernel and the reference


def reload_arrow(monkeypatch, *, env: str | None = None, hide_extension: bool = False):
    if env is not None:
        monkeypatch.setenv("TOPICLAKE_NO_EXTENSIONS", env)
    if hide_extension:  # as if never built: the import raises ImportError
        monkeypatch.delattr(_native, "_decode", raising=False)
        monkeypatch.setitem(sys.modules, "topiclake.segments._native._decode", None)
    return importlib.reload(arrow)


@pytest.mark.parametrize("how", [{"env": "1"}, {"hide_extension": True}])
def test_fallback_to_reference(monkeypatch, how):
    try:
        module = reload_arrow(monkeypatch, **how)
        assert not module.HAS_NATIVE
        assert module.decode_to_arrow is module.decode_to_arrow_reference
        buf = build_batch([Record(3, 9, None, b"v", (("k", None),))])
        assert module.decode_to_arrow(buf).to_pylist()[0]["headers"] == [{"key": "k", "value": None}]
        with pytest.raises(RuntimeError):
            module.decode_to_arrow_native(buf)
    finally:
        monkeypatch.undo()
        assert importlib.reload(arrow).decode_to_arrow is arrow.decode_to_arrow_native
