"""`topiclake data-docs`: great-expectations' Data Docs site of the validations that ingest and
backfill stored under <root>/quality/results (every run stores one; building the HTML site loads
great-expectations, so the jobs leave it to this command unless given --data-docs). On an
object-store root the site's files are put under quality/ in the bucket (`bucket_docs`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .output import DEBUG_OPTION, reported_errors


def register(app: typer.Typer) -> None:
    app.command("data-docs")(data_docs)


def data_docs(
    data: Optional[str] = typer.Option(None, "--data", help="Storage root."),
    config: Optional[Path] = typer.Option(None, "--config", help="Settings file (default conf/topiclake.toml)."),
    debug: bool = DEBUG_OPTION,
) -> None:
    """Build the Data Docs site (great-expectations) from the stored validation results."""
    from topiclake.lake.errors import UsageError
    from topiclake.lake.jobs import preflight
    from topiclake.lake.quality import gate

    with reported_errors(debug):
        root = preflight.resolve_tables_root(str(config) if config else None, data)
        if isinstance(root, Path):
            where = gate.quality_dir(root) / "results"
            count = sum(1 for _ in where.rglob("*.json"))
            index = gate.build_data_docs(root) if count else None
        else:  # an object-store root: built in a scratch directory, its files put back in the bucket
            from topiclake.lake.quality.bucket_docs import build_bucket_data_docs

            where = root.uri("quality", "results")
            count, index = build_bucket_data_docs(root)
        if not count:
            raise UsageError(f"no validation results under {where}: ingest or backfill a table first")
    typer.echo(f"Data Docs of {count} validations: {index}")
