"""Typed tables from the schema registry, end to end: confluent-kafka's AvroSerializer,
ProtobufSerializer and JSONSerializer produce to the broker (its registry on), across three
schema versions; ingest with no extra flag (the lake replays `_schemas` from the storage root);
deltalake (not our code) reads the tables back: the typed values equal what was produced.

Evolution: the first ingest creates the tables from versions 1 and 2; version 3 adds fields
(a nested one too) and removes one, and the second ingest adds the columns in its commit, the
removed field's column filling with null. An incompatible version 4 (a field changes type), an
unknown schema id, a truncated prefix and a corrupt payload go to the quarantine table with the
reason, topic, partition and offset, and never stop the run."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import struct
import uuid

import pytest
from confluent_kafka import Producer, SerializingProducer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from google.protobuf import message_factory

from topiclake.lake.runs.backfill import BackfillOptions, backfill
from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.sql.query import run_sql
from topiclake.lake.table.location import discover_tables
from topiclake.lake.table.values import quarantine_uri
from topiclake.registry.formats import parse
from topiclake.segments.storage import StorageLayout

from tests.support.lake import read_table

pytestmark = pytest.mark.slow

UTC = dt.timezone.utc

# ---------------------------------------------------------------------------------------- Avro

INNER = {"type": "record", "name": "Inner", "fields": [{"name": "a", "type": "int"},
                                                        {"name": "b", "type": ["null", "double"], "default": None}]}
AVRO_V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "offset", "type": "int"},  # a built-in column's name: becomes value_offset
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "long"}},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "inner", "type": INNER},
    {"name": "legacy", "type": "string", "default": ""},
]}
AVRO_KEY = {"type": "record", "name": "OrderKey", "namespace": "shop", "fields": [{"name": "k", "type": "long"}]}
AVRO_V2 = {**AVRO_V1, "fields": AVRO_V1["fields"] + [{"name": "added2", "type": ["null", "long"], "default": None}]}
INNER_V3 = {**INNER, "fields": INNER["fields"] + [{"name": "c", "type": ["null", "string"], "default": None}]}
AVRO_V3 = {**AVRO_V1, "fields": [f if f["name"] != "inner" else {"name": "inner", "type": INNER_V3}
                                 for f in AVRO_V2["fields"] if f["name"] != "legacy"]
           + [{"name": "added3", "type": ["null", "string"], "default": None}]}
AVRO_V4 = {**AVRO_V3, "fields": [f if f["name"] != "name" else {"name": "name", "type": "long"}
                                 for f in AVRO_V3["fields"]]}  # incompatible: name becomes a long


def avro_record(i: int, version: int) -> dict:
    r = {"id": i, "name": f"n{i}é", "offset": -i, "price": decimal.Decimal(f"{i}.{i:02d}") * (-1) ** i,
         "day": dt.date(2024, 1, 1) + dt.timedelta(days=i),
         "at_ms": dt.datetime(2024, 5, 1, tzinfo=UTC) + dt.timedelta(milliseconds=i),
         "at_us": dt.datetime(2024, 5, 1, tzinfo=UTC) + dt.timedelta(microseconds=i),
         "uid": str(uuid.UUID(int=i)), "color": "GREEN" if i % 2 else "RED", "tags": [f"t{j}" for j in range(i % 3)],
         "attrs": {f"k{j}": j * i for j in range(i % 2 + 1)}, "note": None if i % 2 else f"note{i}",
         "inner": {"a": i, "b": None if i % 3 else i / 2}}
    if version == 1:
        r["legacy"] = f"old{i}"
    if version >= 2:
        r["added2"] = i * 10
    if version == 2:
        r["legacy"] = f"old{i}"
    if version == 3:
        r["inner"]["c"] = f"c{i}"
        r["added3"] = f"v3-{i}"
    return r


def avro_expected(r: dict) -> dict:
    """The row's typed columns as deltalake returns them."""
    out = {k: v for k, v in r.items() if k not in ("offset", "attrs", "inner")}
    out["value_offset"] = r["offset"]
    out["attrs"] = sorted(r["attrs"].items())
    out["inner"] = {"a": r["inner"]["a"], "b": r["inner"]["b"], "c": r["inner"].get("c")}
    for column in ("legacy", "added2", "added3"):
        out.setdefault(column, None)
    return out


