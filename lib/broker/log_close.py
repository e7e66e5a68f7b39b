"""Closing every log of a stopping broker, as Kafka's LogManager.shutdown does: the logs close on
helper threads (its num.recovery.threads.per.data.dir), and only once every one of them is
durable does each get its clean-shutdown marker.

Why threads help: a close is a handful of fsyncs, and fsyncs issued from many threads share the
file system's journal commits. One fsync after another costs 2-3 ms each on the development
machine, 16 at once about as much as one: 2,000 logs close in seconds, not half a minute.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

log = logging.getLogger(__name__)

LOG_CLOSE_THREADS = 16


def close_logs(parts: list[Any]) -> int:
    """Close the partitions (`Partition.close`, flushed and checkpointed) on LOG_CLOSE_THREADS
    helpers while the caller (the writer thread) waits, then mark the closed ones clean. Returns
    how many closed; a log whose close failed gets no marker, so its next open recovers it."""
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

    with ThreadPoolExecutor(max_workers=LOG_CLOSE_THREADS, thread_name_prefix="topiclake-close") as pool:
        closed = [part for part, ok in zip(parts, pool.map(close, parts)) if ok]
        list(pool.map(mark, closed))
    return len(closed)
