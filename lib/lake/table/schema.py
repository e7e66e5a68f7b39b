"""The one schema of a topic table, in Arrow and as Spark DDL.

Every field is nullable on purpose: Spark's Arrow conversion marks some fields NOT NULL, and a
table that declares NOT NULL cannot take a file written by a tool that does not; topic tables
are appended to for years, by Spark executors, pyarrow, delta-rs and whatever reads them next.

Timestamps are microseconds in UTC because that is the only timestamp Delta has (Kafka's are
milliseconds: the conversion is exact). The partition columns (`record_date`, the UTC date of the
record timestamp, by default; `record_hour` under it for hourly tables) are not stored in the data
files: Delta keeps it in each add action and readers derive it from the hive-style directory.
"""

from __future__ import annotations

import pyarrow as pa

HEADER_TYPE = pa.list_(pa.field("element", pa.struct([
    pa.field("key", pa.string(), nullable=True),
    pa.field("value", pa.binary(), nullable=True),
]), nullable=True))

TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

#: Columns stored in every data file, in order.
DATA_SCHEMA = pa.schema([
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestamp_type", pa.int8()),  # 0 CreateTime, 1 LogAppendTime
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", HEADER_TYPE),
    pa.field("ingested_at", TIMESTAMP_TYPE),
])

RECORD_DATE = "record_date"
RECORD_HOUR = "record_hour"  # 0-23, the UTC hour of the record timestamp: only under record_date
#: Partition columns a table may use (the values are derived from the record timestamp).
PARTITION_COLUMNS = {RECORD_DATE: pa.date32(), RECORD_HOUR: pa.int32()}
DEFAULT_PARTITION_BY: tuple[str, ...] = (RECORD_DATE,)
#: `--partition-by` shorthands: time partitioning by day or by hour of the record timestamp.
PARTITION_SHORTHANDS = {"day": (RECORD_DATE,), "hour": (RECORD_DATE, RECORD_HOUR), "none": ()}


def parse_partition_by(spec: str) -> tuple[str, ...]:
    """`day`, `hour`, `none`, or a comma-separated list of partition columns."""
    spec = spec.strip()
    if spec in PARTITION_SHORTHANDS:
        return PARTITION_SHORTHANDS[spec]
    columns = tuple(c.strip() for c in spec.split(",") if c.strip())
    _check_partition_by(columns)
    return columns


def _check_partition_by(partition_by) -> None:
    unknown = [name for name in partition_by if name not in PARTITION_COLUMNS]
    if unknown:
        raise ValueError(f"unknown partition column(s) {unknown}; choose from {sorted(PARTITION_COLUMNS)} "
                         f"or one of {sorted(PARTITION_SHORTHANDS)}")
    if RECORD_HOUR in partition_by and list(partition_by) != [RECORD_DATE, RECORD_HOUR]:
        # an hour of the day alone would put every day's 5 o'clock into one directory
        raise ValueError(f"{RECORD_HOUR} partitions only under {RECORD_DATE}: use 'hour' "
                         f"({RECORD_DATE},{RECORD_HOUR})")


def table_schema(partition_by: tuple[str, ...] | list[str] = DEFAULT_PARTITION_BY) -> pa.Schema:
    """The table schema: the data columns plus the partition columns (Delta puts them last)."""
    _check_partition_by(partition_by)
    schema = DATA_SCHEMA
    for name in partition_by:
        schema = schema.append(pa.field(name, PARTITION_COLUMNS[name]))
    return schema


def spark_ddl(schema: pa.Schema) -> str:
    """Spark DDL for an Arrow schema of this module (used to read snapshots without inference)."""
    return ", ".join(f"`{f.name}` {_spark_type(f.type)}" for f in schema)


def _spark_type(t: pa.DataType) -> str:
    if pa.types.is_string(t):
        return "STRING"
    if pa.types.is_binary(t):
        return "BINARY"
    if pa.types.is_int8(t):
        return "TINYINT"
    if pa.types.is_int32(t):
        return "INT"
    if pa.types.is_int64(t):
        return "BIGINT"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP"
    if pa.types.is_date32(t):
        return "DATE"
    if pa.types.is_list(t):
        return f"ARRAY<{_spark_type(t.value_type)}>"
    if pa.types.is_struct(t):
        return "STRUCT<" + ", ".join(f"`{f.name}`: {_spark_type(f.type)}" for f in t) + ">"
    raise TypeError(f"no Spark type for {t}")