# ------------------------------------------------------------------------------------ Protobuf

PROTO_V1 = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/any.proto";
message Part { string a = 1; int64 b = 2; }
message Order {
  enum Color { RED = 0; GREEN = 1; }
  int64 id = 1;
  string name = 2;
  repeated int32 nums = 3;
  Part part = 4;
  oneof choice { string s = 5; int32 i = 6; }
  google.protobuf.Timestamp at = 7;
  google.protobuf.Duration took = 8;
  google.protobuf.StringValue maybe = 9;
  map<string, int32> counts = 10;
  Color color = 11;
  repeated Part parts = 12;
  google.protobuf.Struct extra = 13;
  google.protobuf.Any any = 14;
  string legacy = 15;
  // ADDED
}
"""
PROTO_V2 = PROTO_V1.replace("// ADDED", "int64 added2 = 16;\n  // ADDED")
PROTO_V3 = PROTO_V2.replace("string legacy = 15;", "reserved 15;").replace("// ADDED", "string added3 = 17;")


def proto_class(text: str):
    return message_factory.GetMessageClass(parse("PROTOBUF", text, []).pool.FindMessageTypeByName("shop.Order"))


def proto_message(cls, i: int, version: int):
    m = cls(id=i, name=f"p{i}", nums=list(range(i % 3)), color=i % 2)
    m.part.a, m.part.b = f"a{i}", i
    if i % 2:
        m.s = f"s{i}"
    else:
        m.i = i
    m.at.FromMicroseconds(1_714_521_600_000_000 + i)
    m.took.FromMicroseconds(1500 * i)
    if i % 2:
        m.maybe.value = f"m{i}"
    m.counts[f"c{i}"] = i
    m.parts.add(a="x", b=i)
    m.extra.update({"n": i, "s": f"e{i}"})
    m.any.Pack(m.part)
    if version < 3:
        m.legacy = f"old{i}"
    if version >= 2:
        m.added2 = 2 * i
    if version >= 3:
        m.added3 = f"v3-{i}"
    return m


def proto_expected(m, version: int) -> dict:
    i = m.id
    return {"id": i, "name": f"p{i}", "nums": list(range(i % 3)), "part": {"a": f"a{i}", "b": i},
            "s": f"s{i}" if i % 2 else None, "i": None if i % 2 else i,
            "at": dt.datetime(2024, 5, 1, tzinfo=UTC) + dt.timedelta(microseconds=i), "took": 1500 * i,
            "maybe": f"m{i}" if i % 2 else None, "counts": [(f"c{i}", i)], "color": "GREEN" if i % 2 else "RED",
            "parts": [{"a": "x", "b": i}], "legacy": f"old{i}" if version < 3 else None,
            "added2": 2 * i if version >= 2 else None, "added3": f"v3-{i}" if version >= 3 else None,
            "any": {"type_url": "type.googleapis.com/shop.Part", "value": m.part.SerializeToString()},
            # Struct: its map of Value kinds (the entries' order is the serializer's)
            "extra": {"n": _value(number_value=float(i)), "s": _value(string_value=f"e{i}")}}


def _value(**kind) -> dict:
    return {"null_value": None, "number_value": None, "string_value": None, "bool_value": None,
            "struct_value": None, "list_value": None, **kind}


# ------------------------------------------------------------------------------------ JSON Schema

JSON_V1 = {"type": "object", "title": "Item", "properties": {
    "id": {"type": "integer"}, "name": {"type": "string"}, "price": {"type": "number"}, "ok": {"type": "boolean"},
    "at": {"type": "string", "format": "date-time"}, "tags": {"type": "array", "items": {"type": "string"}},
    "inner": {"type": "object", "properties": {"a": {"type": "integer"}}},
    "note": {"oneOf": [{"type": "null"}, {"type": "string"}]}, "legacy": {"type": "string"}}}
JSON_V2 = {**JSON_V1, "properties": {**JSON_V1["properties"], "added2": {"type": "integer"}}}
JSON_V3 = {**JSON_V2, "properties": {**{k: v for k, v in JSON_V2["properties"].items() if k != "legacy"},
                                     "added3": {"type": "string"}}}


def json_record(i: int, version: int) -> dict:
    r = {"id": i, "name": f"j{i}", "price": i / 4, "ok": bool(i % 2), "at": f"2024-05-01T00:00:0{i % 10}Z",
         "tags": ["a"] * (i % 3), "inner": {"a": i}, "note": None if i % 2 else f"n{i}"}
    if version < 3:
        r["legacy"] = f"old{i}"
    if version >= 2:
        r["added2"] = 2 * i
    if version >= 3:
        r["added3"] = f"v3-{i}"
    return r


def json_expected(r: dict) -> dict:
    out = dict(r)
    out["at"] = dt.datetime(2024, 5, 1, 0, 0, r["id"] % 10, tzinfo=UTC)
    for column in ("legacy", "added2", "added3"):
        out.setdefault(column, None)
    return out


# ------------------------------------------------------------------------------------------ test

class Produced:
    """Every acknowledged record: offset -> (expected typed columns, schema version)."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.rows: dict[int, tuple[dict, int]] = {}
        self.raw = Producer({"bootstrap.servers": bootstrap})
        self.bootstrap = bootstrap

    def send(self, serializer, values: list, expected: list, version: int, key_serializer=None) -> None:
        conf = {"bootstrap.servers": self.bootstrap, "value.serializer": serializer}
        if key_serializer is not None:
            conf["key.serializer"] = key_serializer
        producer = SerializingProducer(conf)
        for value, want in zip(values, expected):
            def delivered(err, msg, want=want):
                assert err is None, err
                self.rows[msg.offset()] = (want, version)
            key = None
            if key_serializer is not None:  # an Avro record key: key_decoded
                key = {"k": want["id"]}
                want["key_decoded"] = key
            producer.produce(self.topic, key=key, value=value, on_delivery=delivered)
        assert producer.flush(30) == 0
        del producer  # no client left polling the broker after the session's broker stops

    def send_raw(self, values: list[bytes]) -> list[int]:
        offsets = []
        for value in values:
            self.raw.produce(self.topic, value=value, on_delivery=lambda err, msg: offsets.append(msg.offset()))
        assert self.raw.flush(30) == 0
        return sorted(offsets)


