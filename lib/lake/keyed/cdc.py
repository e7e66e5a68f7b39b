"""Executor side of CDC tables: Debezium change events -> the rows they describe (extract.extract
with format "debezium").

An event is Debezium's envelope: `{"before", "after", "source", "op", "ts_ms"}`, as JSON with
Kafka Connect's schema wrapper (`{"schema": ..., "payload": <envelope>}`, JsonConverter with
schemas.enable=true) or without it (the envelope alone), or as registry Avro (the
`<server>.<db>.<table>.Envelope` record, decoded into columns by typed.rows before this runs).

- op c (create), r (snapshot read) and u (update) upsert the `after` image; op d and a tombstone
  (a null value: Debezium writes one after each d, for log compaction) delete the key's row.
- The key is the record key: its fields (the JSON key's payload, or the registry-typed key's
  record) are the primary key, and fill the key columns of every change, deletes included.
- A record that is not such an event goes to quarantine with the reason, and the run goes on:
  a value that is not JSON or has no envelope, an unknown op (t, truncate, and m, message, are not
  row changes), c/u/r without `after`, `after` with a field the table does not have, a value
  that is not of its column's type, a key that is missing or does not parse.

The columns (planned on the driver by cdc_plan.plan_cdc): `after`'s fields, typed
(cdc_types.py), then cdc_types.METADATA (topic, partition, offset, timestamp, cdc_op, cdc_ts_ms,
cdc_source_ts_ms, cdc_source_table, cdc_lsn, cdc_file, cdc_pos).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import cdc_types as types
from .changes import NO_KEY, ChangeSpec, Changes, keyless, quarantined

JSON, REGISTRY = "json", "registry"  # how the events arrive: JSON values, or columns typed.rows decoded
UPSERTS = frozenset("cru")
DELETE = "d"
_SOURCE_FIELDS = {"db": pa.string(), "schema": pa.string(), "table": pa.string(), "ts_ms": pa.int64(),
                  "lsn": pa.int64(), "file": pa.string(), "pos": pa.int64()}
_KEY_STRUCT = "key_decoded"  # the registry-typed key (typed.plan)


class _Envelope(msgspec.Struct):
    """The parts of Debezium's envelope a change needs (`before` is skipped unread)."""

    op: Any = msgspec.UNSET
    after: Any = None
    source: Any = None
    ts_ms: Any = None


class _Event(_Envelope):
    """An envelope alone, or inside Kafka Connect's schema wrapper (whose `schema` is skipped unread)."""

    payload: _Envelope | None | msgspec.UnsetType = msgspec.UNSET


_decode_event = msgspec.json.Decoder(_Event).decode
_decode_json = msgspec.json.Decoder().decode


@dataclass(frozen=True)
class CdcColumn:
    """One column of the table from one field of `after` (and of the key, for a key field)."""

    field: str  # the field's name in `after` / the key
    name: str  # the table column (cdc_types.column_of)
    type: pa.DataType
    conversion: str = types.PLAIN  # cdc_types: how the event's value becomes `type`


@dataclass(frozen=True)
class CdcSpec:
    """What an executor needs to read Debezium events (picklable; ChangeSpec.cdc)."""

    source: str  # JSON or REGISTRY
    columns: tuple[CdcColumn, ...]  # after's columns in table order, the key's among them
    key_fields: tuple[str, ...]  # the record key's fields (the primary key), in key order

    @property
    def schema(self) -> pa.Schema:
        """The rows' columns: after's fields, then the metadata columns."""
        return pa.schema([pa.field(c.name, c.type) for c in self.columns] + list(types.METADATA))

    @property
    def key_columns(self) -> tuple[str, ...]:
        names = {c.field: c.name for c in self.columns}
        return tuple(names[f] for f in self.key_fields)


