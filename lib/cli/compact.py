"""`topiclake compact`: the Spark compaction job on local Spark (local[*] unless --master), with a
progress bar and a summary (a line per compacted partition, one counting the skipped ones).
Same options as `spark-submit jobs/compact.py`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .output import DEBUG_OPTION, reported_errors, stderr_console


def register(app: typer.Typer) -> None:
    app.command("compact")(compact)


def compact(
    topic: list[str] = typer.Option([], "--topic", help="Topic to compact (repeatable, or a,b,c; "
                                    "default: every compacted topic)."),
    data: Optional[str] = typer.Option(None, "--data", help="Storage root (a directory or s3://bucket/prefix)."),
    config: Optional[Path] = typer.Option(None, "--config", help="Settings file (default conf/topiclake.toml)."),
    force: bool = typer.Option(False, "--force", help="Ignore min.cleanable.dirty.ratio."),
    target_task_bytes: int = typer.Option(64 * 1024 * 1024, "--target-task-bytes"),
    now_ms: Optional[int] = typer.Option(None, "--now-ms", help="The cleaner's clock (epoch ms)."),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master (default local[*])."),
    debug: bool = DEBUG_OPTION,
) -> None:
    """Compact topics whose cleanup.policy includes compact (Kafka's log cleaner, on Spark)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from topiclake.lake.runs.compaction import CompactOptions, compacted_partitions, format_summary, run
    from topiclake.segments.settings import load_settings, storage_location, storage_root
    from topiclake.store.root import LocalRoot

    columns = (TextColumn("compact"), BarColumn(), MofNCompleteColumn(), TextColumn("tasks"), TimeElapsedColumn())
    with reported_errors(debug):
        settings = load_settings(config)
        location = storage_location(settings, data)  # a directory or s3://bucket/prefix
        options = CompactOptions(root=storage_root(settings, data) if isinstance(location, LocalRoot) else location,
                                 topics=tuple(t for arg in topic for t in arg.split(",") if t),
                                 force=force, target_task_bytes=target_task_bytes, now_ms=now_ms)
        compacted_partitions(options.root, options.topics)  # a wrong --topic fails before Spark starts
        with Progress(*columns, console=stderr_console(), transient=True) as bar:
            job = bar.add_task("compact", total=None)
            result = run(options, master=master, spark_conf={"spark.ui.showConsoleProgress": "false"},
                         progress=lambda done, total: bar.update(job, completed=done, total=total))
    typer.echo(format_summary(result))
    if result.errors:
        raise typer.Exit(1)
