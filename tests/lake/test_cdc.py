"""Debezium change events -> the changes they describe (extract.extract, format debezium), over
task rows built from real Debezium-shaped events: JSON with Kafka Connect's schema wrapper and
without it, and Avro framed with a registered schema (decoded by the typed path first)."""

from __future__ import annotations

import datetime as dt
import io
import json
import pickle
import struct

import fastavro
import pyarrow as pa
import pytest

from topiclake.lake.errors import LakeError
from topiclake.lake.keyed import cdc_types
from topiclake.lake.keyed.cdc_plan import plan_cdc
from topiclake.lake.keyed.changes import DEBEZIUM, ChangeSpec
from topiclake.lake.keyed.extract import extract
from topiclake.lake.table.schema import TIMESTAMP_TYPE
from topiclake.lake.table.values import QUARANTINE_SCHEMA, ValueSchema
from topiclake.lake.typed.plan import plan_typed
from topiclake.lake.typed.rows import decode_rows
from topiclake.registry.records import SchemaValue, schema_record
from topiclake.registry.state import RegistryState

from . import debezium as dbz
from tests.lake.debezium import AFTER_COLUMNS, assert_changes

TOPIC = "dbz.customers"
METADATA = ["topic", "partition", "offset", "timestamp", "cdc_op", "cdc_ts_ms", "cdc_source_ts_ms",
            "cdc_source_table", "cdc_lsn", "cdc_file", "cdc_pos"]


def test_json_with_the_schema_wrapper_gives_connect_typed_columns():
    records, expected = dbz.history()
    rows = dbz.records_table(records)
    spec = plan_cdc([TOPIC], samples=[rows])
    assert spec.format == DEBEZIUM and spec.key_columns == ("id",)
    assert spec.cdc.schema == pa.schema([
        ("id", pa.int32()), ("first_name", pa.string()), ("email", pa.string()), ("active", pa.int16()),
        ("weight", pa.float64()), ("price", pa.decimal128(10, 2)), ("birth", pa.date32()),
        ("created", TIMESTAMP_TYPE), ("seen", TIMESTAMP_TYPE), ("photo", pa.binary()), ("after_offset", pa.int64()),
        ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", TIMESTAMP_TYPE),
        ("cdc_op", pa.string()), ("cdc_ts_ms", pa.int64()), ("cdc_source_ts_ms", pa.int64()),
        ("cdc_source_table", pa.string()), ("cdc_lsn", pa.int64()), ("cdc_file", pa.string()), ("cdc_pos", pa.int64())])
    spec = pickle.loads(pickle.dumps(spec))  # what the executors get
    changes = extract(spec, rows)
    assert changes.rows.schema == spec.cdc.schema
    assert_changes(changes, expected)
    first = changes.rows.to_pylist()[0]
    assert first["cdc_source_table"] == "inventory.customers" and first["cdc_file"] == "mysql-bin.000003"
    assert first["cdc_ts_ms"] == 1_714_564_800_601 and first["cdc_source_ts_ms"] == 1_714_564_800_000
    assert first["cdc_lsn"] is None and first["topic"] == TOPIC and first["partition"] == 0
    assert changes.quarantine.num_rows == 0 and changes.quarantine.schema == QUARANTINE_SCHEMA


def test_json_without_the_wrapper_infers_types_from_the_values():
    records, expected = dbz.history(wrapped=False)
    rows = dbz.records_table(records)
    spec = plan_cdc([TOPIC], samples=[rows])
    types = {f.name: f.type for f in spec.cdc.schema}
    # Connect's encodings stay as sent without a schema: base64 text, epoch numbers, ISO text
    assert [types[c] for c in AFTER_COLUMNS] == [pa.int64(), pa.string(), pa.string(), pa.int64(), pa.float64(),
                                                 pa.string(), pa.int64(), pa.int64(), pa.string(), pa.string(),
                                                 pa.int64()]
    changes = extract(spec, rows)
    assert changes.quarantine.num_rows == 0
    got = changes.rows.to_pylist()
    assert [r["id"] for r in got] == [c["id"] for c in expected]
    assert [r["first_name"] for r in got] == [c["row"]["first_name"] if c["row"] else None for c in expected]
    assert got[4]["created"] == dbz.connect_json(expected[4]["row"])["created"]
    assert changes.deleted.to_pylist() == [False] * 6 + [True, True]


