"""Spark SQL over the topic tables: each table under <root>/tables is a view of its CURRENT
Delta snapshot.

Spark here has no Delta jars, so a view reads exactly the Parquet files of the snapshot
(delta-rs lists them), with the table's own schema (Delta's schema JSON is Spark's StructType
JSON) and hive partition values derived under the table root. Files a concurrent writer adds
later, or orphans of crashed runs, are never read.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import re
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from topiclake.segments.storage import StorageLayout

_GLOB = re.compile(r"([*?\[\]{}\\])")


def discover_tables(layout: StorageLayout) -> dict[str, str]:
    """name -> location of every Delta table directly under <root>/tables."""
    tables_dir = Path(layout.tables_dir)
    if not tables_dir.is_dir():
        return {}
    return {d.name: str(d.resolve()) for d in sorted(tables_dir.iterdir()) if (d / "_delta_log").is_dir()}


def snapshot_frame(spark, uri: str):
    """A DataFrame over the current snapshot of the table at `uri`."""
    from pyspark.sql.types import StructType

    table = DeltaTable(uri)
    schema = StructType.fromJson(json.loads(table.schema().to_json()))
    files = table.file_uris()
    if not files:
        return spark.createDataFrame([], schema)
    # spark.read.parquet globs paths: escape glob characters so a path is only itself
    paths = [_GLOB.sub(r"\\\1", f) for f in files]
    return spark.read.schema(schema).option("basePath", uri).parquet(*paths)


def register_views(spark, tables: dict[str, str]) -> list[str]:
    for name, uri in tables.items():
        snapshot_frame(spark, uri).createOrReplaceTempView(f"`{name}`")
    return list(tables)


def run_sql(spark, query: str, tables: dict[str, str], *, max_rows: int | None = None) -> pa.Table:
    register_views(spark, tables)
    # Ad-hoc queries shuffle; let Spark size the shuffle to the data (ingest turns this off).
    spark.conf.set("spark.sql.adaptive.enabled", "true")
    frame = spark.sql(query)
    if max_rows is not None:
        frame = frame.limit(max_rows)
    return frame.toArrow()


def format_result(table: pa.Table, fmt: str) -> str:
    """Render for a terminal or a pipe: `table` (aligned text), `csv`, or `json` (one object per
    line). Binary columns are shown as UTF-8 text when they are, else as base64: prefixed."""
    rows = [{k: _printable(v) for k, v in row.items()} for row in table.to_pylist()]
    if fmt == "json":
        return "\n".join(json.dumps(row, default=str, ensure_ascii=False) for row in rows)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=table.column_names, lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: _cell(v) for k, v in row.items()} for row in rows)
        return out.getvalue().rstrip("\n")
    if fmt == "table":
        return _text_table(table.column_names, [[_cell(row[c]) for c in table.column_names] for row in rows])
    raise ValueError(f"unknown format {fmt!r}: table, csv or json")


def _printable(value):
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return "base64:" + base64.b64encode(value).decode("ascii")
    if isinstance(value, list):
        return [_printable(v) for v in value]
    if isinstance(value, dict):
        return {k: _printable(v) for k, v in value.items()}
    return value


def _cell(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, (list, dict)):
        return json.dumps(value, default=str, ensure_ascii=False)
    return str(value)


def _text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    line = lambda cells: " | ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    out = [line(header), "-+-".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)
