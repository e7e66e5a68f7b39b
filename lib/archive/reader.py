"""The topics' tables of a storage root as a fetch sees them: record batches of a partition from
an offset, within a byte budget; what each table holds (its first offset, where it ends).

Everything here runs on a reader thread (the broker's reader pool), never on the event loop: a
table is opened and re-read there, at most once per `ttl` seconds per topic, and each version's
file statistics and first offsets are kept until the next version.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

import numpy as np

from topiclake.segments.arrow_encode import batches_from_rows, record_sizes

from .table import Snapshot, archived_end, holds_every_record, ingest_group, load

#: topic -> (table uri, deltalake storage options or None)
Locate = Callable[[str], tuple[str, "dict[str, str] | None"]]

BATCH_BYTES = 1 << 20  # a served batch holds about this much (the log's batches are the producers')


def encode_within(rows, max_bytes: int, min_one: bool) -> bytes:
    """Rows (offset order) as record batches, no more than `max_bytes` in all; `min_one`: the
    first batch even if larger (KIP-74: a consumer never gets stuck behind a big record)."""
    if rows.num_rows == 0:
        return b""
    fits = int(np.searchsorted(np.cumsum(record_sizes(rows)), max(max_bytes, 0), side="right"))
    if fits == 0 and not min_one:
        return b""
    batches = batches_from_rows(rows.slice(0, max(fits, 1)), batch_bytes=min(BATCH_BYTES, max(max_bytes, 1)))
    out: list[bytes] = []
    total = 0
    for batch in batches:  # a batch's header may tip the last one over the limit
        if out and total + len(batch) > max_bytes:
            break
        if not out and len(batch) > max_bytes and not min_one:
            break
        out.append(batch)
        total += len(batch)
    return b"".join(out)


class TopicTables:
    """Each topic's table (`locate`), as the archive of its partitions."""

    def __init__(self, locate: Locate, *, ttl: float = 2.0, clock: Callable[[], float] = time.monotonic):
        self._locate = locate
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshots: dict[str, tuple[float, Snapshot | None]] = {}

    def snapshot(self, topic: str) -> Snapshot | None:
        """The topic's table as of at most `ttl` seconds ago (None: no table, or not an append table)."""
        with self._lock:
            seen = self._snapshots.get(topic)
            now = self._clock()
            if seen is not None and now - seen[0] < self._ttl:
                return seen[1]
            snapshot = self._load(topic, seen[1] if seen else None)
            self._snapshots[topic] = (now, snapshot)
            return snapshot

    def _load(self, topic: str, previous: Snapshot | None) -> Snapshot | None:
        uri, options = self._locate(topic)
        table = load(uri, options)  # a new object: reads of the previous snapshot may be running
        if previous is not None and table is not None and table.version() == previous.version:
            return previous
        if table is None or not holds_every_record(table):
            return None
        return Snapshot(table, topic)

    def archived_end(self, topic: str, partition: int) -> int | None:
        """The first offset of the partition the table does not hold (None: it holds none)."""
        snapshot = self.snapshot(topic)
        if snapshot is None:
            return None
        return archived_end(snapshot.table, ingest_group(topic), topic, partition)

    def first_offset(self, topic: str, partition: int) -> int | None:
        """The first offset of the partition the table holds (None: none)."""
        snapshot = self.snapshot(topic)
        if snapshot is None or self.archived_end(topic, partition) is None:
            return None
        return snapshot.first_offset(partition)

    def read(self, topic: str, partition: int, offset: int, max_bytes: int, min_one: bool) -> bytes | None:
        """Record batches of the partition's rows from `offset`; None when the table holds nothing
        at or above it (b"": it does, but not within `max_bytes`)."""
        snapshot = self.snapshot(topic)
        end = self.archived_end(topic, partition)
        if snapshot is None or end is None or offset >= end:
            return None
        rows = snapshot.read(partition, offset, end, max(max_bytes, 1))
        if rows.num_rows == 0:
            return None
        return encode_within(rows, max_bytes, min_one)