def test_json_without_the_wrapper_takes_the_declared_schema_for_the_fields_it_names():
    records, expected = dbz.history(wrapped=False)
    rows = dbz.records_table(records)
    declared = ValueSchema.from_json(json.dumps({"format": "json", "fields": {
        "created": "timestamp", "birth": "date", "seen": "timestamp", "weight": "float"}}))
    spec = plan_cdc([TOPIC], samples=[rows], value_schema=declared)
    types = {f.name: f.type for f in spec.cdc.schema}
    assert (types["created"], types["birth"], types["seen"], types["weight"]) == (
        TIMESTAMP_TYPE, pa.date32(), TIMESTAMP_TYPE, pa.float32())
    got = extract(spec, rows).rows.to_pylist()
    for row, change in zip(got, expected):
        if change["row"] is not None:
            assert (row["created"], row["birth"], row["seen"]) == (
                change["row"]["created"], change["row"]["birth"], change["row"]["seen"])


def test_records_that_are_not_changes_go_to_quarantine_with_the_reason():
    good_key, good_value = dbz.json_key(5), dbz.json_value("c", None, dbz.customer(5), 300)
    payload = dbz.envelope("c", None, dbz.customer(6), 301)
    bad = [
        (good_key, b"\x00\x00\x00\x00\x01garbage", "value is not JSON"),
        (good_key, b'{"schema": null, "hello": 1}', "not a Debezium change event"),
        (good_key, json.dumps({**payload, "op": "t"}).encode(), "op 't' is not a row change"),
        (good_key, json.dumps({**payload, "op": ["c"]}).encode(), "op ['c'] is not a row change"),
        (good_key, json.dumps({"schema": {}, "payload": [1]}).encode(), "not a Debezium change event"),
        (good_key, json.dumps({**payload, "after": None}).encode(), "op 'c' without an after image"),
        (b"not json", good_value, "key is not JSON"),
        (None, good_value, "no record key"),
        (b'{"other": 1}', good_value, "key has no field id"),
        (good_key, json.dumps({**payload, "after": {**payload["after"], "id": "x"}}).encode(), "after.id is not int32"),
        (good_key, json.dumps({**payload, "after": {**payload["after"], "new_col": 1}}).encode(),
         "after has field(s) new_col"),
    ]
    records = [(good_key, good_value)] + [(k, v) for k, v, _ in bad] + [(dbz.json_key(6), dbz.json_value(
        "u", None, dbz.customer(6), 302))]
    rows = dbz.records_table(records, first_offset=40)
    spec = plan_cdc([TOPIC], samples=[dbz.records_table(dbz.history()[0])])
    changes = extract(spec, rows)
    assert changes.rows.column("offset").to_pylist() == [40, 40 + len(bad) + 1]
    assert changes.rows.column("id").to_pylist() == [1005, 1006]
    quarantine = changes.quarantine
    assert quarantine.schema == QUARANTINE_SCHEMA
    assert quarantine.column("offset").to_pylist() == list(range(41, 41 + len(bad)))
    for error, (_, _, why) in zip(quarantine.column("error").to_pylist(), bad):
        assert why in error, (why, error)
    assert quarantine.column("value").to_pylist() == [v for _, v, _ in bad]


