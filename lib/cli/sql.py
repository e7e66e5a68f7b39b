"""`topiclake sql "SELECT ..."`: Spark SQL over every topic table (a view of its current Delta
snapshot), on local Spark. Same as `spark-submit jobs/sql.py`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    app.command("sql")(sql)


def sql(
    query: str = typer.Argument(..., help="A Spark SQL query; tables are named after their directory."),
    fmt: str = typer.Option("table", "--format", help="table, csv or json."),
    max_rows: int = typer.Option(1000, "--max-rows", help="Rows to print at most."),
    data: Optional[Path] = typer.Option(None, "--data", help="Storage root."),
    config: Optional[Path] = typer.Option(None, "--config", help="Settings file (default conf/topiclake.toml)."),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master (default local[*])."),
) -> None:
    """Query topic tables with Spark SQL."""
    if fmt not in ("table", "csv", "json"):
        typer.echo(f"error: --format must be table, csv or json, not {fmt!r}", err=True)
        raise typer.Exit(2)
    from topiclake.lake.spark import get_session
    from topiclake.lake.sql import discover_tables, format_result, run_sql
    from topiclake.segments.settings import load_settings, storage_root
    from topiclake.segments.storage import StorageLayout

    layout = StorageLayout(storage_root(load_settings(config), data))
    spark = get_session("topiclake-sql", master=master, conf={"spark.ui.showConsoleProgress": "false"})
    typer.echo(format_result(run_sql(spark, query, discover_tables(layout), max_rows=max_rows), fmt))
