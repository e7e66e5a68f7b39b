"""Debezium's column types: Kafka Connect schemas as Arrow types, the conversions from the values
an event carries to those types, the names of a CDC table's columns, and its metadata columns.

Connect types (the JSON schema wrapper's `type`): int8/16/32/64 -> int8/16/32/64, float32/64 ->
float/double, boolean, string, bytes -> binary (base64 in JSON). Logical types (the field's
`name`; Avro schemas carry it as `connect.name`):

- io.debezium.time.Date, org.apache.kafka.connect.data.Date (days since the epoch) -> date;
- io.debezium.time.Timestamp, org.apache.kafka.connect.data.Timestamp (ms),
  io.debezium.time.MicroTimestamp (us), io.debezium.time.NanoTimestamp (ns) -> timestamp[us, UTC]
  (Debezium encodes a zoneless DATETIME as if it were UTC: the column reads that wall clock in UTC);
- io.debezium.time.ZonedTimestamp (ISO-8601 text with an offset) -> timestamp[us, UTC];
- org.apache.kafka.connect.data.Decimal (base64 of the unscaled two's-complement integer, or a
  JSON number with decimal.format=NUMERIC) -> decimal(p, s): p from connect.decimal.precision,
  38 when absent (a value with more digits goes to quarantine);
- structs, arrays, maps, io.debezium.data.VariableScaleDecimal (a struct) -> string (JSON text).

Everything else keeps its Connect type: the time-of-day types (io.debezium.time.Time,
MicroTime, NanoTime: the integer as sent; ZonedTime: the text), io.debezium.data.Json, Uuid,
Enum, Xml (strings). Delta has no time-of-day or unsigned type.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from ..table.schema import DATA_SCHEMA, PARTITION_COLUMNS, TIMESTAMP_TYPE
from ..table.values import ERROR_COLUMN

# Conversions: how a column's values arrive in an event (the value read back from the JSON, or
# the Avro column typed.rows decoded) and become the column's type.
PLAIN = ""  # already the column's type
DAYS = "days"  # int days since the epoch -> date
MILLIS, MICROS, NANOS = "millis", "micros", "nanos"  # int since the epoch -> timestamp
ZONED = "zoned"  # ISO-8601 text with an offset -> timestamp
DECIMAL = "decimal"  # base64 unscaled bytes (or a number) -> decimal
BASE64 = "base64"  # base64 text -> binary
TEXT = "text"  # a string as it is, anything else as its JSON text
WHEN = "when"  # declared timestamp without a Connect schema: ISO-8601 text, or a number of ms
DAY = "day"  # declared date without a Connect schema: ISO-8601 text, or a number of days

_CONNECT = {"int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
            "float32": pa.float32(), "float64": pa.float64(), "boolean": pa.bool_(), "string": pa.string()}
_LOGICAL = {
    "io.debezium.time.Date": (pa.date32(), DAYS), "org.apache.kafka.connect.data.Date": (pa.date32(), DAYS),
    "io.debezium.time.Timestamp": (TIMESTAMP_TYPE, MILLIS),
    "org.apache.kafka.connect.data.Timestamp": (TIMESTAMP_TYPE, MILLIS),
    "io.debezium.time.MicroTimestamp": (TIMESTAMP_TYPE, MICROS),
    "io.debezium.time.NanoTimestamp": (TIMESTAMP_TYPE, NANOS),
    "io.debezium.time.ZonedTimestamp": (TIMESTAMP_TYPE, ZONED),
}
CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_MAX_PRECISION = 38

#: The columns a CDC table keeps besides `after`'s fields (null where the connector has no such field).
METADATA = pa.schema([
    pa.field("topic", pa.string()), pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("cdc_op", pa.string()),  # c, r, u, d; null for a tombstone
    pa.field("cdc_ts_ms", pa.int64()),  # payload.ts_ms: when the connector processed the change
    pa.field("cdc_source_ts_ms", pa.int64()),  # source.ts_ms: when the change was made in the database
    pa.field("cdc_source_table", pa.string()),  # source db.table (db.schema.table where the source has a schema)
    pa.field("cdc_lsn", pa.int64()),  # source.lsn (Postgres)
    pa.field("cdc_file", pa.string()),  # source.file (MySQL binlog file)
    pa.field("cdc_pos", pa.int64()),  # source.pos (MySQL binlog position)
])
_PREFIX = "after_"
_RESERVED = set(DATA_SCHEMA.names) | set(PARTITION_COLUMNS) | set(METADATA.names) | {ERROR_COLUMN}


def column_of(field: str) -> str:
    """The table column of one of `after`'s fields: its own name, or `after_<name>` when the name is
    one of ours (a built-in, partition or metadata column, `error`, any `cdc_*`) or starts with
    `after_` itself, which keeps the mapping one to one and the same in every run."""
    if field in _RESERVED or field.startswith("cdc_") or field.startswith(_PREFIX):
        return _PREFIX + field
    return field


def field_of(column: str) -> str:
    """The inverse of column_of."""
    return column[len(_PREFIX):] if column.startswith(_PREFIX) else column


def connect_type(schema: dict) -> tuple[pa.DataType, str]:
    """(Arrow type, conversion) of one field's Connect schema (the JSON schema wrapper's form)."""
    name = schema.get("name")
    if name in _LOGICAL:
        return _LOGICAL[name]
    if name == CONNECT_DECIMAL:
        parameters = schema.get("parameters") or {}
        scale = int(parameters.get("scale", 0))
        precision = int(parameters.get("connect.decimal.precision", _MAX_PRECISION))
        precision = min(max(precision, scale, 1), _MAX_PRECISION)
        return pa.decimal128(precision, min(scale, precision)), DECIMAL
    kind = schema.get("type")
    if kind == "bytes":
        return pa.binary(), BASE64
    if kind in _CONNECT:
        return _CONNECT[kind], PLAIN
    return pa.string(), TEXT  # struct, array, map


def avro_type(schema: Any, decoded: pa.DataType) -> tuple[pa.DataType, str]:
    """(Arrow type, conversion) of a field of Debezium's Avro `Value` record, whose column the typed
    path decoded as `decoded`: the Connect logical name in the Avro schema (`connect.name`) turns
    the integers of dates and timestamps into dates and timestamps, as in the JSON form."""
    if isinstance(schema, list):  # ["null", T]
        schema = next((s for s in schema if s != "null"), "null")
    name = schema.get("connect.name") if isinstance(schema, dict) else None
    if name in _LOGICAL and (pa.types.is_integer(decoded) or pa.types.is_string(decoded)):
        return _LOGICAL[name]
    return decoded, PLAIN


def declared_conversion(t: pa.DataType) -> str:
    """The conversion of a column declared in conf/schemas (no Connect schema says more)."""
    if pa.types.is_timestamp(t):
        return WHEN
    if pa.types.is_date32(t):
        return DAY
    if pa.types.is_string(t):
        return TEXT
    return PLAIN


def inferred_type(values: list) -> tuple[pa.DataType, str]:
    """(Arrow type, conversion) of a field seen without any schema, from the values in the sample:
    only booleans -> boolean; only integers -> bigint; numbers (an integer and a fraction) ->
    double; anything else (strings, objects, arrays, a mix, only nulls) -> string (objects and
    arrays as JSON text)."""
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return pa.bool_(), PLAIN
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pa.int64(), PLAIN
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return pa.float64(), PLAIN
    return pa.string(), TEXT


# ------------------------------------------------------------------------------------ conversion

def column(values: list, t: pa.DataType, conversion: str) -> tuple[pa.Array, dict[int, str]]:
    """The column of `values` (Python values read from JSON; None is null) and the reason for each
    value that cannot become `t` (those are null in the column)."""
    try:
        return _convert_all(values, t, conversion), {}
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError, TypeError,
            ArithmeticError, OverflowError) as exc:
        first = exc
    # The slow path, only for a column with a bad value: one value at a time, to name the bad ones.
    out, errors = [], {}
    for i, value in enumerate(values):
        try:
            out.append(_convert_all([value], t, conversion)[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError, TypeError,
                ArithmeticError, OverflowError) as exc:
            out.append(None)
            errors[i] = f"{str(exc) or type(exc).__name__} ({json.dumps(value, default=str)[:80]})"
    if not errors:  # the batch failed for a reason no single value has: say it
        raise first
    return pa.array(out, t), errors


def convert_arrow(array: pa.Array, t: pa.DataType, conversion: str) -> pa.Array:
    """An Avro-decoded column (its Connect integer or text form) as `t`."""
    if conversion in (DAYS, MILLIS, MICROS, NANOS):
        return _from_integers(array.cast(pa.int64()), t, conversion)
    if conversion == ZONED:
        return pa.array([_zoned(v) for v in array.to_pylist()], t)
    return array if array.type.equals(t) else array.cast(t)


def _convert_all(values: list, t: pa.DataType, conversion: str) -> pa.Array:
    if conversion in (DAYS, MILLIS, MICROS, NANOS):
        return _from_integers(pa.array(values, pa.int64()), t, conversion)
    if conversion == TEXT and all(v is None or isinstance(v, str) for v in values):
        return pa.array(values, t)  # the common case: strings, built without a call per value
    per_value = _decimal_with(t) if conversion == DECIMAL else _PER_VALUE.get(conversion)
    if per_value is not None:
        return pa.array([None if v is None else per_value(v) for v in values], t)
    return pa.array(values, t)


def _from_integers(ints: pa.Array, t: pa.DataType, conversion: str) -> pa.Array:
    if conversion == DAYS:
        return ints.cast(pa.int32()).cast(pa.date32())
    if conversion == MILLIS:
        ints = pc.multiply_checked(ints, 1000)
    elif conversion == NANOS:  # floor division: a time before the epoch keeps its microsecond
        ints = pa.array([None if v is None else v // 1000 for v in ints.to_pylist()], pa.int64())
    return ints.cast(t)


def _zoned(text: str | None):
    if text is None:
        return None
    when = dt.datetime.fromisoformat(text)
    if when.tzinfo is None:
        raise ValueError(f"timestamp {text!r} has no offset")
    return when.astimezone(dt.timezone.utc)


def _decimal_with(t: pa.Decimal128Type) -> Callable[[Any], decimal.Decimal]:
    def convert(value) -> decimal.Decimal:
        if isinstance(value, str):  # the default decimal.format=BASE64: the unscaled integer's bytes
            unscaled = int.from_bytes(base64.b64decode(value, validate=True), "big", signed=True)
            return decimal.Decimal(unscaled).scaleb(-t.scale)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return decimal.Decimal(str(value))  # decimal.format=NUMERIC
        raise TypeError("a Connect Decimal is base64 text or a number")
    return convert


def _base64(value) -> bytes:
    if not isinstance(value, str):
        raise TypeError("bytes are base64 text in JSON")
    return base64.b64decode(value, validate=True)


def _text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), sort_keys=True)


def _when(value):
    if isinstance(value, str):
        when = dt.datetime.fromisoformat(value)
        return when.astimezone(dt.timezone.utc) if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=value)
    raise TypeError("a timestamp is ISO-8601 text or milliseconds since the epoch")


def _day(value):
    if isinstance(value, str):
        return dt.date.fromisoformat(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return dt.date(1970, 1, 1) + dt.timedelta(days=value)
    raise TypeError("a date is ISO-8601 text or days since the epoch")


_PER_VALUE: dict[str, Callable] = {ZONED: _zoned, BASE64: _base64, TEXT: _text, WHEN: _when, DAY: _day}

