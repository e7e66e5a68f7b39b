"""Crash-safe small-file writes: temp file + fsync + rename + fsync of the directory.

A reader (or a process restarted after a crash) sees either the old content or the new one,
never a torn file. Used for checkpoints, topic files and the cluster id.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def fsync_dir(directory: str | os.PathLike) -> None:
    """Make renames/creations inside `directory` durable (POSIX needs the dir fsynced)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_temp(path: Path, data: bytes) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return Path(tmp)


def atomic_write(path: str | os.PathLike, data: bytes, *, sync_dir: bool = True) -> None:
    """Replace `path` with `data` atomically (creating parent directories). `sync_dir=False`
    leaves the rename's durability to a later fsync of the same directory (`fsync_dir`): a close
    writing several files in one partition directory fsyncs it once, not once per file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _write_temp(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(path.parent)


def create_exclusive(path: str | os.PathLike, data: bytes) -> bool:
    """Create `path` with `data` only if it does not exist, atomically and completely
    (link() of a fully written temp file fails if the name is taken). False if it existed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _write_temp(path, data)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
    return True
