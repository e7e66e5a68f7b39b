"""`topiclake merge-segments`: adjacent small closed segments of a bucket root's partitions merged
into one segment each by a manifest commit (topiclake.lake.runs.bucket_merge); no Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .output import DEBUG_OPTION, fail, reported_errors


def register(app: typer.Typer) -> None:
    app.command("merge-segments")(merge_segments)


def merge_segments(
    topic: list[str] = typer.Option([], "--topic", help="Topic (repeatable, or a,b,c; default: every topic)."),
    data: Optional[str] = typer.Option(None, "--data", help="Storage root (s3://bucket/prefix)."),
    config: Optional[Path] = typer.Option(None, "--config", help="Settings file (default conf/topiclake.toml)."),
    below_bytes: Optional[int] = typer.Option(None, "--below-bytes", min=1,
                                              help="A segment smaller is merged (default: segment.bytes / 2)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be merged and deleted; change nothing."),
    debug: bool = DEBUG_OPTION,
) -> None:
    """Merge small closed segments of an object-store root into larger ones (a manifest commit)."""
    from topiclake.lake.runs.bucket_merge import format_merges, merge_bucket
    from topiclake.objectlog.garbage import DEFAULT_DELETE_GRACE_MS
    from topiclake.segments.settings import load_settings, section, storage_location
    from topiclake.store.root import S3Root

    with reported_errors(debug):
        settings = load_settings(config)
        root = storage_location(settings, data)
        if not isinstance(root, S3Root):
            fail(f"merge-segments serves object-store roots (s3://bucket/prefix) only, not {root}")
        grace_ms = int(section(settings, "storage").get("delete_grace_ms", DEFAULT_DELETE_GRACE_MS))
        results = merge_bucket(root, tuple(t for arg in topic for t in arg.split(",") if t),
                               below_bytes=below_bytes, dry_run=dry_run, grace_ms=grace_ms)
    typer.echo(format_merges(results, dry_run=dry_run))
