"""Crash-safe small-file writes: temp file + fsync + rename + fsync of the directory.

A reader (or a process restarted after a crash) sees either the old content or the new one,
never a torn file. Used for checkpoints, topic files and the cluster id.

`deferred_writes` and `sync_filesystem`: a stopping broker closes thousands of logs, ~8 fsyncs
and 3 small files each. Its close threads skip the fsyncs and leave each small file in its temp
file; one syncfs(2) then makes all of it durable at once, and only then are the temp files
renamed into place (log_close). No name ever points at content that is not durable, as here.
"""

from __future__ import annotations

import ctypes
import logging
import os
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

_log = logging.getLogger(__name__)

Rename = tuple[Path, Path]  # (a written temp file, the name it is to replace)

_deferring = threading.local()  # .renames: the list a thread's deferred writes go to, or None


@contextmanager
def deferred_writes() -> Iterator[list[Rename]]:
    """While inside, this thread's `fsync`, `fsync_dir` and `atomic_write` skip their fsyncs, and
    `atomic_write` leaves its data in the temp file, adding (temp, path) to the list yielded: the
    caller syncs the file system (`sync_filesystem`), then renames them (`os.replace`), or
    unlinks them to give up."""
    renames: list[Rename] = []
    outer = _deferred()
    _deferring.renames = renames
    try:
        yield renames
    finally:
        _deferring.renames = outer


def _deferred() -> list[Rename] | None:
    return getattr(_deferring, "renames", None)


def fsync(fd: int, *, data_only: bool = False) -> None:
    """os.fsync (os.fdatasync with `data_only`), unless this thread defers its writes."""
    if _deferred() is None:
        (os.fdatasync if data_only else os.fsync)(fd)


def _libc_syncfs() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).syncfs
    except (AttributeError, OSError):  # not Linux (or no glibc): no syncfs
        return None


_SYNCFS = _libc_syncfs()


# File systems whose syncfs writes every dirty page and journal of theirs to storage. Not FUSE
# (syncfs reaches no FUSE server but virtiofs) nor anything unknown: those fsync file by file.
SYNCFS_FILE_SYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "tmpfs"})
# Linux 5.8 made syncfs report a file's write-back error, 5.17 the file system's own failure to
# sync (a journal commit): before, either could go unreported and a marker land over lost data.
SYNCFS_REPORTS_ERRORS = (5, 17)


def can_sync_filesystem(fd: int | None = None) -> bool:
    """Whether `sync_filesystem` makes everything durable and reports write-back errors here (else:
    fsync file by file): syncfs(2), a kernel that reports errors through it, and with `fd` (an open
    directory) a file system known to sync all it holds."""
    if _SYNCFS is None or kernel_version() < SYNCFS_REPORTS_ERRORS:
        return False
    return fd is None or file_system_type(fd) in SYNCFS_FILE_SYSTEMS


def kernel_version() -> tuple[int, int]:
    try:
        major, minor = os.uname().release.split(".")[:2]
        return int(major), int("".join(c for c in minor if c.isdigit()) or 0)
    except (AttributeError, ValueError):
        return (0, 0)


# statfs(2)'s f_type of the file systems named here (linux/magic.h; ext2, ext3 and ext4 share one).
_FILE_SYSTEM_MAGIC = {0xEF53: "ext4", 0x58465342: "xfs", 0x9123683E: "btrfs", 0xF2F52010: "f2fs",
                      0x01021994: "tmpfs", 0x65735546: "fuse", 0x794C7630: "overlay", 0x6969: "nfs",
                      0x9FA0: "proc"}


def _libc_statfs() -> tuple[Callable[..., int], Callable[..., int]] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.statfs, libc.fstatfs
    except (AttributeError, OSError):
        return None


_STATFS = _libc_statfs()


