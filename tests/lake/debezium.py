"""Debezium change events as its MySQL and Postgres connectors write them (the shapes of
Debezium 2.x's documentation: inventory.customers), in JSON with and without Kafka Connect's schema
wrapper and as the Avro records its AvroConverter registers; and the rows they must become."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json

import pyarrow as pa

from topiclake.lake.table.schema import DATA_SCHEMA


UTC = dt.timezone.utc
SERVER, DB, TABLE = "dbserver1", "inventory", "customers"

# ------------------------------------------------------------------------------ Connect (JSON) schemas

_VALUE_FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "string", "optional": False, "field": "first_name"},
    {"type": "string", "optional": True, "field": "email"},
    {"type": "int16", "optional": True, "field": "active"},
    {"type": "float64", "optional": True, "field": "weight"},
    {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
     "parameters": {"scale": "2", "connect.decimal.precision": "10"}, "field": "price"},
    {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1, "field": "birth"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.Timestamp", "version": 1, "field": "created"},
    {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp", "version": 1, "field": "seen"},
    {"type": "bytes", "optional": True, "field": "photo"},
    {"type": "int64", "optional": True, "field": "offset"},  # one of our column names: becomes after_offset
]
_SOURCE_FIELDS = [
    {"type": "string", "optional": False, "field": "version"}, {"type": "string", "optional": False, "field": "connector"},
    {"type": "string", "optional": False, "field": "name"}, {"type": "int64", "optional": False, "field": "ts_ms"},
    {"type": "string", "optional": True, "field": "snapshot"}, {"type": "string", "optional": False, "field": "db"},
    {"type": "string", "optional": True, "field": "table"}, {"type": "int64", "optional": False, "field": "server_id"},
    {"type": "string", "optional": False, "field": "file"}, {"type": "int64", "optional": False, "field": "pos"},
    {"type": "int32", "optional": False, "field": "row"},
]
VALUE_NAME = f"{SERVER}.{DB}.{TABLE}.Value"
ENVELOPE_SCHEMA = {"type": "struct", "optional": False, "name": f"{SERVER}.{DB}.{TABLE}.Envelope", "fields": [
    {"type": "struct", "fields": _VALUE_FIELDS, "optional": True, "name": VALUE_NAME, "field": "before"},
    {"type": "struct", "fields": _VALUE_FIELDS, "optional": True, "name": VALUE_NAME, "field": "after"},
    {"type": "struct", "fields": _SOURCE_FIELDS, "optional": False, "name": "io.debezium.connector.mysql.Source",
     "field": "source"},
    {"type": "string", "optional": False, "field": "op"},
    {"type": "int64", "optional": True, "field": "ts_ms"},
]}
KEY_SCHEMA = {"type": "struct", "optional": False, "name": f"{SERVER}.{DB}.{TABLE}.Key",
              "fields": [{"type": "int32", "optional": False, "field": "id"}]}


def customer(i: int, version: int = 1) -> dict:
    """A row of inventory.customers (the Python values the table must hold)."""
    return {"id": 1000 + i, "first_name": f"Anne{i} ü", "email": None if i % 3 == 0 else f"a{i}@noanswer.org",
            "active": i % 2, "weight": i * 1.5 + version, "price": decimal.Decimal(f"{i * 10 + version}.{i:02d}") * (-1) ** i,
            "birth": dt.date(1990, 1, 1) + dt.timedelta(days=i * 100 - 8000),
            "created": dt.datetime(2024, 5, 1, 12, 0, tzinfo=UTC) + dt.timedelta(milliseconds=i * 1001 + version),
            "seen": dt.datetime(2024, 5, 2, 10, 0, tzinfo=UTC) + dt.timedelta(seconds=i, microseconds=123456),
            "photo": bytes([i % 256, 0, 255, version]), "offset": -i}


def connect_json(row: dict | None) -> dict | None:
    """A row as JsonConverter writes its Connect values."""
    if row is None:
        return None
    unscaled = int(row["price"].scaleb(2))  # BigInteger.toByteArray: the shortest two's complement
    return {**row, "price": base64.b64encode(unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big",
                                                                signed=True)).decode(),
            "birth": (row["birth"] - dt.date(1970, 1, 1)).days,
            "created": int(row["created"].timestamp() * 1000),
            "seen": row["seen"].astimezone(dt.timezone(dt.timedelta(hours=2))).isoformat(),
            "photo": base64.b64encode(row["photo"]).decode()}


def source(pos: int, ts_ms: int = 1_714_564_800_000) -> dict:
    return {"version": "2.5.0.Final", "connector": "mysql", "name": SERVER, "ts_ms": ts_ms, "snapshot": "false",
            "db": DB, "table": TABLE, "server_id": 223344, "file": "mysql-bin.000003", "pos": pos, "row": 0}


def envelope(op: str, before: dict | None, after: dict | None, pos: int) -> dict:
    return {"before": connect_json(before), "after": connect_json(after), "source": source(pos), "op": op,
            "ts_ms": 1_714_564_800_500 + pos}


def json_value(op: str, before: dict | None, after: dict | None, pos: int, *, wrapped: bool = True) -> bytes:
    payload = envelope(op, before, after, pos)
    return json.dumps({"schema": ENVELOPE_SCHEMA, "payload": payload} if wrapped else payload).encode()


def json_key(i: int, *, wrapped: bool = True) -> bytes:
    payload = {"id": 1000 + i}
    return json.dumps({"schema": KEY_SCHEMA, "payload": payload} if wrapped else payload).encode()


def history(*, wrapped: bool = True) -> tuple[list[tuple[bytes, bytes | None]], list[dict]]:
    """A snapshot of rows 1..3, an insert of 4, updates of 2 and 4, a delete of 3 and its tombstone:
    ([(key, value)], the changes each record is, in order: {op, row, deleted})."""
    records, changes = [], []

    def add(op, i, before, after, pos):
        records.append((json_key(i, wrapped=wrapped), json_value(op, before, after, pos, wrapped=wrapped)))
        changes.append({"op": op, "id": 1000 + i, "row": after, "pos": pos})

    for i in (1, 2, 3):
        add("r", i, None, customer(i), 100 + i)
    add("c", 4, None, customer(4), 200)
    add("u", 2, customer(2), customer(2, version=2), 210)
    add("u", 4, customer(4), customer(4, version=3), 220)
    add("d", 3, customer(3), None, 230)
    records.append((json_key(3, wrapped=wrapped), None))  # the tombstone after the delete
    changes.append({"op": None, "id": 1003, "row": None, "pos": None})
    return records, changes


def records_table(records: list[tuple[bytes | None, bytes | None]], *, topic: str = "dbz.customers",
                  partition: int = 0, first_offset: int = 0) -> pa.Table:
    """The records as a task's rows (lake.table.schema.DATA_SCHEMA)."""
    n = len(records)
    columns = {name: pa.nulls(n, DATA_SCHEMA.field(name).type) for name in DATA_SCHEMA.names}
    columns.update(topic=pa.array([topic] * n), partition=pa.array([partition] * n, pa.int32()),
                   offset=pa.array(range(first_offset, first_offset + n), pa.int64()),
                   timestamp=pa.array([1_714_564_800_000_000 + i for i in range(n)], DATA_SCHEMA.field("timestamp").type),
                   key=pa.array([k for k, _ in records], pa.binary()), value=pa.array([v for _, v in records], pa.binary()))
    return pa.table(columns, schema=DATA_SCHEMA)


