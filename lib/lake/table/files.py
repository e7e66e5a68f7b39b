"""How the lake writes and reads its tables' data files: every Parquet file (write_parquet), its
Delta statistics for data skipping (file_stats), and a file another Delta writer made, read in the
plain Arrow types the lake computes with (plain_layout)."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

# Columns that rarely repeat: a dictionary would be built per file only to be abandoned.
_NO_DICTIONARY = frozenset({"offset", "timestamp", "value"})
_STATS_COLUMNS = ("topic", "partition", "offset", "timestamp", "timestamp_type", "ingested_at")
_NULL_COUNT_COLUMNS = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "ingested_at")


def write_parquet(table: pa.Table, where, *, filesystem=None, compression: str = "snappy") -> None:
    """How every data file of a table is written (bench/ingest.py's Parquet-write limit too)."""
    pq.write_table(table, where, filesystem=filesystem, compression=compression,
                   use_dictionary=[c for c in table.column_names if c not in _NO_DICTIONARY])


def file_stats(table: pa.Table) -> str:
    """Delta file statistics (numRecords, minValues, maxValues, nullCount) for data skipping.
    Timestamps in Delta stats are ISO-8601 with milliseconds; our timestamps are whole
    milliseconds, so the truncation loses nothing."""
    mins, maxs = {}, {}
    present = set(table.column_names)  # a CDC table has no key, value, timestamp_type... (keyed/cdc.py)
    for name in (n for n in _STATS_COLUMNS if n in present):
        col = table.column(name)
        if col.null_count == len(col):
            continue
        mm = pc.min_max(col)
        mins[name], maxs[name] = _stat_value(mm["min"].as_py()), _stat_value(mm["max"].as_py())
    nulls = {name: table.column(name).null_count for name in _NULL_COUNT_COLUMNS if name in present}
    return json.dumps({"numRecords": table.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls})


def _stat_value(value):
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    return value


def plain_layout(data: pa.Table) -> pa.Table:
    """`data` with Arrow's view and large types as their plain twins (string_view -> string, ...).
    Another Delta writer's files may hold them (deltalake 1.6's DELETE writes string_view); Arrow
    compute and the lake's own files use the plain ones."""
    schema = pa.schema([field.with_type(plain_type(field.type)) for field in data.schema])
    return data if schema.equals(data.schema) else data.cast(schema)


def plain_type(kind: pa.DataType) -> pa.DataType:
    """`kind` with its view and large types (nested ones too) as their plain twins."""
    if pa.types.is_string_view(kind) or pa.types.is_large_string(kind):
        return pa.string()
    if pa.types.is_binary_view(kind) or pa.types.is_large_binary(kind):
        return pa.binary()
    if pa.types.is_map(kind):
        return pa.map_(plain_type(kind.key_type), kind.item_field.with_type(plain_type(kind.item_type)))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_list_view(kind) \
            or pa.types.is_large_list_view(kind):
        return pa.list_(kind.value_field.with_type(plain_type(kind.value_type)))
    if pa.types.is_struct(kind):
        return pa.struct([field.with_type(plain_type(field.type)) for field in kind])
    return kind
