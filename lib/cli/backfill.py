"""`topiclake backfill`: re-read an offset range of one partition into its table, in one commit.
The same job and flags as `spark-submit jobs/backfill.py` (topiclake.lake.jobs.flags)."""

from __future__ import annotations

import typer

from .lake_job import register_job


def register(app: typer.Typer) -> None:
    from topiclake.lake.jobs.main import backfill_main

    register_job(app, "backfill", backfill_main, "Replace offsets [--from, --to) of a partition in its table (Spark).")
