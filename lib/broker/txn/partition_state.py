"""Transactions as one partition sees them: the open ones (for the last stable offset) and the
aborted ones (for read_committed fetches).

Kafka keeps the first: ProducerStateManager.ongoingTxns (producer id -> first offset of its open
transaction; the smallest is the first unstable offset, and LSO = min(that, high watermark)).
And the second in each segment's `.txnindex` (AbortedTxn: producer id, first offset, offset of
the ABORT marker). topiclake holds both in memory and rebuilds them when the partition opens by
walking the batch headers of the whole log (`scan_log`); only control batches are read beyond
their header. The same `on_data` / `on_marker` calls serve appends and the rebuild.

Mutated only on the partition manager's I/O thread; the event loop reads `first_unstable` (an int)
and `aborted_between` (a list only ever appended to or replaced whole), never a dict mid-update.
"""

from __future__ import annotations

import bisect
import os
from typing import Iterable

from topiclake.segments.batch import BatchHeader, RecordBatch, read_header
from topiclake.segments.control import ControlRecordType, parse_control_key
from topiclake.segments.file_records import iter_file_headers
from topiclake.segments.txn_metadata import AbortedTxn


class PartitionTxns:
    def __init__(self, where: str):
        self.where = where  # "topic-partition", for messages
        self._ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.first_unstable: int | None = None
        self._aborted: list[AbortedTxn] = []  # in marker order, so sorted by last_offset

    def on_data(self, header: BatchHeader, first_offset: int) -> None:
        """A data batch was appended at `first_offset`: a transactional one may open a transaction."""
        if header.is_transactional and not header.is_control and header.producer_id not in self._ongoing:
            self._ongoing[header.producer_id] = first_offset
            self._recompute()

    def on_marker(self, producer_id: int, marker_offset: int, commit: bool) -> AbortedTxn | None:
        """A COMMIT/ABORT marker was appended: the producer's transaction here is decided.
        A marker with no open transaction (a partition added but never written to) decides nothing."""
        first = self._ongoing.pop(producer_id, None)
        if first is None:
            return None
        self._recompute()
        if commit:
            return None
        txn = AbortedTxn(first, producer_id, marker_offset)
        self._aborted.append(txn)  # atomic: a concurrent reader sees it or not
        return txn

    def _recompute(self) -> None:
        self.first_unstable = min(self._ongoing.values(), default=None)

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable
        return high_watermark if first is None else min(first, high_watermark)

    def ongoing(self) -> dict[int, int]:
        return dict(self._ongoing)

    def aborted(self) -> tuple[AbortedTxn, ...]:
        return tuple(self._aborted)

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping offsets [start, end) (Kafka's collectAbortedTxns:
        marker at or after `start`, first offset before `end`), sorted by first offset."""
        aborted = self._aborted
        i = bisect.bisect_left(aborted, start, key=lambda t: t.last_offset)
        return sorted(t for t in aborted[i:] if t.first_offset < end)

    def forget_before(self, log_start_offset: int) -> None:
        """Drop aborted transactions whose marker retention deleted (nothing left to filter)."""
        if self._aborted and self._aborted[0].last_offset < log_start_offset:
            self._aborted = [t for t in self._aborted if t.last_offset >= log_start_offset]


def marker_type(fd: int, position: int, header: BatchHeader, source: str) -> ControlRecordType | None:
    """The type of the control batch at `position` (None for an empty, cleaned one)."""
    data = os.pread(fd, header.size, position)
    records = RecordBatch(read_header(data), data, 0, source).records()
    if not records:
        return None
    kind, _raw = parse_control_key(records[0].key)
    return kind


def scan_log(paths: Iterable[os.PathLike], txns: PartitionTxns) -> None:
    """Replay the transactional batches of every segment file, oldest first, into `txns`."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue  # swapped away by a maintenance job since the listing
        try:
            for pos, header in iter_file_headers(fd, 0, os.fstat(fd).st_size, source=str(path)):
                if not header.is_transactional:
                    continue
                if not header.is_control:
                    txns.on_data(header, header.base_offset)
                    continue
                kind = marker_type(fd, pos, header, str(path))
                if kind in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                    txns.on_marker(header.producer_id, header.base_offset, kind is ControlRecordType.COMMIT)
        finally:
            os.close(fd)
