"""`topiclake sql`: Spark SQL over every topic table (a view of its current Delta snapshot):
statements, a file, or an interactive shell. The same as `spark-submit jobs/sql.py`."""

from __future__ import annotations

import typer

from .lake_job import register_job


def register(app: typer.Typer) -> None:
    from topiclake.lake.jobs.main import sql_main, sql_server_main

    register_job(app, "sql", sql_main, "Query topic tables with Spark SQL; no query on a terminal: a shell.")
    register_job(app, "sql-server", sql_server_main,
                 "A standing Spark SQL server (Spark Connect) over the topic tables; `sql` uses it.")
