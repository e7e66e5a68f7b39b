"""Spark SQL over the topic tables: each table under <root>/tables is a Delta table of the
session's catalog (delta-spark's DeltaCatalog), by its directory name.

A name is registered as an EXTERNAL table at its location: the Delta log stays the only state
(nothing is written by registering; DROP TABLE, ddl.py, removes the table), so a query sees
exactly the current snapshot, time travel (`VERSION AS OF`, `TIMESTAMP AS OF`), `DESCRIBE HISTORY`,
`DESCRIBE DETAIL` and Delta's DML work on it, and files a concurrent writer has not committed, or
orphans of crashed runs, are never read. Tables a statement creates go under the same directory
(`use_root`: the default database's location, with Delta the default format), so they persist and
the next session finds them.
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

from topiclake.segments.storage import StorageLayout

from ..errors import LakeError, spark_error_line
from .ddl import CATALOG_NAME, NAME_PART, DATABASE, joined, quote_name, run_ddl


def use_root(spark, layout: StorageLayout) -> None:
    """Tables a statement creates (`CREATE TABLE x AS SELECT ...`) are Delta tables under the
    root's tables directory, so they persist and the next session finds them (Spark would write
    Parquet under ./spark-warehouse and forget the name)."""
    tables_dir = Path(layout.tables_dir).resolve()
    tables_dir.mkdir(parents=True, exist_ok=True)
    use_tables_location(spark, str(tables_dir))


def use_tables_location(spark, location: str) -> None:
    """use_root for a location given as a path or URI (an object-store root's s3://.../tables)."""
    spark.conf.set("spark.sql.sources.default", "delta")
    spark.sql(f"ALTER DATABASE {DATABASE} SET LOCATION '{_sql_string(location)}'")


def snapshot_frame(spark, uri: str):
    """A DataFrame over the current snapshot of the Delta table at `uri` (delta-spark)."""
    return spark.read.format("delta").load(uri)


def register_tables(spark, tables: dict[str, str]) -> list[str]:
    """Name each table in the session catalog (an external Delta table at its location). A name
    already there for the same location is kept; one for another location (an earlier root in
    the same JVM) is dropped first when it is external, which forgets only the name."""
    catalog = spark._jsparkSession.sessionState().catalog().externalCatalog()
    for name, uri in tables.items():
        if not CATALOG_NAME.fullmatch(name):
            continue  # Spark's catalog refuses it: statements reach it by its path (see execute)
        if catalog.tableExists(DATABASE, name):
            known = catalog.getTable(DATABASE, name)
            if _same_location(known.location().toString(), uri):
                continue
            if known.tableType().name() != "EXTERNAL":
                continue  # a table this session created under its warehouse: its own data
            catalog.dropTable(DATABASE, name, True, False)
        spark.sql(f"CREATE TABLE {DATABASE}.{quote_name(name)} USING delta LOCATION '{_sql_string(uri)}'")
    return list(tables)


def _sql_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def _same_location(location: str, uri: str) -> bool:
    from urllib.parse import unquote, urlparse

    parsed = urlparse(location)
    path = unquote(parsed.path) if parsed.scheme in ("file", "") else location
    return Path(path).resolve() == Path(uri).resolve() if "://" not in uri else location.rstrip("/") == uri.rstrip("/")


def run_sql(spark, query: str, tables: dict[str, str], *, max_rows: int | None = None) -> pa.Table:
    register_tables(spark, tables)
    return execute(spark, query, tables, max_rows=max_rows).table


@dataclass(frozen=True, slots=True)
class QueryResult:
    table: pa.Table
    truncated: bool  # max_rows cut the result
    seconds: float


def execute(spark, statement: str, tables: dict[str, str], *, max_rows: int | None = None) -> QueryResult:
    """One statement over the tables. A table whose name Spark's catalog cannot hold (a dot, a
    dash...) is found as written (`SELECT * FROM demo.events`, `DESCRIBE HISTORY demo.events`):
    where Spark cannot resolve it, the name becomes the table's path, delta.`<location>`, and the
    statement runs again."""
    started = time.monotonic()
    frame = run_ddl(spark, statement, tables)
    if frame is None:
        frame = _resolve_names(spark, statement, tables)
    if max_rows is not None:
        frame = frame.limit(max_rows + 1)  # one more tells whether the limit cut anything
    table = _to_arrow(frame)
    truncated = max_rows is not None and table.num_rows > max_rows
    return QueryResult(table.slice(0, max_rows) if truncated else table, truncated, time.monotonic() - started)


def _to_arrow(frame) -> pa.Table:
    """The frame's rows. Delta's OPTIMIZE declares fields of its metrics non-nullable and leaves
    them null (zOrderStats without ZORDER BY): pyspark's toArrow refuses those, so such a result is
    collected and built with every field nullable."""
    try:
        return frame.toArrow()
    except pa.ArrowInvalid:
        from pyspark.sql.pandas.types import to_arrow_schema

        schema = _nullable(to_arrow_schema(frame.schema, timezone="UTC"))
        return pa.Table.from_pylist([row.asDict(recursive=True) for row in frame.collect()], schema=schema)


def _nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([_nullable_field(f) for f in schema])


def _nullable_field(field: pa.Field) -> pa.Field:
    t = field.type
    if pa.types.is_struct(t):
        t = pa.struct([_nullable_field(f) for f in t])
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        t = pa.list_(_nullable_field(t.value_field))
    return field.with_type(t).with_nullable(True)


_MAX_NAME_FIXES = 16


def _resolve_names(spark, statement: str, tables: dict[str, str]):
    from pyspark.errors import AnalysisException

    for _ in range(_MAX_NAME_FIXES):
        try:
            return spark.sql(statement)
        except AnalysisException as exc:
            fixed = _name_as_path(statement, exc, tables)
            if fixed is None:
                if _not_found(exc):
                    raise UnknownTableError.of(exc, tables) from None
                raise
            statement = fixed
    return spark.sql(statement)


def _not_found(exc) -> bool:
    return exc.getCondition() == "TABLE_OR_VIEW_NOT_FOUND"


_IDENTIFIER = re.compile(rf"(?<![\w.`]){NAME_PART}(?:\s*\.\s*{NAME_PART})*")


def _name_as_path(statement: str, exc, tables: dict[str, str]) -> str | None:
    """The statement with the unresolved name, when it is one of our tables, written as its path:
    where Spark's error points, or (Delta's commands point nowhere) wherever the statement spells
    that name outside literals and comments. None when the name is not ours."""
    if not _not_found(exc):
        return None
    name = joined(exc.getMessageParameters().get("relationName", ""))
    if name not in tables:
        return None
    contexts = exc.getQueryContext()
    if contexts:
        spans = [(contexts[0].startIndex(), contexts[0].stopIndex() + 1)]
    else:
        code = _code_only(statement)
        spans = [m.span() for m in _IDENTIFIER.finditer(code)]
    spans = [(a, b) for a, b in spans if joined(statement[a:b]) == name]
    if not spans:
        return None
    for a, b in reversed(spans):
        statement = f"{statement[:a]}delta.{quote_name(tables[name])}{statement[b:]}"
    return statement


def _code_only(text: str) -> str:
    """The statement with string literals and comments blanked (positions kept)."""
    out, i, n = list(text), 0, len(text)
    while i < n:
        c = text[i]
        if c in "'\"":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            end = min(j + 1, n)
        elif text.startswith("--", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
        elif c == "`":
            end = text.find("`", i + 1)
            i = n if end < 0 else end + 1
            continue
        else:
            i += 1
            continue
        out[i:end] = " " * (end - i)
        i = end
    return "".join(out)


class UnknownTableError(LakeError):
    """A statement names a table that is not under <root>/tables (Spark's message, the tables there)."""

    @classmethod
    def of(cls, exc, tables: dict[str, str]) -> "UnknownTableError":
        names = ", ".join(sorted(tables)) or "none"
        return cls(f"{spark_error_line(exc)}; tables: {names}")


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
    line). Binary values are always base64, in every format (text that happened to decode as
    UTF-8 printed raw, NULs and all, beside base64 on the next row; `CAST(value AS STRING)` shows
    text).
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
        return base64.b64encode(value).decode("ascii")
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
