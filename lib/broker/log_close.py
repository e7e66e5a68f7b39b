"""Closing every log of a stopping broker, as Kafka's LogManager.shutdown does: the logs close on
helper threads (its num.recovery.threads.per.data.dir), and no log gets its clean-shutdown
marker before every one of them is durable.

A close writes a handful of files per log (the active segment and its indexes, a producer
snapshot, the recovery-point checkpoint, the marker): ~8 fsyncs. 2,000 logs made 16,000, 3-7 s
even spread over 16 threads (bench/stop_start.py). Where the C library has syncfs(2) (Linux) and
every log lies on the root's file system, the closes skip their fsyncs and leave their small
files in temp files (atomic.deferred_writes); one syncfs makes all of it durable; only then are
the temp files renamed into place, the markers last, and one more syncfs makes the renames
durable. A crash before the first syncfs leaves every log as it was before the stop, unmarked
(each recovers at its next open; the temp files stay behind); a crash between the two leaves
some renames undone, each log's files old or new, every one complete, and no marker of a log
whose data is not durable. (Renaming after the sync also helps on ext4 without a journal, where
creating a file scans past every inode freed in the last minute or so: a rename over an old
checkpoint frees one, and with every create before the renames a stop's creates do not pay for
its own frees; bench/README.md.) Elsewhere each close fsyncs its own files as it goes, the
markers after all of them.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from topiclake.segments.atomic import Rename, can_sync_filesystem, deferred_writes, sync_filesystem

log = logging.getLogger(__name__)

LOG_CLOSE_THREADS = 16


def close_logs(parts: list[Any], root_fd: int | None = None) -> int:
    """Close the partitions (`Partition.close`, flushed and checkpointed) on LOG_CLOSE_THREADS
    helpers while the caller (the writer thread) waits, and mark the closed ones clean once they
    are durable. Returns how many closed; a log whose close failed gets no marker, so its next
    open recovers it. `root_fd`: an open directory of the root, opened when the broker started
    (a syncfs through it reports write-back errors since then, as each file's fsync would)."""
    with ThreadPoolExecutor(max_workers=LOG_CLOSE_THREADS, thread_name_prefix="topiclake-close") as pool:
        if root_fd is not None and _one_sync_covers(parts, root_fd):
            return _close_synced_at_once(pool, parts, root_fd)
        return _close_one_by_one(pool, parts)


def _one_sync_covers(parts: list[Any], root_fd: int) -> bool:
    """Whether one syncfs of the root's file system makes every one of the logs durable."""
    if not can_sync_filesystem(root_fd):
        return False
    device = os.fstat(root_fd).st_dev
    try:
        return all(os.stat(part.log.directory).st_dev == device for part in parts)
    except OSError:
        return False


def _close_synced_at_once(pool: ThreadPoolExecutor, parts: list[Any], root_fd: int) -> int:
    def close(part: Any) -> list[Rename] | None:
        with deferred_writes() as renames:
            try:
                part.close()  # its marker too, left in a temp file with the rest
            except Exception:
                log.exception("closing %s-%d failed", part.topic, part.index)
                _discard(renames)
                return None
        return renames

    def rename(part_renames: tuple[Any, list[Rename]]) -> None:
        part, renames = part_renames
        for at, (temp, path) in enumerate(renames):  # in the order written: the marker last
            try:
                os.replace(temp, path)
            except OSError:
                log.exception("completing the close of %s-%d failed: no clean-shutdown marker", part.topic, part.index)
                _discard(renames[at:])
                return

    closed = [(part, renames) for part, renames in zip(parts, pool.map(close, parts)) if renames is not None]
    if not _synced(root_fd, "the closed logs"):
        for _part, renames in closed:
            _discard(renames)  # not durable: no marker (each log recovers at its next open)
        return len(closed)
    list(pool.map(rename, closed))
    _synced(root_fd, "the clean-shutdown markers")
    return len(closed)


def _close_one_by_one(pool: ThreadPoolExecutor, parts: list[Any]) -> int:
    def close(part: Any) -> bool:
        try:
            part.close(mark_clean=False)
            return True
        except Exception:
            log.exception("closing %s-%d failed", part.topic, part.index)
            return False

    def mark(part: Any) -> None:
        try:
            part.log.mark_clean_shutdown()
        except Exception:
            log.exception("marking %s-%d clean failed", part.topic, part.index)

    closed = [part for part, ok in zip(parts, pool.map(close, parts)) if ok]
    list(pool.map(mark, closed))
    return len(closed)


def _synced(root_fd: int, what: str) -> bool:
    try:
        sync_filesystem(root_fd)
        return True
    except OSError:
        log.exception("syncing %s failed", what)
        return False


def _discard(renames: list[Rename]) -> None:
    for temp, _path in renames:
        try:
            os.unlink(temp)
        except OSError:
            pass