def test_after_fields_named_like_our_columns_are_prefixed_one_to_one():
    assert [cdc_types.column_of(f) for f in ("offset", "topic", "cdc_op", "after_x", "error", "record_date", "x")] \
        == ["after_offset", "after_topic", "after_cdc_op", "after_after_x", "after_error", "after_record_date", "x"]
    assert all(cdc_types.field_of(cdc_types.column_of(f)) == f for f in ("offset", "after_x", "x"))
    payload = {"before": None, "after": {"id": 1, "topic": "t", "cdc_op": "mine", "after_x": 2}, "op": "c",
               "source": {"db": "pg", "schema": "public", "table": "t", "lsn": 24023128, "ts_ms": 5,
                          "pos": "not ours"}, "ts_ms": 6}  # a source field of another type: null, not quarantined
    rows = dbz.records_table([(b'{"id": 1}', json.dumps(payload).encode())])
    changes = extract(plan_cdc([TOPIC], samples=[rows]), rows)
    row = changes.rows.to_pylist()[0]
    assert (row["after_topic"], row["after_cdc_op"], row["after_after_x"], row["topic"], row["cdc_op"]) == (
        "t", "mine", 2, TOPIC, "c")
    assert (row["cdc_source_table"], row["cdc_lsn"], row["cdc_file"], row["cdc_pos"]) == (
        "pg.public.t", 24023128, None, None)


def test_an_existing_table_keeps_its_columns_and_gains_new_ones():
    records, expected = dbz.history()
    rows = dbz.records_table(records)
    existing = pa.schema([("id", pa.int64()), ("gone", pa.string()), ("first_name", pa.string()),
                          ("topic", pa.string()), ("cdc_op", pa.string())])
    spec = plan_cdc([TOPIC], samples=[rows], existing=existing)
    names = spec.cdc.schema.names
    assert names[:3] == ["id", "gone", "first_name"] and "price" in names
    assert spec.cdc.schema.field("id").type == pa.int64()
    got = extract(spec, rows).rows.to_pylist()
    assert [r["gone"] for r in got] == [None] * len(expected)
    assert [r["id"] for r in got] == [c["id"] for c in expected]


def test_no_key_to_plan_from_is_a_clear_error():
    with pytest.raises(LakeError, match="no record key"):
        plan_cdc([TOPIC], samples=[])
    spec = plan_cdc([TOPIC], samples=[], key_fields=["id"])
    assert spec.key_columns == ("id",) and spec.cdc.schema.field("id").type == pa.string()
    assert extract(ChangeSpec(), dbz.records_table([(b"k", None)])).deleted.to_pylist() == [True]  # raw still works


# ---------------------------------------------------------------------------------------- Avro

def registry() -> RegistryState:
    state = RegistryState()
    state.replay(schema_record(SchemaValue(f"{TOPIC}-value", 1, 1, json.dumps(dbz.AVRO_ENVELOPE), "AVRO")))
    state.replay(schema_record(SchemaValue(f"{TOPIC}-key", 1, 2, json.dumps(dbz.AVRO_KEY), "AVRO")))
    return state


def framed(schema_id: int, schema: dict, datum: dict | None) -> bytes | None:
    if datum is None:
        return None
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum)
    return b"\x00" + struct.pack(">I", schema_id) + out.getvalue()


def test_avro_envelopes_through_the_typed_path():
    datums, expected = dbz.avro_history()
    records = [(framed(2, dbz.AVRO_KEY, k), framed(1, dbz.AVRO_ENVELOPE, v)) for k, v in datums]
    records.insert(3, (framed(2, dbz.AVRO_KEY, {"id": 9}), framed(1, dbz.AVRO_ENVELOPE, {
        **dbz.avro_envelope("c", None, None, 1), "op": "c"})))  # c without after: quarantined
    typed = plan_typed(registry(), [TOPIC])
    spec = plan_cdc([TOPIC], typed=typed)
    assert spec.cdc.source == "registry" and spec.key_columns == ("id",)
    assert [spec.cdc.schema.field(c).type for c in ("birth", "created", "seen", "price")] == [
        pa.date32(), TIMESTAMP_TYPE, TIMESTAMP_TYPE, pa.decimal128(10, 2)]
    decoded, typed_quarantine = decode_rows(typed, dbz.records_table(records), TOPIC)
    assert typed_quarantine.num_rows == 0
    changes = extract(pickle.loads(pickle.dumps(spec)), decoded)
    assert changes.rows.schema == spec.cdc.schema
    assert_changes(changes, expected, offsets=[0, 1, 2, 4, 5, 6, 7, 8])
    assert changes.quarantine.column("offset").to_pylist() == [3]
    assert "op 'c' without an after image" in changes.quarantine.column("error")[0].as_py()
    assert changes.rows.column("cdc_source_table")[0].as_py() == "inventory.customers"


