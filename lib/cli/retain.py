"""`topiclake retain`: segment retention and the tables' maintenance, the same job and flags as
`spark-submit jobs/retention.py` (topiclake.lake.jobs.flags): the segments need no Spark, the tables'
maintenance runs through delta-spark (local[*] unless --master)."""

from __future__ import annotations

import typer

from .lake_job import register_job


def register(app: typer.Typer) -> None:
    from topiclake.lake.jobs.main import retention_main

    register_job(app, "retain", retention_main, "Delete old segments (retention.ms / retention.bytes) and "
                                                "maintain the tables (retention by age, OPTIMIZE, VACUUM).")
