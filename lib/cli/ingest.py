"""`topiclake ingest`: the Spark ingest job on local Spark (local[*] unless --master), with a
progress bar and a summary. Same options as `spark-submit jobs/ingest.py`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    app.command("ingest")(ingest)


def ingest(
    topic: list[str] = typer.Option(..., "--topic", help="Topic to ingest (repeatable, or a,b,c)."),
    table: Optional[str] = typer.Option(None, "--table", help="Table name under <root>/tables, or a path/URI."),
    group: Optional[str] = typer.Option(None, "--group", help="Consumer group id (default topiclake-ingest-<table>)."),
    data: Optional[Path] = typer.Option(None, "--data", help="Storage root."),
    config: Optional[Path] = typer.Option(None, "--config", help="Settings file (default conf/topiclake.toml)."),
    starting_offsets: Optional[str] = typer.Option(None, "--starting-offsets",
                                                   help="New groups: earliest, latest, JSON or ISO time."),
    ending_offsets: Optional[str] = typer.Option(None, "--ending-offsets", help="latest or JSON."),
    target_task_bytes: int = typer.Option(128 * 1024 * 1024, "--target-task-bytes"),
    partition_by: str = typer.Option("record_date", "--partition-by", help="record_date or none (new tables)."),
    allow_data_loss: bool = typer.Option(False, "--allow-data-loss",
                                         help="Record retention gaps instead of failing."),
    schemas: Path = typer.Option(Path("conf/schemas"), "--schemas",
                                 help="Directory of <table>.json value schemas (typed columns)."),
    expectations: Path = typer.Option(Path("conf/expectations"), "--expectations",
                                      help="Directory of <table>.json great-expectations suites."),
    bootstrap: Optional[str] = typer.Option(None, "--bootstrap",
                                            help="Broker to mirror offsets to (default: registered brokers; 'none': off)."),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master (default local[*])."),
) -> None:
    """Ingest topics into Delta tables, exactly once (Spark)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from topiclake.lake.errors import LakeError
    from topiclake.lake.ingest import IngestOptions, format_summary, run
    from topiclake.segments.errors import TopiclakeError
    from topiclake.segments.settings import load_settings, storage_root

    options = IngestOptions(
        topics=tuple(t for arg in topic for t in arg.split(",") if t),
        root=storage_root(load_settings(config), data), table=table, group=group,
        starting_offsets=starting_offsets, ending_offsets=ending_offsets, target_task_bytes=target_task_bytes,
        partition_by=() if partition_by == "none" else tuple(partition_by.split(",")),
        allow_data_loss=allow_data_loss, schemas_dir=schemas, expectations_dir=expectations,
        bootstrap=bootstrap)
    console = Console(stderr=True)
    columns = (TextColumn("ingest"), BarColumn(), MofNCompleteColumn(), TextColumn("tasks"), TimeElapsedColumn())
    try:
        with Progress(*columns, console=console, transient=True) as bar:
            job = bar.add_task("ingest", total=None)
            # Spark's own console bar would fight with ours for the terminal
            result = run(options, master=master, spark_conf={"spark.ui.showConsoleProgress": "false"},
                         progress=lambda done, total: bar.update(job, completed=done, total=total))
    except (LakeError, TopiclakeError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    typer.echo(format_summary(result))
