"""The executors' row decoding over a registry replayed in memory: columns planned from the
subjects' versions, values grouped by schema id, the reasons rows go to quarantine, and a table
fed by a topic with subjects and one without."""

from __future__ import annotations

import io
import json
import struct

import fastavro
import pyarrow as pa

from topiclake.lake.table.schema import DATA_SCHEMA
from topiclake.lake.typed.plan import plan_typed
from topiclake.lake.typed.rows import decode_rows
from topiclake.registry.records import SchemaValue, schema_record
from topiclake.registry.state import RegistryState

V1 = {"type": "record", "name": "Order", "namespace": "a", "fields": [
    {"name": "id", "type": "int"}, {"name": "offset", "type": "string"}]}
V2 = {**V1, "fields": [{"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": None}]}
V3 = {**V1, "fields": [{"name": "id", "type": "string"}]}  # registered with compatibility NONE
ITEM = {"type": "object", "properties": {"n": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}}}


def registry() -> RegistryState:
    state = RegistryState()
    for i, (subject, schema, kind) in enumerate([("orders-value", V1, "AVRO"), ("orders-value", V2, "AVRO"),
                                                 ("items-value", ITEM, "JSON")], start=1):
        version = len(state.versions(subject)) + 1
        state.replay(schema_record(SchemaValue(subject, version, i, json.dumps(schema), kind)))
    return state


def avro(schema_id: int, schema: dict, datum: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum)
    return b"\x00" + struct.pack(">I", schema_id) + out.getvalue()


def rows(values: list) -> pa.Table:
    n = len(values)
    columns = {name: pa.nulls(n, DATA_SCHEMA.field(name).type) for name in DATA_SCHEMA.names}
    columns["offset"] = pa.array(range(n), pa.int64())
    columns["value"] = pa.array(values, pa.binary())
    return pa.table(columns, schema=DATA_SCHEMA)


def test_columns_merge_versions_and_widen_while_new():
    spec = plan_typed(registry(), ["orders"])
    assert spec.columns == pa.schema([("value_schema_id", pa.int32()), ("id", pa.int64()),
                                      ("value_offset", pa.string()), ("note", pa.string())])
    # Once the table holds `id` as int, a long id widens it (Delta's type widening allows int -> long)
    existing = pa.schema(list(DATA_SCHEMA) + [("value_schema_id", pa.int32()), ("id", pa.int32()),
                                              ("value_offset", pa.string())])
    widened = plan_typed(registry(), ["orders"], existing=existing)
    assert widened.columns.field("id").type == pa.int64()
    assert [r.error for r in widened.sides[0].recipes.values()] == [None, None]
    # ... but no other change: a table holding it as a string keeps both versions out
    existing = pa.schema(list(existing)[:-2] + [("id", pa.string()), ("value_offset", pa.string())])
    fixed = plan_typed(registry(), ["orders"], existing=existing)
    assert "column id is string in the table, int32 in this schema (Delta cannot widen string to int32)" in \
        fixed.sides[0].recipes[1].error


def test_rows_by_schema_id_and_the_reasons_for_quarantine():
    state = registry()
    spec = plan_typed(state, ["orders", "plain"])
    values = [avro(1, V1, {"id": 1, "offset": "o1"}), avro(2, V2, {"id": 2 ** 40, "note": "n"}), None,
              b"\x00\x00\x00\x00\x03{}", b"\x00\x00\x00\x00\x02\x80", b"\x01xxxx", b"\x00\x00\x00"]
    good, bad = decode_rows(spec, rows(values), "orders")
    assert good.select(["offset", "value_schema_id", "id", "value_offset", "note"]).to_pylist() == [
        {"offset": 0, "value_schema_id": 1, "id": 1, "value_offset": "o1", "note": None},
        {"offset": 1, "value_schema_id": 2, "id": 2 ** 40, "value_offset": None, "note": "n"},
        {"offset": 2, "value_schema_id": None, "id": None, "value_offset": None, "note": None}]
    assert dict(zip(bad.column("offset").to_pylist(), bad.column("error").to_pylist())) == {
        3: "value: schema id 3 is not registered under topic orders's subjects (orders-value)",
        4: "value: schema id 2 (orders-value version 2): corrupt Avro payload: truncated: a varint runs past the "
           "end of the value",
        5: "value: not in the schema registry's wire format (magic byte 0x01, expected 0x00)",
        6: "value: truncated: shorter than the 5-byte wire-format prefix"}
    # A topic of the same table without subjects keeps its plain values, typed columns null.
    good, bad = decode_rows(spec, rows([b"plain text", None]), "plain")
    assert bad.num_rows == 0 and good.column("id").null_count == 2 and good.column("value")[0].as_py() == b"plain text"


def test_json_schema_values():
    spec = plan_typed(registry(), ["items"])
    values = [b"\x00\x00\x00\x00\x03" + json.dumps({"n": 5, "tags": ["x"], "extra": 1}).encode(),
              b"\x00\x00\x00\x00\x03" + b'{"n": "five"}']
    good, bad = decode_rows(spec, rows(values), "items")
    assert good.select(["n", "tags"]).to_pylist() == [{"n": 5, "tags": ["x"]}]
    assert bad.column("error")[0].as_py().startswith("value: schema id 3 (items-value version 1): JSON payload "
                                                     "does not fit its schema")


def test_a_value_that_is_not_a_record_is_one_column_and_keys_have_theirs():
    state = RegistryState()
    state.replay(schema_record(SchemaValue("s-value", 1, 7, '"string"')))
    state.replay(schema_record(SchemaValue("s-key", 1, 8, json.dumps(V1))))
    spec = plan_typed(state, ["s"])
    assert spec.columns.names == ["value_schema_id", "value_decoded", "key_schema_id", "key_decoded"]
    table = rows([b"\x00\x00\x00\x00\x07\x06abc"]).set_column(
        DATA_SCHEMA.get_field_index("key"), DATA_SCHEMA.field("key"), pa.array([avro(8, V1, {"id": 3, "offset": "x"})]))
    good, bad = decode_rows(spec, table, "s")
    assert bad.num_rows == 0
    assert good.select(["value_decoded", "key_schema_id", "key_decoded"]).to_pylist() == [
        {"value_decoded": "abc", "key_schema_id": 8, "key_decoded": {"id": 3, "offset": "x"}}]