def _serializer(kind: str, client, schema):
    conf = {"auto.register.schemas": True}
    if kind == "avro":
        return AvroSerializer(client, json.dumps(schema), conf=conf)
    if kind == "json":
        return JSONSerializer(json.dumps(schema), client, conf=conf)
    return ProtobufSerializer(schema, client, {**conf, "use.deprecated.format": False})


def _produce_version(out: Produced, kind: str, client, version: int, ids: range) -> None:
    if kind == "avro":
        schema = {1: AVRO_V1, 2: AVRO_V2, 3: AVRO_V3}[version]
        records = [avro_record(i, version) for i in ids]
        out.send(_serializer(kind, client, schema), records, [avro_expected(r) for r in records], version,
                 key_serializer=AvroSerializer(client, json.dumps(AVRO_KEY)))
    elif kind == "json":
        schema = {1: JSON_V1, 2: JSON_V2, 3: JSON_V3}[version]
        records = [json_record(i, version) for i in ids]
        out.send(_serializer(kind, client, schema), records, [json_expected(r) for r in records], version)
    else:
        cls = proto_class({1: PROTO_V1, 2: PROTO_V2, 3: PROTO_V3}[version])
        messages = [proto_message(cls, i, version) for i in ids]
        out.send(_serializer(kind, client, cls), messages, [proto_expected(m, version) for m in messages], version)


