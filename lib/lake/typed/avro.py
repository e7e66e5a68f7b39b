"""Avro datums -> Arrow columns, batch-wise.

One public name with two implementations (the pattern of segments/arrow.py):

- native: the writer schema is compiled once into a program for the C kernel
  (`_native/avro.c`); one call decodes every value written with that schema into Arrow buffers,
  which become arrays without per-record Python objects;
- reference: fastavro decodes each value into Python objects and pyarrow builds the same arrays:
  slow and obviously right (the tests hold the native path to it; executors without the
  compiled kernel, e.g. fed a zip, use it).

Types (Delta has no unsigned, time, interval or fixed types; these are the closest it has):
null -> null; boolean; int -> int32; long -> int64; float; double; bytes -> binary;
string -> string; fixed -> binary; enum -> string (the symbol); record -> struct;
array -> list; map -> map<string, T>; a union of null and one type -> that type, nullable;
any other union -> struct<member0, member1, ...> with the taken branch set (as Spark's Avro
reader does); logical types: decimal (bytes or fixed, precision <= 38) -> decimal128,
date -> date32, timestamp-millis/micros -> timestamp[us, UTC], local-timestamp-millis/micros ->
timestamp[us, UTC] (the wall clock read as UTC), time-millis -> int32 (ms of the day),
time-micros -> int64 (us of the day), uuid -> string, duration -> binary.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import uuid
from array import array
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

try:
    if os.environ.get("TOPICLAKE_NO_EXTENSIONS"):
        raise ImportError("native extensions disabled by TOPICLAKE_NO_EXTENSIONS")
    from ._native import _avro
except ImportError:
    _avro = None  # type: ignore[assignment]  # None: no native kernel, checked before use

HAS_NATIVE = _avro is not None

# Node types of the kernel's program (the enum at the top of _native/avro.c).
(T_NULL, T_BOOLEAN, T_INT, T_LONG, T_FLOAT, T_DOUBLE, T_BYTES, T_STRING, T_FIXED, T_ENUM, T_RECORD,
 T_ARRAY, T_MAP, T_UNION, T_DECIMAL_BYTES, T_DECIMAL_FIXED) = range(16)

_PRIMITIVES = {"null": T_NULL, "boolean": T_BOOLEAN, "int": T_INT, "long": T_LONG, "float": T_FLOAT,
               "double": T_DOUBLE, "bytes": T_BYTES, "string": T_STRING}
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_MAX_DECIMAL128 = 38


class UnsupportedSchema(ValueError):
    """A writer schema this decoder cannot turn into columns (e.g. a recursive record)."""


@dataclass(slots=True)
class _Node:
    kind: int
    param: int = 0
    children: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # record field names
    logical: str | None = None
    symbols: list[str] = field(default_factory=list)
    precision: int = 0
    scale: int = 0


class AvroDecoder:
    """Decodes values written with one Avro schema (fastavro's parsed form plus its named types)."""

    def __init__(self, parsed, named: dict | None = None):
        self.parsed = parsed
        self._named = dict(named or {})
        self.nodes: list[_Node] = []
        self._compile(parsed, (), "")
        self.program = _program(self.nodes)
        self.arrow_type = self._type(0)

    # -------------------------------------------------------------- compile
    def _compile(self, schema, stack: tuple[str, ...], namespace: str) -> int:
        index = len(self.nodes)
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                self.nodes.append(_Node(_PRIMITIVES[schema]))
                return index
            name = schema if "." in schema or not namespace else f"{namespace}.{schema}"
            definition = self._named.get(name, self._named.get(schema))
            if definition is None:
                raise UnsupportedSchema(f"unknown named type {schema!r}")
            if name in stack or schema in stack:
                raise UnsupportedSchema(f"recursive type {schema!r} cannot become columns")
            return self._compile(definition, stack, namespace)
        if isinstance(schema, list):
            node = _Node(T_UNION)
            self.nodes.append(node)
            node.children = [self._compile(branch, stack, namespace) for branch in schema]
            return index
        if not isinstance(schema, dict):
            raise UnsupportedSchema(f"not an Avro schema: {schema!r}")
        kind = schema.get("type")
        logical = schema.get("logicalType")
        if isinstance(kind, (dict, list)):
            return self._compile(kind, stack, namespace)
        if kind in _PRIMITIVES:
            node = _Node(_PRIMITIVES[kind], logical=logical)
            if logical == "decimal" and kind == "bytes" and _decimal_fits(schema):
                node.kind = T_DECIMAL_BYTES
                node.precision, node.scale = int(schema["precision"]), int(schema.get("scale", 0))
            self.nodes.append(node)
            return index
        full = schema.get("name")
        if full is not None and "." not in full and schema.get("namespace"):
            full = f"{schema['namespace']}.{full}"
        if full is not None:
            self._named.setdefault(full, schema)  # defined here, referenced by name later
        if kind == "record" or kind == "error":
            if full in stack:
                raise UnsupportedSchema(f"recursive type {full!r} cannot become columns")
            node = _Node(T_RECORD)
            self.nodes.append(node)
            inner = (full or "").rpartition(".")[0] or namespace
            for f in schema.get("fields", []):
                node.names.append(f["name"])
                node.children.append(self._compile(f["type"], stack + (full,), inner))
            return index
        if kind == "enum":
            symbols = list(schema.get("symbols", []))
            self.nodes.append(_Node(T_ENUM, len(symbols), symbols=symbols))
            return index
        if kind == "fixed":
            size = int(schema["size"])
            node = _Node(T_FIXED, size, logical=logical)
            if logical == "decimal" and _decimal_fits(schema) and size <= 16:
                node.kind = T_DECIMAL_FIXED
                node.precision, node.scale = int(schema["precision"]), int(schema.get("scale", 0))
            self.nodes.append(node)
            return index
        if kind == "array":
            node = _Node(T_ARRAY)
            self.nodes.append(node)
            node.children = [self._compile(schema["items"], stack, namespace)]
            return index
        if kind == "map":
            node = _Node(T_MAP)
            self.nodes.append(node)
            key = len(self.nodes)
            self.nodes.append(_Node(T_STRING))
            node.children = [key, self._compile(schema["values"], stack, namespace)]
            return index
        return self._compile(kind, stack, namespace)  # {"type": "some.Named"}

    # -------------------------------------------------------------- types
    def _type(self, i: int) -> pa.DataType:
        n = self.nodes[i]
        k = n.kind
        if k == T_NULL:
            return pa.null()
        if k == T_BOOLEAN:
            return pa.bool_()
        if k == T_INT:
            return pa.date32() if n.logical == "date" else pa.int32()
        if k == T_LONG:
            return _TIMESTAMP if n.logical in _TIMESTAMP_UNITS else pa.int64()
        if k == T_FLOAT:
            return pa.float32()
        if k == T_DOUBLE:
            return pa.float64()
        if k in (T_BYTES, T_FIXED):
            return pa.binary()
        if k in (T_STRING, T_ENUM):
            return pa.string()
        if k in (T_DECIMAL_BYTES, T_DECIMAL_FIXED):
            return pa.decimal128(n.precision, n.scale)
        if k == T_RECORD:
            return pa.struct([pa.field(name, self._type(c)) for name, c in zip(n.names, n.children)])
        if k == T_ARRAY:
            return pa.list_(self._type(n.children[0]))
        if k == T_MAP:
            return pa.map_(pa.string(), self._type(n.children[1]))
        members = self._members(n)
        if len(members) == 1:
            return self._type(members[0])
        if not members:
            return pa.null()
        return pa.struct([pa.field(f"member{j}", self._type(c)) for j, c in enumerate(members)])

    def _members(self, n: _Node) -> list[int]:
        return [c for c in n.children if self.nodes[c].kind != T_NULL]

    # -------------------------------------------------------------- decode
    def decode(self, values: pa.Array, skip: int, *, native: bool | None = None) -> tuple[pa.Array, np.ndarray, list]:
        """(the decoded rows that were valid, a bool mask of them over `values`, [(row, reason)])
        for values (non-null binary) whose datum starts `skip` bytes in."""
        if native is None:
            native = HAS_NATIVE
        if not native:
            return self._decode_reference(values, skip)
        values = values.cast(pa.binary()) if values.type != pa.binary() else values
        offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[values.offset:values.offset + len(values) + 1]
        data = values.buffers()[2] if values.buffers()[2] is not None else pa.py_buffer(b"")
        ok, failures, buffers = _avro.decode(self.program, data, offsets.tobytes(), skip)
        mask = np.frombuffer(ok, dtype=np.uint8).astype(bool)
        return self._array(0, buffers), mask, failures

    def _array(self, i: int, buffers: list) -> pa.Array:
        n = self.nodes[i]
        valid_bytes, data, offsets = buffers[i]
        length = len(valid_bytes)
        valid = np.frombuffer(valid_bytes, dtype=np.uint8)
        nulls = length - int(np.count_nonzero(valid))
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little").tobytes()) if nulls else None
        k = n.kind
        if k == T_NULL:
            return pa.nulls(length)
        if k == T_BOOLEAN:
            bits = pa.py_buffer(np.packbits(np.frombuffer(data, dtype=np.uint8), bitorder="little").tobytes())
            return pa.Array.from_buffers(pa.bool_(), length, [bitmap, bits], nulls)
        if k == T_INT:
            return pa.Array.from_buffers(pa.date32() if n.logical == "date" else pa.int32(), length,
                                         [bitmap, pa.py_buffer(data)], nulls)
        if k == T_LONG:
            unit = _TIMESTAMP_UNITS.get(n.logical)
            if unit is None:
                return pa.Array.from_buffers(pa.int64(), length, [bitmap, pa.py_buffer(data)], nulls)
            raw = pa.Array.from_buffers(pa.timestamp(unit, tz="UTC"), length, [bitmap, pa.py_buffer(data)], nulls)
            return raw.cast(_TIMESTAMP) if unit != "us" else raw
        if k in (T_FLOAT, T_DOUBLE):
            return pa.Array.from_buffers(pa.float32() if k == T_FLOAT else pa.float64(), length,
                                         [bitmap, pa.py_buffer(data)], nulls)
        if k in (T_BYTES, T_STRING):
            return pa.Array.from_buffers(pa.string() if k == T_STRING else pa.binary(), length,
                                         [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)], nulls)
        if k == T_FIXED:
            fixed = pa.Array.from_buffers(pa.binary(n.param), length, [bitmap, pa.py_buffer(data)], nulls)
            return fixed.cast(pa.binary())
        if k in (T_DECIMAL_BYTES, T_DECIMAL_FIXED):
            return pa.Array.from_buffers(pa.decimal128(n.precision, n.scale), length, [bitmap, pa.py_buffer(data)],
                                         nulls)
        if k == T_ENUM:
            indices = pa.Array.from_buffers(pa.int32(), length, [bitmap, pa.py_buffer(data)], nulls)
            return pc.take(pa.array(n.symbols, pa.string()), indices)
        if k == T_RECORD:
            children = [self._array(c, buffers) for c in n.children]
            struct = pa.struct([pa.field(name, child.type) for name, child in zip(n.names, children)])
            return pa.Array.from_buffers(struct, length, [bitmap], nulls, children=children)
        if k == T_ARRAY:
            child = self._array(n.children[0], buffers)
            return pa.Array.from_buffers(pa.list_(child.type), length, [bitmap, pa.py_buffer(offsets)], nulls,
                                         children=[child])
        if k == T_MAP:
            keys = self._array(n.children[0], buffers)
            items = self._array(n.children[1], buffers)
            entries = pa.StructArray.from_arrays([keys, items], fields=[pa.field("key", pa.string(), nullable=False),
                                                                         pa.field("value", items.type)])
            return pa.Array.from_buffers(pa.map_(pa.string(), items.type), length, [bitmap, pa.py_buffer(offsets)],
                                         nulls, children=[entries])
        members = self._members(n)
        if not members:
            return pa.nulls(length)
        if len(members) == 1:
            return self._array(members[0], buffers)
        children = [self._array(c, buffers) for c in members]
        struct = pa.struct([pa.field(f"member{j}", child.type) for j, child in enumerate(children)])
        return pa.Array.from_buffers(struct, length, [bitmap], nulls, children=children)

    # -------------------------------------------------------------- reference twin
    def _decode_reference(self, values: pa.Array, skip: int) -> tuple[pa.Array, np.ndarray, list]:
        import fastavro

        rows, mask, failures = [], np.zeros(len(values), dtype=bool), []
        for i, value in enumerate(values.to_pylist()):
            stream = io.BytesIO(value[skip:] if len(value) >= skip else b"")
            try:
                if len(value) < skip:
                    raise ValueError("truncated: shorter than the wire-format prefix")
                datum = fastavro.schemaless_reader(stream, self.parsed, None)
                if stream.tell() != len(value) - skip:
                    raise ValueError(f"{len(value) - skip - stream.tell()} bytes left over after the datum")
                rows.append(self._python(0, datum))
            except Exception as exc:  # noqa: BLE001  (fastavro raises many kinds for bad bytes)
                failures.append((i, str(exc) or type(exc).__name__))
                continue
            mask[i] = True
        return pa.array(rows, type=self.arrow_type), mask, failures

    def _python(self, i: int, value):
        """fastavro's Python value as pyarrow takes it for this node's Arrow type."""
        n = self.nodes[i]
        k = n.kind
        if value is None:
            return None
        if k == T_RECORD:
            return {name: self._python(c, value.get(name)) for name, c in zip(n.names, n.children)}
        if k == T_ARRAY:
            return [self._python(n.children[0], v) for v in value]
        if k == T_MAP:
            return [(key, self._python(n.children[1], v)) for key, v in value.items()]
        if k == T_UNION:
            members = self._members(n)
            if len(members) == 1:
                return self._python(members[0], value)
            row = {f"member{j}": None for j in range(len(members))}
            for j, c in enumerate(members):
                if _matches(self.nodes[c], value):
                    row[f"member{j}"] = self._python(c, value)
                    break
            return row
        if n.logical == "uuid" or isinstance(value, uuid.UUID):
            return str(value)
        if isinstance(value, dt.time):
            us = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
            return us // 1000 if n.logical == "time-millis" else us
        if isinstance(value, dt.datetime) and value.tzinfo is None:
            return value.replace(tzinfo=dt.timezone.utc)
        return value


