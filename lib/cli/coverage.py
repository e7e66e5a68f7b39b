"""`topiclake coverage`: the offset ranges a topic table holds and the reason for every gap.
The same job and flags as `spark-submit jobs/coverage.py` (topiclake.lake.jobs.flags)."""

from __future__ import annotations

import typer

from .lake_job import register_job


def register(app: typer.Typer) -> None:
    from topiclake.lake.jobs.main import coverage_main

    register_job(app, "coverage", coverage_main, "Offset coverage of a topic table, gaps explained (Spark).")