KINDS = ("avro", "protobuf", "json")


def test_typed_tables_across_three_versions(registry_broker, spark, tmp_path):
    proc, http = registry_broker
    client = SchemaRegistryClient({"url": http.url})
    suffix = uuid.uuid4().hex[:6]
    topics = {kind: f"typed-{kind}-{suffix}" for kind in KINDS}
    for topic in topics.values():  # versions 3 and 4 below are checked by the lake, not the registry
        http.ok("PUT", f"/config/{topic}-value", {"compatibility": "NONE"})
    produced = {kind: Produced(proc.bootstrap, topic) for kind, topic in topics.items()}
    for kind in KINDS:
        _produce_version(produced[kind], kind, client, 1, range(0, 4))
        _produce_version(produced[kind], kind, client, 2, range(4, 7))

    options = IngestOptions(topics=tuple(topics.values()), root=proc.data, bootstrap="none")
    first = ingest(spark, options)
    assert first.records == 21

    for kind in KINDS:
        _produce_version(produced[kind], kind, client, 3, range(7, 10))
    # Avro: an incompatible version 4 (a field changes type); bad wire-format records everywhere.
    v4 = _serializer("avro", client, AVRO_V4)
    avro_v4_rows = []
    producer = SerializingProducer({"bootstrap.servers": proc.bootstrap, "value.serializer": v4})
    rec = avro_record(10, 3)
    rec["name"] = 12345
    producer.produce(topics["avro"], value=rec, on_delivery=lambda err, msg: avro_v4_rows.append(msg.offset()))
    assert producer.flush(30) == 0
    del producer
    v1_id = client.get_version(f"{topics['avro']}-value", 1).schema_id
    bad = {kind: produced[kind].send_raw([
        b"\x00" + struct.pack(">I", 999_999) + b"\x02",  # an unknown schema id
        b"\x00\x00",  # truncated: shorter than the prefix
        b"\x00" + struct.pack(">I", v1_id) + b"\x02\x04",  # a corrupt payload (Avro v1: truncated)
        b'{"plain": "json"}',  # not in the wire format
    ]) for kind in KINDS}
    proto_id = client.get_version(f"{topics['protobuf']}-value", 1).schema_id
    part_row, = produced["protobuf"].send_raw([b"\x00" + struct.pack(">I", proto_id) + b"\x00\x0a\x01x"])  # a Part
    for out in produced.values():
        del out.raw
    second = ingest(spark, options)
    assert second.records == 3 * 3  # the good ones; the bad ones went to quarantine, and the run went on
    assert sum(p.quarantined for t in second.tables for p in t.partitions) == 1 + 3 * 4 + 1

    # A backfill rewrites typed rows with the same typed values (the checks below run after it).
    redone = backfill(spark, BackfillOptions(root=proc.data, table=topics["avro"], topic=topics["avro"], partition=0,
                                             from_offset=2, to_offset=9))
    assert redone.records == 7

    for kind, topic in topics.items():
        uri = proc.data / "tables" / topic
        table, data = read_table(uri)
        rows = {r["offset"]: r for r in data.to_pylist()}
        assert set(rows) == set(produced[kind].rows), kind
        for offset, (want, version) in produced[kind].rows.items():
            got = rows[offset]
            assert got["value_schema_id"] is not None
            assert (got.get("key_schema_id") is not None) == (kind == "avro")
            if "extra" in want:
                got = {**got, "extra": dict(got["extra"]["fields"])}
            for column, value in want.items():
                assert got[column] == value, (kind, offset, column, got[column], value)
        # The schema id per row: one id per version, in order.
        ids = {v: {rows[o]["value_schema_id"] for o, (_, ver) in produced[kind].rows.items() if ver == v}
               for v in (1, 2, 3)}
        assert all(len(s) == 1 for s in ids.values()) and ids[1] != ids[2] != ids[3], ids
        # Evolution: version 3's columns were added by the second ingest's commit (one commit).
        history = table.history()
        assert len(history) == (3 if kind == "avro" else 2), history
        names = [f.name for f in table.schema().fields]
        assert names.index("legacy") < names.index("added2") < names.index("added3")

        _, quarantined = read_table(quarantine_uri(str(uri)))
        reasons = {r["offset"]: r["error"] for r in quarantined.to_pylist()}
        assert all(r["topic"] == topic and r["partition"] == 0 for r in quarantined.to_pylist())
        unknown, short, corrupt, plain = bad[kind]
        assert "unknown schema id 999999" in reasons[unknown]
        assert "truncated: shorter than the 5-byte wire-format prefix" in reasons[short]
        assert "magic byte 0x7b" in reasons[plain]
        if kind == "avro":
            assert "corrupt Avro payload: truncated" in reasons[corrupt], reasons[corrupt]
            assert "incompatible with the table: column name is string in the table, int64" in reasons[avro_v4_rows[0]]
            assert len(reasons) == 5
        else:  # another topic's schema id: not this topic's subjects
            assert "is not registered under topic" in reasons[corrupt], reasons[corrupt]
            assert len(reasons) == 4 + (kind == "protobuf")
        if kind == "protobuf":  # message index [0]: the file's Part, not the table's Order
            assert reasons[part_row].endswith("the record is a shop.Part, the table's columns come from shop.Order")

    # Spark SQL sees the typed columns (nested ones too).
    tables = discover_tables(StorageLayout(proc.data))
    result = run_sql(spark, f"SELECT id, inner.c AS c, added3, value_offset, legacy FROM `{topics['avro']}` "
                            "WHERE id IN (1, 8) ORDER BY id", tables)
    assert result.to_pylist() == [{"id": 1, "c": None, "added3": None, "value_offset": -1, "legacy": "old1"},
                                  {"id": 8, "c": "c8", "added3": "v3-8", "value_offset": -8, "legacy": None}]


