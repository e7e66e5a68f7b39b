"""The record browser's decoding: Confluent-framed values (Avro, JSON Schema, Protobuf) through
the same planner and decoders the typed tables use (`topiclake.lake.typed`), with the registry
replayed from the root's `_schemas`; anything else shown as UTF-8 text, or hex when it is not.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass

import pyarrow as pa

from topiclake.segments.batch import Record

HEX_SHOWN = 256  # bytes of a binary value shown as hex
TEXT_SHOWN = 4096  # characters of a text or decoded value shown (a page stays small)


@dataclass(frozen=True)
class ShownRecord:
    offset: int
    timestamp: str
    key: str
    value: str
    value_format: str  # "avro id 3", "utf-8", "hex", "null"
    headers: str
    error: str | None = None  # why a framed value could not be decoded


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_SHOWN else f"{text[:TEXT_SHOWN]} … ({len(text):,} characters)"


def raw(data: bytes | None) -> tuple[str, str]:
    """(text, format) of bytes without a schema."""
    if data is None:
        return "null", "null"
    try:
        text = data.decode("utf-8")
        if text.isprintable() or all(c.isprintable() or c in "\n\r\t" for c in text):
            return _cut(text), "utf-8"
    except UnicodeDecodeError:
        pass
    shown = data[:HEX_SHOWN].hex(" ")
    return shown + (" …" if len(data) > HEX_SHOWN else ""), "hex"


def _jsonable(value):
    if isinstance(value, bytes):
        return raw(value)[0]
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value if isinstance(value, (int, float, str, bool, type(None))) else str(value)


def _shown(value) -> str:
    return _cut(json.dumps(_jsonable(value), ensure_ascii=False, sort_keys=False))


def decode(registry, topic: str, records: list[Record]) -> list[ShownRecord]:
    """The records as the browser shows them: values (and keys) decoded with the topic's subjects.
    `registry`: a function returning the schema registry's state (storage.py's `registry`)."""
    from topiclake.lake.typed.plan import VALUE, plan_typed

    spec = plan_typed(registry(), [topic]) if records else None
    decoded: dict[int, dict[str, str]] = {}
    errors: dict[int, str] = {}
    if spec is not None:
        from topiclake.lake.typed.rows import ERROR_COLUMN, decode_rows

        rows = pa.table({"offset": pa.array([r.offset for r in records], pa.int64()),
                         "key": pa.array([r.key for r in records], pa.binary()),
                         "value": pa.array([r.value for r in records], pa.binary())})
        good, bad = decode_rows(spec, rows, topic)
        for row in bad.select(["offset", ERROR_COLUMN]).to_pylist():
            errors[row["offset"]] = row[ERROR_COLUMN]
        for row in good.to_pylist():
            shown = {}
            for side in spec.sides:
                schema_id = row.get(side.id_column)
                if schema_id is None:
                    continue
                body = (row.get(side.column) if side.column is not None
                        else {field: row.get(column) for field, column in side.columns})
                shown[side.name] = (_shown(body), f"registry id {schema_id}")
            decoded[row["offset"]] = shown
    out = []
    for r in records:
        sides = decoded.get(r.offset, {})
        value, value_format = sides.get(VALUE) or raw(r.value)
        key = sides["key"][0] if "key" in sides else raw(r.key)[0]
        headers = ", ".join(f"{k}={raw(v)[0]}" for k, v in r.headers)
        when = datetime.datetime.fromtimestamp(r.timestamp / 1000, datetime.timezone.utc)
        out.append(ShownRecord(r.offset, when.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3], key, value, value_format,
                               headers, errors.get(r.offset)))
    return out
