"""`topiclake retain`: segment retention and table maintenance, the same job as
`spark-submit jobs/retention.py` (it needs no Spark), with a summary."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .output import DEBUG_OPTION, reported_errors


def register(app: typer.Typer) -> None:
    app.command("retain")(retain)


def retain(
    topic: list[str] = typer.Option([], "--topic", help="Topic (repeatable, or a,b,c; default: all)."),
    data: Optional[Path] = typer.Option(None, "--data", help="Storage root."),
    config: Optional[Path] = typer.Option(None, "--config", help="Settings file (default conf/topiclake.toml)."),
    protect_groups: list[str] = typer.Option([], "--protect-groups", help="Groups whose uncommitted offsets stay."),
    now_ms: Optional[int] = typer.Option(None, "--now-ms", help="Retention clock (epoch ms)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Report only."),
    table: list[str] = typer.Option([], "--table", help="Table for table maintenance (default: all)."),
    table_retention_days: Optional[int] = typer.Option(None, "--table-retention-days"),
    optimize: bool = typer.Option(False, "--optimize", help="Compact small files of the tables."),
    target_file_bytes: Optional[int] = typer.Option(None, "--target-file-bytes"),
    vacuum_hours: Optional[int] = typer.Option(None, "--vacuum-hours"),
    debug: bool = DEBUG_OPTION,
) -> None:
    """Delete old segments (retention.ms / retention.bytes) and maintain the tables."""
    import argparse

    from topiclake.lake.retention import format_summary, options_from_args, retain as run_retention

    args = argparse.Namespace(topic=topic, data=data, config=config, protect_groups=protect_groups, now_ms=now_ms,
                              dry_run=dry_run, table=table, table_retention_days=table_retention_days,
                              optimize=optimize, target_file_bytes=target_file_bytes, vacuum_hours=vacuum_hours)
    with reported_errors(debug):
        result = run_retention(options_from_args(args))
    typer.echo(format_summary(result))
    if result.errors:
        raise typer.Exit(1)
