"""--data for commands that work on a local directory. A typer `Path` option would turn
`s3://bucket/root` into the relative path `s3:/bucket/root`, so these options are strings and go
through segments.storage.local_root: a URL root is refused in one line until the command
serves object-store roots."""

from __future__ import annotations

from pathlib import Path

from .output import fail


def directory_root(value: str) -> Path:
    from topiclake.segments.errors import StorageRootError
    from topiclake.segments.storage import local_root

    try:
        return local_root(value)
    except StorageRootError as exc:
        fail(exc)