def test_avro_value_with_a_json_key_and_a_schema_that_is_not_an_envelope():
    state = RegistryState()
    state.replay(schema_record(SchemaValue(f"{TOPIC}-value", 1, 1, json.dumps(dbz.AVRO_ENVELOPE), "AVRO")))
    typed = plan_typed(state, [TOPIC])
    datums, expected = dbz.avro_history()
    records = [(dbz.json_key(k["id"] - 1000), framed(1, dbz.AVRO_ENVELOPE, v)) for k, v in datums]
    rows = dbz.records_table(records)
    spec = plan_cdc([TOPIC], typed=typed, samples=[rows])
    decoded, _ = decode_rows(typed, rows, TOPIC)
    assert_changes(extract(spec, decoded), expected)
    other = RegistryState()
    other.replay(schema_record(SchemaValue(f"{TOPIC}-value", 1, 1, json.dumps(dbz.AVRO_KEY), "AVRO")))
    with pytest.raises(LakeError, match="not a Debezium envelope"):
        plan_cdc([TOPIC], typed=plan_typed(other, [TOPIC]), samples=[rows])


def test_connect_conversions_at_their_edges():
    column, errors = cdc_types.column([-1, 1, None], TIMESTAMP_TYPE, cdc_types.NANOS)
    assert column.to_pylist() == [dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone.utc),
                                  dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc), None] and not errors
    column, errors = cdc_types.column(["AQ==", 12.5, "not base64!"], pa.decimal128(5, 1), cdc_types.DECIMAL)
    assert column.to_pylist()[:2] == [dbz.decimal.Decimal("0.1"), dbz.decimal.Decimal("12.5")]
    assert list(errors) == [2]
    column, errors = cdc_types.column(["2024-05-01T00:00:00"], TIMESTAMP_TYPE, cdc_types.ZONED)
    assert "no offset" in errors[0]


def test_json_schema_versions_merge_into_the_columns():
    """A later version adds a column and widens another (int32 -> int64): one table holds both."""
    old = {**dbz.ENVELOPE_SCHEMA, "fields": [
        {**f, "fields": [g for g in f["fields"] if g["field"] != "email"]} if f["field"] in ("before", "after") else f
        for f in dbz.ENVELOPE_SCHEMA["fields"]]}
    new = {**dbz.ENVELOPE_SCHEMA, "fields": [
        {**f, "fields": [{**g, "type": "int64"} if g["field"] == "id" else g for g in f["fields"]]}
        if f["field"] in ("before", "after") else f for f in dbz.ENVELOPE_SCHEMA["fields"]]}
    first = dbz.envelope("c", None, dbz.customer(1), 1)
    first["after"].pop("email")
    second = dbz.envelope("u", None, {**dbz.customer(2), "id": 2 ** 40}, 2)
    rows = dbz.records_table([(dbz.json_key(1), json.dumps({"schema": old, "payload": first}).encode()),
                              (b'{"id": 1099511627776}', json.dumps({"schema": new, "payload": second}).encode())])
    spec = plan_cdc([TOPIC], samples=[rows])
    assert spec.cdc.schema.field("id").type == pa.int64() and "email" in spec.cdc.schema.names
    changes = extract(spec, rows)
    assert changes.quarantine.num_rows == 0
    assert changes.rows.column("id").to_pylist() == [1001, 2 ** 40]
    assert changes.rows.column("email").to_pylist() == [None, "a2@noanswer.org"]
