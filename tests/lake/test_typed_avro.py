"""The native Avro kernel against its reference twin (fastavro), and what it does with bad bytes:
every row that is not exactly one datum of its schema is reported with a reason and leaves the
other rows as they were."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import struct
import uuid

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from topiclake.lake.typed import wire
from topiclake.lake.typed.avro import HAS_NATIVE, AvroDecoder, UnsupportedSchema

pytestmark = pytest.mark.skipif(not HAS_NATIVE, reason="the native kernel is built by setup.py")

UTC = dt.timezone.utc
SCHEMA = {"type": "record", "name": "Everything", "namespace": "t", "fields": [
    {"name": "b", "type": "boolean"}, {"name": "i", "type": "int"}, {"name": "l", "type": "long"},
    {"name": "f", "type": "float"}, {"name": "d", "type": "double"}, {"name": "raw", "type": "bytes"},
    {"name": "s", "type": "string"}, {"name": "fx", "type": {"type": "fixed", "name": "F4", "size": 4}},
    {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
    {"name": "opt", "type": ["null", "string"]}, {"name": "opt_last", "type": ["long", "null"]},
    {"name": "multi", "type": ["null", "int", "string", {"type": "record", "name": "M", "fields": [
        {"name": "x", "type": "int"}]}]},
    {"name": "nested", "type": {"type": "array", "items": {"type": "map", "values": {"type": "array", "items": "M"}}}},
    {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 4}},
    {"name": "decf", "type": {"type": "fixed", "name": "D", "size": 9, "logicalType": "decimal", "precision": 18,
                              "scale": 2}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "tms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tus", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "ltms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "time_ms", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "time_us", "type": {"type": "long", "logicalType": "time-micros"}},
    {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "inner", "type": ["null", {"type": "record", "name": "In", "fields": [
        {"name": "m", "type": "M"}, {"name": "tags", "type": {"type": "array", "items": "string"}}]}]},
]}
PARSED = fastavro.parse_schema(SCHEMA)


def record(i: int) -> dict:
    return {
        "b": bool(i % 2), "i": -(2 ** 31) if i == 3 else i * 7, "l": 2 ** 63 - 1 if i == 4 else -i * 10 ** 12,
        "f": i / 8, "d": -i / 3, "raw": bytes(range(i % 5)), "s": "ünïcödé €" * (i % 3), "fx": b"ab\x00d",
        "e": "ABC"[i % 3], "opt": None if i % 2 else f"o{i}", "opt_last": None if i % 3 else i,
        "multi": [None, i, f"m{i}", {"x": i}][i % 4],
        "nested": [{f"k{j}": [{"x": j}] * j for j in range(i % 3)} for _ in range(i % 4)],
        "dec": decimal.Decimal(f"-{i}{i}.{i:04d}"), "decf": decimal.Decimal(f"{i * 1000}.25"),
        "day": dt.date(1969, 12, 31) + dt.timedelta(days=i), "tms": dt.datetime(2024, 1, 1, tzinfo=UTC)
        + dt.timedelta(milliseconds=i), "tus": dt.datetime(1960, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=i),
        "ltms": dt.datetime(2024, 2, 2) + dt.timedelta(milliseconds=i),
        "time_ms": dt.time(1, 2, 3, 4000 * i), "time_us": dt.time(23, 59, 59, i),
        "uid": uuid.UUID(int=i), "inner": None if i % 2 else {"m": {"x": -i}, "tags": ["t"] * i},
    }


def wire_value(datum: dict, schema_id: int = 1) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, PARSED, datum)
    return b"\x00" + struct.pack(">I", schema_id) + out.getvalue()


GOOD = [wire_value(record(i)) for i in range(12)]


def test_native_equals_the_reference_on_every_type():
    decoder = AvroDecoder(PARSED)
    values = pa.array(GOOD, pa.binary())
    native, mask, failures = decoder.decode(values, wire.PREFIX)
    reference, ref_mask, ref_failures = decoder.decode(values, wire.PREFIX, native=False)
    assert failures == ref_failures == [] and mask.all() and ref_mask.all()
    native.validate(full=True)
    assert native.type == reference.type == decoder.arrow_type
    assert native.equals(reference)
    row = native.to_pylist()[2]
    assert row["multi"] == {"member0": None, "member1": "m2", "member2": None}
    assert row["time_ms"] == 3_723_008 and row["dec"] == decimal.Decimal("-22.0002")
    assert row["ltms"] == dt.datetime(2024, 2, 2, 0, 0, 0, 2000, tzinfo=UTC)  # the wall clock, read as UTC


def test_every_truncation_fails_alone_and_the_other_rows_keep_their_values():
    decoder = AvroDecoder(PARSED)
    whole = GOOD[2]
    cut = [whole[:n] for n in range(len(whole))]
    values = pa.array([GOOD[0], *cut, GOOD[1], whole + b"\x00", GOOD[3]], pa.binary())
    decoded, mask, failures = decoder.decode(values, wire.PREFIX)
    assert mask.tolist() == [True] + [False] * len(cut) + [True, False, True]
    reasons = dict(failures)
    assert reasons[1] == "truncated: shorter than the wire-format prefix"
    assert all(reasons[1 + n].startswith("truncated") for n in range(wire.PREFIX, len(cut)))
    assert reasons[len(cut) + 2] == "1 bytes left over after the datum"
    expected, _, _ = decoder.decode(pa.array([GOOD[0], GOOD[1], GOOD[3]], pa.binary()), wire.PREFIX, native=False)
    assert decoded.equals(expected)


@pytest.mark.parametrize("payload, reason", [
    (b"\x81", "truncated: a varint runs past the end of the value"),
    (b"\xff" * 11, "a varint longer than 10 bytes"),
])
def test_bad_bytes_have_a_reason(payload, reason):
    decoder = AvroDecoder(fastavro.parse_schema({"type": "record", "name": "R", "fields": [
        {"name": "x", "type": "long"}]}))
    _, mask, failures = decoder.decode(pa.array([b"\x00\x00\x00\x00\x01" + payload], pa.binary()), wire.PREFIX)
    assert not mask[0] and failures == [(0, reason)]


@pytest.mark.parametrize("schema, payload, reason", [
    ({"type": "enum", "name": "E", "symbols": ["A"]}, b"\x02", "an enum symbol index out of range"),
    (["null", "int"], b"\x04", "a union branch index out of range"),
    ("boolean", b"\x02", "a boolean that is neither 0 nor 1"),
    ("string", b"\x04\xff\xfe", "a string that is not UTF-8"),
    ("int", b"\x80\x80\x80\x80\x20", "an int out of the 32-bit range"),
    ({"type": "array", "items": "long"}, b"\x7e", "truncated: a block counts more items than bytes are left"),
])
def test_values_outside_the_schema_are_refused(schema, payload, reason):
    decoder = AvroDecoder(fastavro.parse_schema(schema))
    _, mask, failures = decoder.decode(pa.array([payload], pa.binary()), 0)
    assert failures == [(0, reason)]


def test_a_recursive_schema_cannot_become_columns():
    linked = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
    with pytest.raises(UnsupportedSchema, match="recursive type"):
        AvroDecoder(fastavro.parse_schema(linked))


def test_wire_prefixes_and_protobuf_message_indexes():
    values = pa.array([b"\x00\x00\x00\x01\x00" + b"\x00rest", None, b"\x00\x00", b"{}", b"",
                       b"\x00\x00\x00\x00\x07" + b"\x02\x06x", b"\x00\x00\x00\x00\x07" + b"\x04\x02\x04y",
                       b"\x00\x00\x00\x00\x07" + b"\x04\x02"], pa.binary())
    ids = wire.split(values)
    assert ids.tolist() == [256, wire.NULL, wire.SHORT, wire.BAD_MAGIC, wire.SHORT, 7, 7, 7]
    proto = values.take(pa.array([0, 5, 6, 7]))
    index, other, starts = wire.message_indexes(proto)
    assert index.tolist() == [0, 3, wire.NESTED, wire.MALFORMED]
    assert other == {2: (1, 2), 3: None}
    assert starts[:3].tolist() == [6, 7, 8]
    assert wire.strip(proto.slice(0, 3), 5).to_pylist() == [b"\x00rest", b"\x02\x06x", b"\x04\x02\x04y"]
    assert np.array_equal(wire.first_bytes(values.take(pa.array([3]))), [ord("{")])
