"""Table DDL over the topic tables by their own names, where Spark's session catalog cannot do it:
topic tables are named like their topics (`orders.summary`, `demo.events`), which the catalog
refuses as table names.

- `CREATE [OR REPLACE] TABLE [IF NOT EXISTS] orders.summary AS SELECT ...` (or with backticks):
  the table is created as a Delta table at its place under <root>/tables (`delta.\\`<path>\\``),
  and the session knows it by that name at once. A retry of a plain CREATE TABLE says in one line
  that the table exists, as Spark says it for a catalog name.
- `DROP TABLE [IF EXISTS] name`, for any table under <root>/tables: the table is gone, its
  directory (Delta log and data files) removed, as Spark's DROP TABLE removes a managed table's; so
  the next session does not find it again. A topic table dropped this way is rebuilt from the log
  by the next ingest (its group's offsets lived in its Delta log).
- `SHOW TABLES` lists every table under <root>/tables, dotted names included.
"""

from __future__ import annotations

import re

import pyarrow.fs as pafs

from ..errors import LakeError

DATABASE = "default"
CATALOG_NAME = re.compile(r"[A-Za-z0-9_]+")  # what Spark's session catalog accepts as a table name
NAME_PART = r"(?:`(?:[^`]|``)+`|[A-Za-z0-9_]+)"
_NAME = rf"{NAME_PART}(?:\s*\.\s*{NAME_PART})*"
_CREATE = re.compile(rf"\s*CREATE\s+(?P<replace>OR\s+REPLACE\s+)?TABLE\s+(?P<if_not>IF\s+NOT\s+EXISTS\s+)?"
                     rf"(?P<name>{_NAME})", re.I)
_DROP = re.compile(rf"\s*DROP\s+TABLE\s+(?P<if_exists>IF\s+EXISTS\s+)?(?P<name>{_NAME})\s*;?\s*\Z", re.I)
_SHOW = re.compile(rf"\s*SHOW\s+TABLES(?:\s+(?:IN|FROM)\s+`?{DATABASE}`?)?\s*;?\s*\Z", re.I)
_CATALOG_PREFIXES = {DATABASE, "delta", "spark_catalog", "global_temp"}  # names Spark resolves itself


def joined(identifier: str) -> str:
    """`demo`.`events`, demo.events and `demo.events` all name the table demo.events."""
    parts = re.findall(NAME_PART, identifier)
    return ".".join(p[1:-1].replace("``", "`") if p.startswith("`") else p for p in parts)


def quote_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def run_ddl(spark, statement: str, tables: dict[str, str]):
    """The result (a DataFrame) of a statement this module does, None for any other statement.
    `tables` (name -> location) is the session's: a table created or dropped here is added or
    removed."""
    if _SHOW.match(statement):
        return _show_tables(spark, statement, tables)
    drop = _DROP.match(statement)
    if drop and joined(drop.group("name")) in tables:
        return _drop(spark, joined(drop.group("name")), tables)
    create = _CREATE.match(statement)
    if create and _not_a_catalog_name(create.group("name")):
        return _create(spark, statement, create, tables)
    return None


def _not_a_catalog_name(identifier: str) -> bool:
    parts = re.findall(NAME_PART, identifier)
    first = parts[0].strip("`").lower() if parts else ""
    return not CATALOG_NAME.fullmatch(joined(identifier)) and not (len(parts) > 1 and first in _CATALOG_PREFIXES)


def _create(spark, statement: str, create: re.Match, tables: dict[str, str]):
    name = joined(create.group("name"))
    location = tables.get(name) or f"{_tables_location(spark).rstrip('/')}/{name}"
    if _is_delta_table(location) and not (create.group("replace") or create.group("if_not")):
        raise LakeError(f"table {name} already exists (at {location}); DROP TABLE {quote_name(name)} first, or "
                        "use CREATE OR REPLACE TABLE")
    start, end = create.span("name")
    frame = spark.sql(f"{statement[:start]}delta.{quote_name(location)}{statement[end:]}")
    tables[name] = location
    return frame


def _drop(spark, name: str, tables: dict[str, str]):
    location = tables.pop(name)
    if CATALOG_NAME.fullmatch(name):
        catalog = spark._jsparkSession.sessionState().catalog().externalCatalog()
        if catalog.tableExists(DATABASE, name):  # the name only: the files go below, whatever its type
            catalog.dropTable(DATABASE, name, True, False)
    fs, path = pafs.FileSystem.from_uri(_uri(location))
    fs.delete_dir(path)
    return spark.range(0).select()  # no columns: printed as OK


def _show_tables(spark, statement: str, tables: dict[str, str]):
    from pyspark.sql import Row

    listed = spark.sql(statement)
    shown = {r["tableName"] for r in listed.select("tableName").collect()}
    extra = [Row(namespace=DATABASE, tableName=name, isTemporary=False) for name in sorted(tables) if name not in shown]
    if not extra:
        return listed
    return listed.unionByName(spark.createDataFrame(extra, listed.schema)).orderBy("namespace", "tableName")


def _tables_location(spark) -> str:
    """Where new tables go: the default database's location (query.use_root set it to <root>/tables)."""
    return spark.catalog.getDatabase(DATABASE).locationUri


def _is_delta_table(location: str) -> bool:
    fs, path = pafs.FileSystem.from_uri(_uri(location))
    return fs.get_file_info(f"{path}/_delta_log").type == pafs.FileType.Directory


def _uri(location: str) -> str:
    """A location as pyarrow's filesystems take it: a URI, or an absolute local path."""
    if location.startswith("s3a://"):  # Hadoop's scheme for what pyarrow calls s3
        return "s3://" + location[len("s3a://"):]
    return location if "://" in location or location.startswith("/") else location.replace("file:", "", 1)