@dataclass
class _Events:
    """A task's events, row-aligned with its records (null where a row has no such part)."""

    after: dict[str, pa.Array]  # column -> values of after's field
    key: dict[str, pa.Array]  # column -> values of the key's field
    op: pa.Array
    ts_ms: pa.Array
    source: dict[str, pa.Array]  # _SOURCE_FIELDS -> values
    errors: dict[int, str]  # row -> why it is not a change


def debezium_changes(spec: ChangeSpec, rows: pa.Table) -> Changes:
    """The changes the Debezium events in `rows` describe (`rows`: a task's records with the table
    columns, and the typed columns for registry Avro)."""
    cdc = spec.cdc
    if cdc is None:
        raise ValueError("a debezium ChangeSpec needs its CDC plan (cdc_plan.plan_cdc)")
    events = _registry_events(cdc, rows) if cdc.source == REGISTRY else _json_events(cdc, rows)
    keys = set(cdc.key_columns)
    columns = [events.key[c.name] if c.name in keys else events.after[c.name] for c in cdc.columns]
    source = events.source
    columns += [rows.column(name).combine_chunks() for name in ("topic", "partition", "offset", "timestamp")]
    columns += [events.op, events.ts_ms, source["ts_ms"], _source_table(source), source["lsn"], source["file"],
                source["pos"]]
    table = pa.Table.from_arrays([c.cast(f.type) for c, f in zip(columns, cdc.schema)], schema=cdc.schema)
    deleted = pc.fill_null(pc.equal(events.op, DELETE), True)  # a null op is a tombstone
    for i in np.flatnonzero(keyless(table, cdc.key_columns)):  # {"id": null}: no row's key
        events.errors.setdefault(int(i), NO_KEY)
    if events.errors:
        ok = np.ones(rows.num_rows, dtype=bool)
        ok[sorted(events.errors)] = False
        table, deleted = table.filter(pa.array(ok)), deleted.filter(pa.array(ok))
    return Changes(table, deleted, cdc.key_columns, quarantined(rows, events.errors))


# ---------------------------------------------------------------------------------------- JSON

def _json_events(cdc: CdcSpec, rows: pa.Table) -> _Events:
    """One decode per record (msgspec: the envelope's parts a change needs, the schema wrapper and
    `before` skipped unread); the columns are then built and typed column by column."""
    n = rows.num_rows
    values, raw_keys = rows.column("value").to_pylist(), rows.column("key").to_pylist()
    by_field = {c.field: c for c in cdc.columns}
    errors: dict[int, str] = {}
    after = {c.name: [None] * n for c in cdc.columns}
    key = {by_field[f].name: [None] * n for f in cdc.key_fields}
    op, ts_ms = [None] * n, [None] * n
    source = {name: [None] * n for name in _SOURCE_FIELDS}
    for i in range(n):
        fields, why = json_key(raw_keys[i], cdc.key_fields)
        if why is None and values[i] is not None:
            envelope, why = _envelope(values[i])
            why = why or _check(envelope, by_field)
        if why is not None:
            errors[i] = why
            continue
        for f in cdc.key_fields:
            key[by_field[f].name][i] = fields[f]
        if values[i] is None:  # a tombstone: the key is all there is
            continue
        op[i], ts_ms[i] = envelope.op, envelope.ts_ms
        if op[i] in UPSERTS:
            for f, v in envelope.after.items():
                after[by_field[f].name][i] = v
        event_source = envelope.source
        if isinstance(event_source, dict):
            for name in _SOURCE_FIELDS:
                source[name][i] = event_source.get(name)
    typed_after = {c.name: _typed(after[c.name], c.type, c.conversion, f"after.{c.field}", errors)
                   for c in cdc.columns}
    typed_key = {by_field[f].name: _typed(key[by_field[f].name], by_field[f].type, by_field[f].conversion,
                                          f"key.{f}", errors) for f in cdc.key_fields}
    typed_source = {name: _metadata(source[name], t) for name, t in _SOURCE_FIELDS.items()}
    return _Events(typed_after, typed_key, pa.array(op, pa.string()), _metadata(ts_ms, pa.int64()),
                   typed_source, errors)


