"""One registered schema as the executors need it (a Recipe: small, picklable), and the decoder
each executor builds from it once per process.

- AVRO: the schema's JSON and its references' -> the native Avro kernel (avro.py).
- PROTOBUF: the FileDescriptorProtos (the schema's file and every import, dependencies first)
  -> ptars (Rust: Protobuf bytes straight into Arrow builders, no message objects). Well-known
  types: Timestamp -> timestamp[us, UTC]; Duration -> int64 microseconds (Delta has no interval
  type); wrappers (StringValue, Int64Value, ...) -> the nullable primitive; enums -> the symbol;
  Struct -> map<string, struct<null_value, number_value, string_value, bool_value,
  struct_value, list_value>> and Any -> struct<type_url, value> (a nested Struct or ListValue
  stays as its serialized bytes), as ptars decodes them.
- JSON: the JSON Schema's declared types -> an Arrow struct, parsed by Arrow's JSON reader
  (table/values.py's columnar path): string (format date-time -> timestamp[us, UTC], date -> date32),
  integer -> int64, number -> double, boolean, object -> struct, array -> list; a union with
  null is the other type; properties with no single declared type are not columns.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .columns import nullable
from .wire import strip

AVRO, PROTOBUF, JSON = "AVRO", "PROTOBUF", "JSON"


@dataclass(frozen=True)
class Recipe:
    schema_id: int
    schema_type: str
    label: str  # "orders-value version 2 (id 7)": for quarantine reasons
    schema: str | None = None  # AVRO: the schema's JSON text
    dependencies: tuple[str, ...] = ()  # AVRO: referenced schemas' JSON texts, dependencies first
    files: tuple[bytes, ...] = ()  # PROTOBUF: serialized FileDescriptorProtos, dependencies first
    messages: tuple[tuple[tuple[int, ...], str], ...] = ()  # PROTOBUF: (message index path, full name)
    message: str | None = None  # PROTOBUF: the message the table's columns come from
    arrow_type: pa.DataType | None = None  # what `decode` returns (before conforming to the table)
    error: str | None = None  # set: every row written with this schema goes to quarantine, with this

    def describe(self) -> str:
        return self.label


class Decoder:
    """decode(values, skip) -> (rows that decoded, bool mask over values, [(row, reason)])."""

    arrow_type: pa.DataType

    def decode(self, values: pa.Array, skip: int):  # pragma: no cover - interface
        raise NotImplementedError


class AvroRecipeDecoder(Decoder):
    def __init__(self, recipe: Recipe):
        import json

        import fastavro

        from .avro import AvroDecoder

        named: dict = {}
        for dep in recipe.dependencies:
            fastavro.parse_schema(json.loads(dep), named_schemas=named, _write_hint=False)
        parsed = fastavro.parse_schema(json.loads(recipe.schema), named_schemas=named, _write_hint=False)
        self.avro = AvroDecoder(parsed, named)
        self.arrow_type = self.avro.arrow_type

    def decode(self, values: pa.Array, skip: int):
        return self.avro.decode(values, skip)


class ProtobufRecipeDecoder(Decoder):
    """One message type of the schema's file (the index path of the rows being decoded)."""

    def __init__(self, recipe: Recipe, message: str):
        from ptars import PtarsConfig
        from ptars._lib import ProtoRegistry

        config = PtarsConfig(timestamp_unit="us", duration_unit="us", enum_repr="string", list_nullable=True,
                             map_nullable=True, list_value_nullable=True, map_value_nullable=True)
        self.handler = ProtoRegistry(list(recipe.files)).create_for_message(message, config)
        self.arrow_type = _protobuf_type(pa.struct(list(self.handler.schema())))

    def decode(self, values: pa.Array, skip: int):
        payloads = strip(values, skip)
        try:
            batch = self.handler.array_to_record_batch(payloads)
        except ValueError:
            return self._decode_each(payloads)
        return self._struct(batch), np.ones(len(values), dtype=bool), []

    def _decode_each(self, payloads: pa.Array):
        """Only for a group holding a bad payload: one call per value finds which."""
        parts, mask, failures = [], np.zeros(len(payloads), dtype=bool), []
        for i in range(len(payloads)):
            try:
                parts.append(self._struct(self.handler.array_to_record_batch(payloads.slice(i, 1))))
                mask[i] = True
            except ValueError as exc:
                failures.append((i, f"corrupt Protobuf payload: {exc}"))
        return (pa.concat_arrays(parts) if parts else pa.array([], self.arrow_type)), mask, failures

    def _struct(self, batch: pa.RecordBatch) -> pa.Array:
        struct = pa.StructArray.from_arrays(batch.columns, fields=list(batch.schema))
        return _protobuf_array(struct, self.arrow_type)