_TIMESTAMP_UNITS = {"timestamp-millis": "ms", "timestamp-micros": "us", "local-timestamp-millis": "ms",
                    "local-timestamp-micros": "us"}


def _decimal_fits(schema: dict) -> bool:
    try:
        precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
    except (KeyError, TypeError, ValueError):
        return False
    return 0 < precision <= _MAX_DECIMAL128 and 0 <= scale <= precision


def _matches(node: _Node, value) -> bool:
    k = node.kind
    if k == T_BOOLEAN:
        return isinstance(value, bool)
    if k in (T_INT, T_LONG):
        return isinstance(value, (int, dt.date)) and not isinstance(value, bool)
    if k in (T_FLOAT, T_DOUBLE):
        return isinstance(value, float)
    if k in (T_STRING, T_ENUM):
        return isinstance(value, (str, uuid.UUID))
    if k in (T_BYTES, T_FIXED):
        return isinstance(value, bytes)
    if k == T_RECORD:
        return isinstance(value, dict) and set(value) <= set(node.names)
    if k == T_MAP:
        return isinstance(value, dict)
    if k == T_ARRAY:
        return isinstance(value, list)
    return True


def _program(nodes: list[_Node]) -> bytes:
    code = array("i", [len(nodes)])
    for n in nodes:
        code.extend([n.kind, n.param, len(n.children), *n.children])
    return code.tobytes()