def json_key(raw: bytes | None, fields: tuple[str, ...]) -> tuple[dict | None, str | None]:
    """(the key's fields, None) or (None, why not): a JSON key, with or without the schema wrapper."""
    if raw is None:
        return None, "no record key (Debezium keys each change by the row's primary key)"
    try:
        key = _decode_json(raw)
    except msgspec.DecodeError as exc:
        return None, f"key is not JSON: {exc}"
    if isinstance(key, dict) and set(key) == {"schema", "payload"}:
        key = key["payload"]
    if not isinstance(key, dict):
        return None, "key is not a JSON object of the primary key's fields"
    missing = [f for f in fields if f not in key]
    if missing:
        return None, f"key has no field {', '.join(missing)} (the table's primary key is {', '.join(fields)})"
    return key, None


def _envelope(raw: bytes) -> tuple[_Envelope | None, str | None]:
    """(the envelope, None) or (None, why the value is not a change event)."""
    try:
        event = _decode_event(raw)
    except msgspec.ValidationError as exc:
        return None, f"value is not a Debezium change event: {exc}"
    except msgspec.DecodeError as exc:
        return None, f"value is not JSON: {exc}"
    envelope = event if event.payload is msgspec.UNSET else event.payload
    if envelope is None or envelope.op is msgspec.UNSET:
        return None, "value is not a Debezium change event (no payload with op, before, after, source)"
    return envelope, None


def _check(envelope: _Envelope, by_field: dict[str, CdcColumn]) -> str | None:
    """Why an envelope is not a change of this table (None: it is)."""
    op = envelope.op
    if op == DELETE:
        return None
    if not isinstance(op, str) or op not in UPSERTS:
        return f"op {op!r} is not a row change (c, r, u, d)"
    after = envelope.after
    if not isinstance(after, dict):
        return f"op {op!r} without an after image"
    unknown = [f for f in after if f not in by_field]
    if unknown:
        return (f"after has field(s) {', '.join(unknown)} that the table's columns do not (a column added "
                "after the run planned them: the next run's plan includes it)")
    return None


def _metadata(values: list, t: pa.DataType) -> pa.Array:
    """A metadata column: a value of another type than ours (another connector's field of the same
    name) is null there; it never sends the change to quarantine."""
    return types.column(values, t, types.TEXT if t == pa.string() else types.PLAIN)[0]


def _typed(values: list, t: pa.DataType, conversion: str, where: str, errors: dict[int, str]) -> pa.Array:
    array, bad = types.column(values, t, conversion)
    for i, why in bad.items():
        errors.setdefault(i, f"{where} is not {t}: {why}")
    return array


# ------------------------------------------------------------------------------------ registry

def _registry_events(cdc: CdcSpec, rows: pa.Table) -> _Events:
    """Registry-typed events, already decoded into columns by typed.rows: before/after/source
    structs, op and ts_ms; the key as the `key_decoded` struct (or a JSON key when the key is not in
    the registry). Debezium's Avro is tested; its Protobuf and JSON Schema converters give the same
    columns through typed.rows."""
    n = rows.num_rows
    errors: dict[int, str] = {}
    names = set(rows.column_names)
    if not {"op", "after"} <= names:
        raise ValueError("registry-typed CDC rows need the envelope's typed columns (op, after): decode them with "
                         "typed.rows.decode_rows first")
    value = rows.column("value").combine_chunks()
    op = rows.column("op").combine_chunks().cast(pa.string())
    after = rows.column("after").combine_chunks()
    is_event = pc.is_valid(value)
    known = pc.fill_null(pc.is_in(op, pa.array(sorted(UPSERTS | {DELETE}))), False)
    upsert = pc.fill_null(pc.is_in(op, pa.array(sorted(UPSERTS))), False)
    for i in _true(pc.and_(is_event, pc.invert(known))):
        errors[i] = f"op {op[i].as_py()!r} is not a row change (c, r, u, d)"
    for i in _true(pc.and_(upsert, pc.is_null(after))):
        errors[i] = f"op {op[i].as_py()!r} without an after image"
    flat = dict(zip([f.name for f in after.type], after.flatten()))  # flatten: a null struct's fields are null
    typed_after = {}
    for c in cdc.columns:
        field = flat.get(c.field)
        typed_after[c.name] = (types.convert_arrow(field, c.type, c.conversion) if field is not None
                               else pa.nulls(n, c.type))
    typed_after = {name: pc.if_else(upsert, array, pa.scalar(None, array.type)) for name, array in typed_after.items()}
    key = _registry_key(cdc, rows, errors)
    source = _struct_fields(rows.column("source").combine_chunks() if "source" in names else None, n)
    ts_ms = rows.column("ts_ms").combine_chunks().cast(pa.int64()) if "ts_ms" in names else pa.nulls(n, pa.int64())
    return _Events(typed_after, key, op, ts_ms, source, errors)