class JsonRecipeDecoder(Decoder):
    def __init__(self, recipe: Recipe):
        self.arrow_type = recipe.arrow_type

    def decode(self, values: pa.Array, skip: int):
        from ..table.values import decode_values

        payloads = strip(values, skip)
        schema = pa.schema(list(self.arrow_type))
        typed, errors = decode_values(payloads, schema)
        ok = pc.is_null(errors).to_numpy(zero_copy_only=False)
        failures = [(int(i), f"JSON payload does not fit its schema: {errors[int(i)].as_py()}")
                    for i in np.flatnonzero(~ok)]
        struct = pa.StructArray.from_arrays([typed.column(n).combine_chunks() for n in schema.names],
                                            fields=list(schema))
        return struct.filter(pa.array(ok)), ok, failures


@functools.lru_cache(maxsize=512)
def decoder_for(recipe: Recipe, message: str | None = None) -> Decoder:
    """Built once per executor process and schema (the recipes are small and hashable)."""
    if recipe.schema_type == AVRO:
        return AvroRecipeDecoder(recipe)
    if recipe.schema_type == PROTOBUF:
        return ProtobufRecipeDecoder(recipe, message or recipe.message)
    return JsonRecipeDecoder(recipe)


# -- Protobuf well-known types: what Delta can hold ----------------------------------------------

def _protobuf_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_duration(t):
        return pa.int64()
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _protobuf_type(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(_protobuf_type(t.value_type))
    if pa.types.is_map(t):
        return pa.map_(t.key_type, _protobuf_type(t.item_type))
    return nullable(t)


def _protobuf_array(array: pa.Array, target: pa.DataType) -> pa.Array:
    if array.type.equals(target):
        return array
    if pa.types.is_duration(array.type):
        return array.cast(pa.int64())
    if pa.types.is_struct(target):
        children = [_protobuf_array(array.field(f.name), f.type) for f in target]
        return pa.StructArray.from_arrays(children, fields=list(target),
                                          mask=pc.is_null(array) if array.null_count else None)
    if pa.types.is_list(target):
        return pa.ListArray.from_arrays(array.offsets, _protobuf_array(array.values, target.value_type), type=target,
                                        mask=pc.is_null(array) if array.null_count else None)
    if pa.types.is_map(target):
        return pa.MapArray.from_arrays(array.offsets, array.keys, _protobuf_array(array.items, target.item_type),
                                       type=target, mask=pc.is_null(array) if array.null_count else None)
    return array.cast(target)


# -- JSON Schema -> Arrow ------------------------------------------------------------------------

def json_schema_type(schema: Any, root: Any = None, depth: int = 0) -> pa.DataType | None:
    """The Arrow type of a JSON Schema's declared type; None when it has no single one."""
    root = schema if root is None else root
    if depth > 32 or not isinstance(schema, dict):
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = _local_ref(root, ref)
        return None if target is None else json_schema_type(target, root, depth + 1)
    for combinator in ("oneOf", "anyOf"):
        options = schema.get(combinator)
        if isinstance(options, list):
            typed = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
            return json_schema_type(typed[0], root, depth + 1) if len(typed) == 1 else None
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind == "object" or (kind is None and isinstance(schema.get("properties"), dict)):
        fields = []
        for name, sub in (schema.get("properties") or {}).items():
            t = json_schema_type(sub, root, depth + 1)
            if t is not None:
                fields.append(pa.field(name, t))
        return pa.struct(fields)
    if kind == "array":
        item = json_schema_type(schema.get("items"), root, depth + 1)
        return None if item is None else pa.list_(item)
    if kind == "string":
        fmt = schema.get("format")
        return pa.timestamp("us", tz="UTC") if fmt == "date-time" else pa.date32() if fmt == "date" else pa.string()
    return {"integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_()}.get(kind)


def _local_ref(root: Any, ref: str) -> Any:
    if not ref.startswith("#"):
        return None
    node = root
    for part in ref.lstrip("#").strip("/").split("/"):
        if not part:
            continue
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node
