"""`topiclake ingest`: the Spark ingest job (local[*] unless --master), with a progress bar and a
summary. The same job and flags as `spark-submit jobs/ingest.py` (topiclake.lake.jobs.flags)."""

from __future__ import annotations

import typer

from .lake_job import register_job


def register(app: typer.Typer) -> None:
    from topiclake.lake.jobs.main import ingest_main

    register_job(app, "ingest", ingest_main, "Ingest topics into Delta tables, exactly once (Spark).")