def expected_rows(changes: list[dict]) -> list[dict]:
    """The after columns each change must give (the key column set for deletes too)."""
    out = []
    for change in changes:
        row = {name: None for name in customer(0)}
        if change["row"] is not None:
            row.update(change["row"])
        row["id"] = change["id"]
        row["after_offset"] = row.pop("offset")
        out.append(row)
    return out


# ------------------------------------------------------------------------------------ Avro schemas

AVRO_VALUE = {"type": "record", "name": "Value", "namespace": f"{SERVER}.{DB}.{TABLE}", "fields": [
    {"name": "id", "type": "int"},
    {"name": "first_name", "type": "string"},
    {"name": "email", "type": ["null", "string"], "default": None},
    {"name": "active", "type": ["null", {"type": "int", "connect.type": "int16"}], "default": None},
    {"name": "weight", "type": ["null", "double"], "default": None},
    {"name": "price", "type": ["null", {"type": "bytes", "scale": 2, "precision": 10, "connect.version": 1,
                                        "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
                                        "connect.name": "org.apache.kafka.connect.data.Decimal",
                                        "logicalType": "decimal"}], "default": None},
    {"name": "birth", "type": ["null", {"type": "int", "connect.version": 1, "connect.name": "io.debezium.time.Date"}],
     "default": None},
    {"name": "created", "type": ["null", {"type": "long", "connect.version": 1,
                                          "connect.name": "io.debezium.time.Timestamp"}], "default": None},
    {"name": "seen", "type": ["null", {"type": "string", "connect.version": 1,
                                       "connect.name": "io.debezium.time.ZonedTimestamp"}], "default": None},
    {"name": "photo", "type": ["null", "bytes"], "default": None},
    {"name": "offset", "type": ["null", "long"], "default": None},
], "connect.name": VALUE_NAME}
AVRO_SOURCE = {"type": "record", "name": "Source", "namespace": "io.debezium.connector.mysql", "fields": [
    {"name": "version", "type": "string"}, {"name": "connector", "type": "string"}, {"name": "name", "type": "string"},
    {"name": "ts_ms", "type": "long"},
    {"name": "snapshot", "type": [{"type": "string", "connect.version": 1, "connect.parameters": {
        "allowed": "true,last,false,incremental"}, "connect.default": "false",
        "connect.name": "io.debezium.data.Enum"}, "null"], "default": "false"},
    {"name": "db", "type": "string"}, {"name": "table", "type": ["null", "string"], "default": None},
    {"name": "server_id", "type": "long"}, {"name": "file", "type": "string"}, {"name": "pos", "type": "long"},
    {"name": "row", "type": "int"}], "connect.name": "io.debezium.connector.mysql.Source"}
