"""`topiclake compact`: the Spark compaction job on local Spark (local[*] unless --master), with a
progress bar and a per-partition summary. Same options as `spark-submit jobs/compact.py`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    app.command("compact")(compact)


def compact(
    topic: list[str] = typer.Option([], "--topic", help="Topic to compact (repeatable, or a,b,c; "
                                    "default: every compacted topic)."),
    data: Optional[Path] = typer.Option(None, "--data", help="Storage root."),
    config: Optional[Path] = typer.Option(None, "--config", help="Settings file (default conf/topiclake.toml)."),
    force: bool = typer.Option(False, "--force", help="Ignore min.cleanable.dirty.ratio."),
    target_task_bytes: int = typer.Option(64 * 1024 * 1024, "--target-task-bytes"),
    now_ms: Optional[int] = typer.Option(None, "--now-ms", help="The cleaner's clock (epoch ms)."),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master (default local[*])."),
) -> None:
    """Compact topics whose cleanup.policy includes compact (Kafka's log cleaner, on Spark)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from topiclake.lake.compaction import CompactOptions, format_summary, run
    from topiclake.segments.errors import TopiclakeError
    from topiclake.segments.settings import load_settings, storage_root

    options = CompactOptions(root=storage_root(load_settings(config), data),
                             topics=tuple(t for arg in topic for t in arg.split(",") if t),
                             force=force, target_task_bytes=target_task_bytes, now_ms=now_ms)
    console = Console(stderr=True)
    columns = (TextColumn("compact"), BarColumn(), MofNCompleteColumn(), TextColumn("tasks"), TimeElapsedColumn())
    try:
        with Progress(*columns, console=console, transient=True) as bar:
            job = bar.add_task("compact", total=None)
            result = run(options, master=master, spark_conf={"spark.ui.showConsoleProgress": "false"},
                         progress=lambda done, total: bar.update(job, completed=done, total=total))
    except TopiclakeError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    typer.echo(format_summary(result))
    if result.errors:
        raise typer.Exit(1)
