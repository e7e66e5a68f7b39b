"""Typed columns decoded from record values (JSON), with a schema declared in conf/.

`conf/schemas/<table>.json` declares the columns a table gets from each JSON value:

    {"format": "json", "fields": {"order_id": "long", "amount": "double", "note": "string",
                                  "paid": "boolean", "placed_at": "timestamp", "day": "date"}}

Decoding is columnar: the values of a task are joined into one newline-delimited buffer and
parsed by Arrow's JSON reader against the declared schema (raw newlines can only be whitespace
in valid JSON, so they are blanked first). When that block fails, each value is parsed alone to
find the bad ones: a record that is not a JSON object of the declared types goes to the
table's quarantine table with the error, and never stops the run. A null value (a tombstone)
gets null typed columns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from ..errors import LakeError
from .schema import DATA_SCHEMA, PARTITION_COLUMNS

TYPES = {
    "string": pa.string(), "long": pa.int64(), "int": pa.int32(), "double": pa.float64(), "float": pa.float32(),
    "boolean": pa.bool_(), "timestamp": pa.timestamp("us", tz="UTC"), "date": pa.date32(),
}
ERROR_COLUMN = "error"
#: The quarantine table keeps the raw record and why it was rejected.
QUARANTINE_SCHEMA = DATA_SCHEMA.append(pa.field(ERROR_COLUMN, pa.string()))


@dataclass(frozen=True, slots=True)
class ValueSchema:
    fields: tuple[tuple[str, str], ...]  # (column, type name) in declaration order

    @property
    def arrow(self) -> pa.Schema:
        return pa.schema([pa.field(name, TYPES[kind]) for name, kind in self.fields])

    def to_json(self) -> str:
        return json.dumps({"format": "json", "fields": dict(self.fields)})

    @classmethod
    def from_json(cls, text: str, *, source: str = "value schema") -> "ValueSchema":
        try:
            obj = json.loads(text)
            if obj.get("format", "json") != "json":
                raise ValueError(f"format {obj['format']!r} (only json is supported)")
            fields = tuple((str(k), str(v)) for k, v in obj["fields"].items())
        except (ValueError, KeyError, AttributeError, TypeError) as exc:
            raise LakeError(f"{source}: bad value schema ({exc})") from None
        reserved = set(DATA_SCHEMA.names) | set(PARTITION_COLUMNS) | {ERROR_COLUMN}
        for name, kind in fields:
            if kind not in TYPES:
                raise LakeError(f"{source}: column {name!r} has unknown type {kind!r}; use one of {sorted(TYPES)}")
            if name in reserved:
                raise LakeError(f"{source}: column {name!r} collides with a built-in column")
        return cls(fields)


def typed_columns_of(table) -> "ValueSchema | None":
    """The typed columns an existing Delta table was created with (None: it has none)."""
    builtin = set(DATA_SCHEMA.names) | set(PARTITION_COLUMNS) | {"key_bucket"}  # keyed.table_kind.KEY_BUCKET
    delta_to_ours = {"integer": "int"}
    fields = tuple((f.name, delta_to_ours.get(f.type.type, f.type.type)) for f in table.schema().fields
                   if f.name not in builtin)
    return ValueSchema(fields) if fields else None


def quarantine_uri(table_uri: str) -> str:
    """The quarantine table sits beside its table: `<table>_quarantine`."""
    return table_uri.rstrip("/") + "_quarantine"


def load_value_schema(schemas_dir: Path | None, table_name: str) -> ValueSchema | None:
    if schemas_dir is None:
        return None
    path = Path(schemas_dir) / f"{table_name}.json"
    if not path.is_file():
        return None
    return ValueSchema.from_json(path.read_text(), source=str(path))


def decode_values(values: pa.ChunkedArray | pa.Array, schema: pa.Schema) -> tuple[pa.Table, pa.Array]:
    """(typed columns, error per record: null where the value decoded), row-aligned with `values`."""
    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    n = len(values)
    present = pc.is_valid(values)
    lines = pc.binary_join_element_wise(
        pc.replace_substring(pc.replace_substring(values, b"\n", b" "), b"\r", b" "),
        pa.scalar(b"", pa.binary()), pa.scalar(b"\n", pa.binary()))
    lines = lines.filter(present)
    parsed = _parse_block(lines, schema)
    if parsed is None:
        return _parse_each(values, schema)
    positions = pc.indices_nonzero(present)  # where each parsed row goes back to
    typed = {}
    for name in schema.names:
        column = pa.nulls(n, schema.field(name).type)
        typed[name] = _scatter(column, positions, parsed.column(name).combine_chunks())
    return pa.table(typed, schema=schema), pa.nulls(n, pa.string())


def _parse_block(lines: pa.Array, schema: pa.Schema) -> pa.Table | None:
    if len(lines) == 0:
        return schema.empty_table()
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)[lines.offset:lines.offset + len(lines) + 1]
    data = lines.buffers()[2].slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    try:
        table = _read(data, schema)
    except pa.ArrowInvalid:
        return None
    return table if table.num_rows == len(lines) else None  # blank values vanish: find them one by one


def _read(data, schema: pa.Schema) -> pa.Table:
    return pj.read_json(pa.BufferReader(data), parse_options=pj.ParseOptions(
        explicit_schema=schema, unexpected_field_behavior="ignore"))


def _parse_each(values: pa.Array, schema: pa.Schema) -> tuple[pa.Table, pa.Array]:
    """The slow path, only for a block with bad values: one parse per value."""
    rows, errors = [], []
    empty = {name: None for name in schema.names}
    for value in values.to_pylist():
        if value is None:
            rows.append(empty)
            errors.append(None)
            continue
        try:
            table = _read(value.replace(b"\n", b" ").replace(b"\r", b" ") + b"\n", schema)
            if table.num_rows != 1:
                raise pa.ArrowInvalid("not one JSON object")
            rows.append(table.to_pylist()[0])
            errors.append(None)
        except pa.ArrowInvalid as exc:
            rows.append(empty)
            errors.append(f"value is not a JSON object of the declared schema: {exc}")
    return pa.Table.from_pylist(rows, schema=schema), pa.array(errors, pa.string())


def _scatter(target: pa.Array, positions: pa.Array, values: pa.Array) -> pa.Array:
    """target with target[positions[i]] = values[i] (positions ascending)."""
    if len(positions) == len(target):
        return values
    mask = np.zeros(len(target), dtype=bool)
    mask[positions.to_numpy()] = True
    return pc.replace_with_mask(target, pa.array(mask), values)
