"""SQL over topic tables: the current Delta snapshot only."""

from __future__ import annotations

import json

from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.sql.query import format_result, run_sql
from topiclake.lake.table.location import discover_tables
from topiclake.segments.storage import StorageLayout


def test_sql_sees_exactly_the_current_snapshot(spark, root, topic_writer):
    w = topic_writer("orders", partitions=2)
    w.produce(0, [b"a", b"b"], headers=[("h", b"1")])
    w.produce(1, [b"c"])
    ingest(spark, IngestOptions(topics=("orders",), root=root))
    # a stray file (as a crashed run leaves) must not be read
    stray = next((root / "tables" / "orders").rglob("*.parquet"))
    (stray.parent / "part-stray.parquet").write_bytes(stray.read_bytes())
    tables = discover_tables(StorageLayout(root))
    assert list(tables) == ["orders"]

    result = run_sql(spark, "SELECT partition, count(*) AS n, min(record_date) AS d FROM orders "
                            "GROUP BY partition ORDER BY partition", tables)
    assert result.to_pylist() == [{"partition": 0, "n": 2, "d": __import__("datetime").date(2024, 5, 1)},
                                  {"partition": 1, "n": 1, "d": __import__("datetime").date(2024, 5, 1)}]

    rows = run_sql(spark, "SELECT offset, value, headers FROM orders WHERE partition = 0 ORDER BY offset", tables)
    lines = format_result(rows, "json").splitlines()
    assert json.loads(lines[0]) == {"offset": 0, "value": "YQ==", "headers": [{"key": "h", "value": "MQ=="}]}
    assert format_result(rows, "csv").splitlines()[0] == "offset,value,headers"
    text = format_result(rows, "table")
    assert text.splitlines()[0].split(" | ")[:2] == ["offset", "value"] and text.endswith("(2 rows)")


def test_empty_table_is_queryable(spark, root, topic_writer):
    topic_writer("quiet")
    ingest(spark, IngestOptions(topics=("quiet",), root=root))  # records the group's start, no files
    tables = discover_tables(StorageLayout(root))
    assert run_sql(spark, "SELECT count(*) AS n FROM quiet", tables).to_pylist() == [{"n": 0}]
