"""spark-submit entry point: Spark SQL over the topic tables (each a view of its current snapshot).

    spark-submit jobs/sql.py "SELECT topic, count(*) FROM orders GROUP BY topic" [--format table|csv|json]
"""

from __future__ import annotations

import argparse
import sys

from topiclake.lake.spark import get_session
from topiclake.lake.sql import discover_tables, format_result, run_sql
from topiclake.segments.settings import load_settings, storage_root
from topiclake.segments.storage import StorageLayout


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="sql.py", description=__doc__.split("\n\n")[0])
    p.add_argument("query")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--max-rows", type=int, default=1000, help="rows to print at most (default 1000)")
    p.add_argument("--data", help="storage root")
    p.add_argument("--config", help="settings file (default conf/topiclake.toml)")
    p.add_argument("--master", help="Spark master when not run by spark-submit (default local[*])")
    args = p.parse_args(argv)
    layout = StorageLayout(storage_root(load_settings(args.config), args.data))
    spark = get_session("topiclake-sql", master=args.master)
    result = run_sql(spark, args.query, discover_tables(layout), max_rows=args.max_rows)
    print(format_result(result, args.format))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
