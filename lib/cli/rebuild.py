"""`topiclake rebuild TABLE --kind K`: rebuild a table from the log as another kind, swapped in
atomically. The same job and flags as `spark-submit jobs/rebuild.py` (topiclake.lake.jobs.flags)."""

from __future__ import annotations

import typer

from .lake_job import register_job


def register(app: typer.Typer) -> None:
    from topiclake.lake.jobs.main import rebuild_main

    register_job(app, "rebuild", rebuild_main, "Rebuild a table from the log as another kind (append|upsert) (Spark).")