def _registry_key(cdc: CdcSpec, rows: pa.Table, errors: dict[int, str]) -> dict[str, pa.Array]:
    by_field = {c.field: c for c in cdc.columns}
    if _KEY_STRUCT not in rows.column_names:  # a key outside the registry: JSON, as Debezium's JsonConverter writes it
        lists: dict[str, list] = {f: [] for f in cdc.key_fields}
        for i, raw in enumerate(rows.column("key").to_pylist()):
            fields, why = json_key(raw, cdc.key_fields)
            if why is not None:
                errors.setdefault(i, why)
            for f in cdc.key_fields:
                lists[f].append(None if fields is None else fields[f])
        return {by_field[f].name: _typed(lists[f], by_field[f].type, by_field[f].conversion, f"key.{f}", errors)
                for f in cdc.key_fields}
    struct = rows.column(_KEY_STRUCT).combine_chunks()
    for i in _true(pc.is_null(struct)):
        errors.setdefault(i, "no record key (Debezium keys each change by the row's primary key)")
    present = {f.name for f in struct.type} if pa.types.is_struct(struct.type) else set()
    missing = [f for f in cdc.key_fields if f not in present]
    if missing:
        for i in range(rows.num_rows):
            errors.setdefault(i, f"key has no field {', '.join(missing)} (the table's primary key is "
                                 f"{', '.join(cdc.key_fields)})")
        return {by_field[f].name: pa.nulls(rows.num_rows, by_field[f].type) for f in cdc.key_fields}
    flat = dict(zip([f.name for f in struct.type], struct.flatten()))
    return {by_field[f].name: types.convert_arrow(flat[f], by_field[f].type, by_field[f].conversion)
            for f in cdc.key_fields}


def _struct_fields(struct: pa.Array | None, n: int) -> dict[str, pa.Array]:
    """The source fields we keep, from the `source` struct (null where this connector has none)."""
    flat = dict(zip([f.name for f in struct.type], struct.flatten())) if struct is not None else {}
    out = {}
    for name, t in _SOURCE_FIELDS.items():
        try:
            out[name] = flat[name].cast(t) if name in flat else pa.nulls(n, t)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # another connector's field of that name
            out[name] = pa.nulls(n, t)
    return out


def _true(mask: pa.Array) -> list[int]:
    return [int(i) for i in np.flatnonzero(pc.fill_null(mask, False).to_numpy(zero_copy_only=False))]


# ---------------------------------------------------------------------------------------- both

def _source_table(source: dict[str, pa.Array]) -> pa.Array:
    """db.table, or db.schema.table where the source has a schema (Postgres, SQL Server)."""
    dot = pa.scalar(".")
    plain = pc.binary_join_element_wise(source["db"], source["table"], dot)
    schemed = pc.binary_join_element_wise(source["db"], source["schema"], source["table"], dot)
    return pc.if_else(pc.is_valid(source["schema"]), schemed, plain)