def file_system_type(where: str | int) -> str | None:
    """The type of the file system holding `where` (a path or an open descriptor), from statfs(2)'s
    f_type (the file system itself: a btrfs subvolume, a bind mount or a path with odd characters
    alike). None when unknown: no statfs, an error, or a type not named here."""
    if _STATFS is None:
        return None
    result = ctypes.create_string_buffer(256)  # struct statfs (120 bytes on 64-bit Linux); f_type first
    if isinstance(where, int):
        failed = _STATFS[1](where, result)
    else:
        failed = _STATFS[0](os.fsencode(where), result)
    if failed != 0:
        return None
    magic = ctypes.c_long.from_buffer(result).value & 0xFFFFFFFF
    return _FILE_SYSTEM_MAGIC.get(magic)


def sync_filesystem(fd: int) -> None:
    """syncfs(2): everything written to the file system holding the open `fd` is durable when
    this returns (Linux 5.17+ also reports a write-back error of any file since `fd` was opened,
    and a failed journal commit)."""
    if _SYNCFS is None:
        raise OSError("syncfs(2) is not available here")
    if _SYNCFS(fd) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"syncfs: {os.strerror(errno)}")


def fsync_dir(directory: str | os.PathLike) -> None:
    """Make renames/creations inside `directory` durable (POSIX needs the dir fsynced)."""
    if _deferred() is not None:
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_SMALL = 65536


def read_small(path: str | os.PathLike) -> bytes:
    """A small file's bytes (FileNotFoundError if it is missing): `Path.read_bytes` without the
    buffered file object's checks (9 system calls, 3 here): a start reads 3 small files per log,
    and each call lets another thread take the GIL."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = [os.read(fd, _SMALL)]
        while len(chunks[-1]) == _SMALL:  # a regular file reads short only at its end
            chunks.append(os.read(fd, _SMALL))
        return b"".join(chunks)
    finally:
        os.close(fd)


def _write_temp(path: Path, data: bytes, *, sync: bool = True) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if sync:
                os.fsync(f.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return Path(tmp)


def atomic_write(path: str | os.PathLike, data: bytes, *, sync_dir: bool = True, deferrable: bool = True) -> None:
    """Replace `path` with `data` atomically (creating parent directories). `sync_dir=False`
    leaves the rename's durability to a later fsync of the same directory (`fsync_dir`): a close
    writing several files in one partition directory fsyncs it once, not once per file.
    `deferrable=False`: renamed now even inside `deferred_writes` (a write under a lock that
    others write the same file under: a late rename could replace a newer content)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    renames = _deferred() if deferrable else None
    tmp = _write_temp(path, data, sync=renames is None)
    if renames is not None:
        renames.append((tmp, path))
        return
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


# A temp file this old is no live writer's: its write (a few small bytes) and rename take
# milliseconds. A writer stalled longer finds its rename failing, and loses nothing: the file it
# was replacing is untouched. Younger ones may be a maintenance job's or a fenced leader's.
STALE_TEMP_SECONDS = 60.0


def remove_stale_temp_files(directory: Path, names: list[str]) -> set[str]:
    """Remove `atomic_write`'s temp files (`.<name>.<random>.tmp`) older than STALE_TEMP_SECONDS:
    the content never replaced its file, and nothing reads it. One that cannot be removed stays
    (the log opens all the same). Returns the names removed."""
    now = time.time()
    removed: set[str] = set()
    for name in names:
        if not (name.startswith(".") and name.endswith(".tmp")):
            continue
        path = directory / name
        try:
            if now - path.stat().st_mtime >= STALE_TEMP_SECONDS:
                path.unlink()
                removed.add(name)
        except FileNotFoundError:  # renamed or removed meanwhile
            continue
        except OSError as exc:
            _log.warning("temp file %s left in place: %s", path, exc)
    if removed:
        _log.debug("removed %d temp file(s) a crash left in %s", len(removed), directory)
    return removed


def remove_stale_root_temp_files(root: Path, directories: Iterable[Path]) -> int:
    """`remove_stale_temp_files` in each of the root-level `directories` that exists (topic
    files, the config store, broker registrations: the log directories are swept as each log
    opens); how many were removed."""
    removed = 0
    for directory in directories:
        try:
            names = os.listdir(directory)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            _log.warning("temp files in %s not looked at: %s", directory, exc)
            continue
        removed += len(remove_stale_temp_files(directory, names))
    if removed:
        _log.info("removed %d temp file(s) a crash left under %s", removed, root)
    return removed
