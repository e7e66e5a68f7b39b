"""Widening a typed table's column (a registry version turned an int field into a long, a float
into a double, ...), where Delta's type widening allows the change (typed.columns.delta_widens).

How: the table is rewritten by delta-spark, as a Spark job, with the wider types, in one commit
(an overwrite that keeps the partitioning and the txn actions, `overwriteSchema`), before the run
that needs them commits its files. Delta's own `typeWidening` table feature would change the type
without a rewrite, but it moves the table to protocol (3, 7) with a reader feature that deltalake
1.6 refuses to read or write (DeltaProtocolError: "reader features {'typeWidening'} not yet
supported"): the ingest's commits, DuckDB and polars (through deltalake's Arrow dataset) would
lose the table. The rewrite keeps protocol (1, 2), so every one of them still reads every file.

The rewrite carries the writer guard (Delta's idempotent-write options txnAppId/txnVersion), so a
topiclake writer that planned on the narrow schema cannot commit after it; a rewrite that lost to
another writer is found out (the types did not change) and the run stops without committing.
"""

from __future__ import annotations

import json
import logging
from typing import Sequence

import pyarrow as pa
from deltalake import DeltaTable, Schema as DeltaSchema

from ..errors import ConcurrentWriterError
from .delta import GUARD_APP_ID
from .type_changes import restricted_to, widened_columns

log = logging.getLogger(__name__)


def _as_spark_type(shape):
    """A `restricted_to` shape as Spark's DataType (what the column is cast to: the table's fields, wider)."""
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType, _parse_datatype_json_value

    if isinstance(shape, tuple):
        if shape[0] == "struct":
            return StructType([StructField(name, _as_spark_type(kind)) for name, kind in shape[1]])
        if shape[0] == "array":
            return ArrayType(_as_spark_type(shape[1]))
        return MapType(_as_spark_type(shape[1]), _as_spark_type(shape[2]))
    return _parse_datatype_json_value(shape)


def widen_table(spark, uri: str, schema: pa.Schema, partition_by: Sequence[str], *, reason: str) -> list[str]:
    """Rewrite the table at `uri` with the wider types `schema` gives its columns (the columns it
    adds are left to the run's own commit); returns the widened columns."""
    from pyspark.sql import functions as F

    table = DeltaTable(uri)
    columns = widened_columns(table, schema)
    if not columns:
        return []
    have = {f["name"]: f["type"] for f in json.loads(table.schema().to_json())["fields"]}
    want = {f["name"]: f["type"] for f in json.loads(DeltaSchema.from_arrow(schema).to_json())["fields"]}
    types = {c: _as_spark_type(restricted_to(want[c], have[c])) for c in columns}
    frame = spark.read.format("delta").load(uri)
    frame = frame.select(*[F.col(f"`{c}`").cast(types[c]).alias(c) if c in columns else F.col(f"`{c}`")
                           for c in frame.columns])
    guard = (table.transaction_version(GUARD_APP_ID) or 0) + 1
    metadata = json.dumps({"operation": "type-widening", "columns": columns, "reason": reason}, sort_keys=True)
    (frame.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
     .option("txnAppId", GUARD_APP_ID).option("txnVersion", str(guard)).option("userMetadata", metadata)
     .partitionBy(*partition_by).save(uri))
    left = widened_columns(DeltaTable(uri), schema)
    if left:  # Delta skips an idempotent write whose txnVersion another commit already reached
        raise ConcurrentWriterError(f"table {uri}: another writer committed while its columns {left} were being "
                                    "widened; nothing was committed by this run, run it again")
    log.info("table %s: widened %s (%s)", uri, ", ".join(columns), reason)
    return columns