def test_ingest_reads_an_external_registry_as_it_replays_schemas(registry_broker):
    """`[registry] url`: the REST API gives the lake the same subjects, versions and ids as the
    `_schemas` segment files."""
    from topiclake.lake.typed.hooks import RegistrySource
    from topiclake.lake.typed.plan import load_registry, plan_typed

    proc, http = registry_broker
    topic = f"rest-{uuid.uuid4().hex[:6]}"
    for version in (AVRO_V1, AVRO_V2):
        http.ok("POST", f"/subjects/{topic}-value/versions", {"schema": json.dumps(version)})
    source = RegistrySource.from_settings({"registry": {"url": http.url, "record_subjects": {topic: "shop.Order"}}})
    assert source.url == http.url and source.record_subjects == {topic: ("shop.Order",)}
    rest, replayed = load_registry(proc.data, source.url), load_registry(proc.data)
    assert [(v.id, v.version) for v in rest.versions(f"{topic}-value")] == \
        [(v.id, v.version) for v in replayed.versions(f"{topic}-value")]
    spec = plan_typed(rest, [topic])
    assert spec.columns.names[:3] == ["value_schema_id", "id", "name"] and spec.columns.names[-1] == "added2"


# ------------------------------------------------------------------------------- type widening

WIDEN_V1 = {"type": "record", "name": "Reading", "namespace": "shop", "fields": [
    {"name": "n", "type": "int"}, {"name": "f", "type": "float"},
    {"name": "inner", "type": {"type": "record", "name": "Part", "fields": [{"name": "a", "type": "int"}]}}]}
