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
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from topiclake.segments.storage import StorageLayout

from .errors import LakeError

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
    return execute(spark, query, tables, max_rows=max_rows).table


@dataclass(frozen=True, slots=True)
class QueryResult:
    table: pa.Table
    truncated: bool  # max_rows cut the result
    seconds: float


def execute(spark, statement: str, tables: dict[str, str], *, max_rows: int | None = None) -> QueryResult:
    """One statement over the registered views. A table whose name holds a dot is found as
    written (`SELECT * FROM demo.events`): Spark reads that as database `demo`, so the name is
    quoted where Spark's error points, and the statement runs again."""
    started = time.monotonic()
    frame = _resolve_dotted_names(spark, statement, tables)
    if max_rows is not None:
        frame = frame.limit(max_rows + 1)  # one more tells whether the limit cut anything
    table = frame.toArrow()
    truncated = max_rows is not None and table.num_rows > max_rows
    return QueryResult(table.slice(0, max_rows) if truncated else table, truncated, time.monotonic() - started)


_MAX_NAME_FIXES = 16


def _resolve_dotted_names(spark, statement: str, tables: dict[str, str]):
    from pyspark.errors import AnalysisException

    for _ in range(_MAX_NAME_FIXES):
        try:
            return spark.sql(statement)
        except AnalysisException as exc:
            fixed = _quote_dotted_name(statement, exc, tables)
            if fixed is None:
                if _not_found(exc):
                    raise UnknownTableError.of(exc, tables) from None
                raise
            statement = fixed
    return spark.sql(statement)


def _not_found(exc) -> bool:
    return exc.getCondition() == "TABLE_OR_VIEW_NOT_FOUND"


def _quote_dotted_name(statement: str, exc, tables: dict[str, str]) -> str | None:
    """The statement with the unresolved name at Spark's error position quoted, when the
    dotted name is one of our tables; else None."""
    if not _not_found(exc):
        return None
    name = exc.getMessageParameters().get("relationName", "").replace("`", "")
    contexts = exc.getQueryContext()
    if name not in tables or not contexts:
        return None
    start, stop = contexts[0].startIndex(), contexts[0].stopIndex()
    if statement[start:stop + 1].replace("`", "") != name:
        return None
    return f"{statement[:start]}`{name}`{statement[stop + 1:]}"


class UnknownTableError(LakeError):
    """A statement names a table that is not under <root>/tables (Spark's message, the tables there)."""

    @classmethod
    def of(cls, exc, tables: dict[str, str]) -> "UnknownTableError":
        from .command import spark_error_line

        names = ", ".join(f"`{n}`" if "." in n else n for n in sorted(tables)) or "none"
        error = cls(f"{spark_error_line(exc)}; tables: {names}")
        error.hint = "a name holding a dot is written in backticks: `demo.events`" if any(
            "." in n for n in tables) else None
        return error


def split_statements(text: str) -> list[str]:
    """Statements separated by `;` outside quotes, backticks and comments (empty ones dropped)."""
    out, start = [], 0
    for end in _statement_ends(text):
        out.append(text[start:end])
        start = end + 1
    out.append(text[start:])
    return [s.strip() for s in out if _has_code(s)]


def statement_complete(text: str) -> bool:
    """True when the text ends with a `;` that closes a statement (the shell's multi-line input)."""
    ends = list(_statement_ends(text))
    return bool(ends) and not _has_code(text[ends[-1] + 1:])


def _has_code(text: str) -> bool:
    return bool(re.sub(r"--[^\n]*|/\*.*?\*/", "", text, flags=re.S).strip())


def _statement_ends(text: str):
    """Positions of the `;` that end statements."""
    i, n, quote = 0, len(text), None
    while i < n:
        c = text[i]
        if quote:
            if c == "\\" and quote != "`":
                i += 1
            elif c == quote:
                quote = None
        elif c in "'\"`":
            quote = c
        elif text.startswith("--", i):
            i = text.find("\n", i)
            if i < 0:
                return
        elif text.startswith("/*", i):
            i = text.find("*/", i + 2)
            if i < 0:
                return
            i += 1
        elif c == ";":
            yield i
        i += 1


def format_result(table: pa.Table, fmt: str, *, truncated: bool = False) -> str:
    """Render for a terminal or a pipe: `table` (aligned text), `csv`, or `json` (one object per
    line). Binary columns are shown as UTF-8 text when they are, else as base64: prefixed.
    `truncated`: the table format says that --max-rows cut the result (csv and json stay data:
    the caller says it on stderr)."""
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
        text = _text_table(table.column_names, [[_cell(row[c]) for c in table.column_names] for row in rows])
        return text[:-1] + f"; more were cut by --max-rows{text[-1]}" if truncated else text
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