AVRO_ENVELOPE = {"type": "record", "name": "Envelope", "namespace": f"{SERVER}.{DB}.{TABLE}", "fields": [
    {"name": "before", "type": ["null", AVRO_VALUE], "default": None},
    {"name": "after", "type": ["null", "Value"], "default": None},
    {"name": "source", "type": AVRO_SOURCE},
    {"name": "op", "type": "string"},
    {"name": "ts_ms", "type": ["null", "long"], "default": None},
    {"name": "transaction", "type": ["null", {"type": "record", "name": "block", "namespace": "event", "fields": [
        {"name": "id", "type": "string"}, {"name": "total_order", "type": "long"},
        {"name": "data_collection_order", "type": "long"}], "connect.name": "event.block"}], "default": None},
], "connect.name": f"{SERVER}.{DB}.{TABLE}.Envelope"}
AVRO_KEY = {"type": "record", "name": "Key", "namespace": f"{SERVER}.{DB}.{TABLE}",
            "fields": [{"name": "id", "type": "int"}], "connect.name": f"{SERVER}.{DB}.{TABLE}.Key"}


def avro_row(row: dict | None) -> dict | None:
    """A row as AvroConverter writes its Connect values (fastavro encodes the decimal)."""
    if row is None:
        return None
    connect = connect_json(row)
    return {**row, "birth": connect["birth"], "created": connect["created"], "seen": connect["seen"]}


def avro_envelope(op: str, before: dict | None, after: dict | None, pos: int) -> dict:
    return {"before": avro_row(before), "after": avro_row(after), "source": source(pos), "op": op,
            "ts_ms": 1_714_564_800_500 + pos, "transaction": None}


def avro_history() -> tuple[list[tuple[dict, dict | None]], list[dict]]:
    """history() as Avro datums: ([(key datum, envelope datum or None)], changes)."""
    records, changes = [], []
    for (key, value), change in zip(*history()):
        i = json.loads(key)["payload"]["id"] - 1000
        if value is None:
            records.append(({"id": 1000 + i}, None))
        else:
            payload = json.loads(value)["payload"]
            before = customer(i) if payload["before"] is not None else None
            after = _row_of(payload["after"], i)
            records.append(({"id": 1000 + i}, avro_envelope(payload["op"], before, after, payload["source"]["pos"])))
        changes.append(change)
    return records, changes


def _row_of(connect: dict | None, i: int) -> dict | None:
    if connect is None:
        return None
    version = round(connect["weight"] - i * 1.5)
    return customer(i, version=version)


AFTER_COLUMNS = ["id", "first_name", "email", "active", "weight", "price", "birth", "created", "seen", "photo",
                 "after_offset"]


def assert_changes(changes, expected: list[dict], *, offsets: list[int] | None = None):
    rows = changes.rows.to_pylist()
    assert changes.key_columns == ("id",)
    assert [{c: r[c] for c in AFTER_COLUMNS} for r in rows] == expected_rows(expected)
    assert [r["cdc_op"] for r in rows] == [c["op"] for c in expected]
    assert changes.deleted.to_pylist() == [c["op"] in ("d", None) for c in expected]
    assert [r["cdc_pos"] for r in rows] == [c["pos"] for c in expected]
    assert [r["offset"] for r in rows] == (offsets if offsets is not None else list(range(len(expected))))