WIDEN_V2 = {**WIDEN_V1, "fields": [  # int -> long, float -> double (nested too): Delta widens these
    {"name": "n", "type": "long"}, {"name": "f", "type": "double"},
    {"name": "inner", "type": {"type": "record", "name": "Part", "fields": [{"name": "a", "type": "long"}]}}]}
WIDEN_V3 = {**WIDEN_V2, "fields": [{"name": "n", "type": "double"}] + WIDEN_V2["fields"][1:]}  # long -> double: no


def test_a_version_that_widens_a_field_widens_the_column(registry_broker, spark, tmp_path):
    """A registry version that widens fields (int -> long, float -> double, inside a struct too)
    widens the columns instead of quarantining its records; the table keeps protocol (1, 2), so
    deltalake, DuckDB (through Arrow) and polars read every row. A change Delta cannot widen
    (long -> double) still goes to the quarantine table with the reason."""
    import duckdb
    import polars as pl
    import pyarrow as pa
    from deltalake import DeltaTable

    proc, http = registry_broker
    client = SchemaRegistryClient({"url": http.url})
    topic = f"widen-{uuid.uuid4().hex[:6]}"
    http.ok("PUT", f"/config/{topic}-value", {"compatibility": "NONE"})
    out = Produced(proc.bootstrap, topic)
    v1 = [{"n": i, "f": i + 0.5, "inner": {"a": i}} for i in range(3)]
    out.send(_serializer("avro", client, WIDEN_V1), v1, v1, 1)
    options = IngestOptions(topics=(topic,), root=proc.data, bootstrap="none")
    assert ingest(spark, options).records == 3
    uri = proc.data / "tables" / topic
    assert pa.schema(DeltaTable(str(uri)).schema().to_arrow()).field("n").type == pa.int32()

    big = 2 ** 40
    v2 = [{"n": big + i, "f": 1e300 * i, "inner": {"a": big}} for i in range(3)]
    out.send(_serializer("avro", client, WIDEN_V2), v2, v2, 2)
    bad = Produced(proc.bootstrap, topic)
    bad.send(_serializer("avro", client, WIDEN_V3), [{**v2[0], "n": 1.5}], [None], 3)
    del out.raw, bad.raw
    second = ingest(spark, options)
    assert second.records == 3 and sum(p.quarantined for t in second.tables for p in t.partitions) == 1

    table = DeltaTable(str(uri))
    arrow = pa.schema(table.schema().to_arrow())
    assert (arrow.field("n").type, arrow.field("f").type) == (pa.int64(), pa.float64())
    assert arrow.field("inner").type.field("a").type == pa.int64()
    assert (table.protocol().min_reader_version, table.protocol().min_writer_version) == (1, 2)
    widened = [h for h in table.history() if "type-widening" in (h.get("userMetadata") or "")]
    assert len(widened) == 1 and json.loads(widened[0]["userMetadata"])["columns"] == ["n", "f", "inner"]
    want = sorted((r["n"], r["f"], r["inner"]["a"]) for r in v1 + v2)
    _t, data = read_table(uri)
    assert sorted((r["n"], r["f"], r["inner"]["a"]) for r in data.to_pylist()) == want
    dataset = table.to_pyarrow_dataset()
    assert sorted(duckdb.sql("SELECT n, f, \"inner\".a FROM dataset").fetchall()) == want
    assert sorted(pl.read_delta(str(uri)).select("n", "f", pl.col("inner").struct.field("a")).rows()) == want
    assert sorted((r.n, r.f, r.inner.a) for r in spark.read.format("delta").load(str(uri)).collect()) == want

    _q, quarantined = read_table(quarantine_uri(str(uri)))
    reason, = quarantined["error"].to_pylist()
    assert "column n is int64 in the table, double in this schema (Delta cannot widen int64 to double)" in reason
