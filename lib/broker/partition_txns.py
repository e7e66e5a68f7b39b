"""Transactions as one partition sees them: the open ones (for the last stable offset) and the
aborted ones (for read_committed fetches).

Kafka keeps the first: ProducerStateManager.ongoingTxns (producer id -> first offset of its open
transaction; the smallest is the first unstable offset, and LSO = min(that, high watermark)).
And the second in each segment's `.txnindex` (AbortedTxn: producer id, first offset, offset of
the ABORT marker). topiclake holds both in memory and writes Kafka's files too: the open ones
go into producer snapshots (currentTxnFirstOffset), the aborted ones into `.txnindex` files
(`index_entry`), and a partition opening `restore`s both, then replays the batches after the
snapshot (partition_snapshot.py). `scan_log` walks the batch headers of the whole log instead
(after a compaction swap); only control batches are read beyond their header. The same
`on_data` / `on_marker` calls serve appends, the replay and the rebuild.

Mutated only on the partition manager's I/O thread; the event loop reads `first_unstable` (an int)
and `aborted_between` (a list only ever appended to or replaced whole), never a dict mid-update.
"""

from __future__ import annotations

import bisect
import os
from typing import Iterable

from topiclake.segments.batch import BatchHeader, RecordBatch, read_header
from topiclake.segments.control import ControlRecord, ControlRecordType, parse_control_key, parse_control_record
from topiclake.segments.errors import CorruptRecordError
from topiclake.segments.file_records import iter_file_headers
from topiclake.segments.txn_index import TxnIndexEntry
from topiclake.segments.txn_metadata import AbortedTxn

END_TXN_TYPES = (ControlRecordType.COMMIT, ControlRecordType.ABORT)


class PartitionTxns:
    def __init__(self, where: str):
        self.where = where  # "topic-partition", for messages
        self._ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.first_unstable: int | None = None
        self._aborted: list[AbortedTxn] = []  # in marker order, so sorted by last_offset

    def on_data(self, header: BatchHeader, first_offset: int) -> bool:
        """A data batch is appended at `first_offset`: a transactional one may open a transaction
        (True when this one did). Live appends call it BEFORE the batch becomes visible, so that
        no read_committed fetch sees the high watermark past it while the LSO is not held."""
        if header.is_transactional and not header.is_control and header.producer_id not in self._ongoing:
            self._ongoing[header.producer_id] = first_offset
            self._recompute()
            return True
        return False

    def cancel(self, producer_id: int) -> None:
        """Undo the `on_data` that opened `producer_id`'s transaction: its append failed."""
        if self._ongoing.pop(producer_id, None) is not None:
            self._recompute()

    def on_marker(self, producer_id: int, marker_offset: int, commit: bool) -> AbortedTxn | None:
        """A COMMIT/ABORT marker was appended: the producer's transaction here is decided.
        A marker with no open transaction (a partition added but never written to) decides nothing.
        An abort is listed before the LSO moves past its data: a concurrent read_committed fetch
        that may return the data also sees it aborted."""
        first = self._ongoing.get(producer_id)
        if first is None:
            return None
        txn = None if commit else AbortedTxn(first, producer_id, marker_offset)
        if txn is not None:
            self._aborted.append(txn)  # atomic: a concurrent reader sees it or not
        del self._ongoing[producer_id]
        self._recompute()
        return txn

    def index_entry(self, txn: AbortedTxn) -> TxnIndexEntry:
        """The `.txnindex` entry of an abort `on_marker` just applied; its last stable offset is
        Kafka's lastStableOffset(completedTxn): the first offset still undecided, or the offset
        after the marker."""
        lso = txn.last_offset + 1 if self.first_unstable is None else self.first_unstable
        return TxnIndexEntry(txn.producer_id, txn.first_offset, txn.last_offset, lso)

    def restore(self, ongoing: dict[int, int], aborted: list[AbortedTxn]) -> None:
        """Start from a snapshot's open transactions and the .txnindex entries below it."""
        self._ongoing = dict(ongoing)
        self._aborted = sorted(aborted, key=lambda t: t.last_offset)
        self._recompute()

    def _recompute(self) -> None:
        self.first_unstable = min(self._ongoing.values(), default=None)

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable
        return high_watermark if first is None else min(first, high_watermark)

    def ongoing(self) -> dict[int, int]:
        return dict(self._ongoing)

    def is_ongoing(self, producer_id: int) -> bool:
        return producer_id in self._ongoing

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


def end_txn_marker(fd: int, position: int, header: BatchHeader, source: str) -> ControlRecord | None:
    """The COMMIT/ABORT record of the control batch at `position`; None for other control
    batches and for an empty (cleaned) one."""
    data = os.pread(fd, header.size, position)
    records = RecordBatch(read_header(data), data, 0, source).records()
    if not records:
        return None
    try:
        record = parse_control_record(records[0])
    except CorruptRecordError:
        # A marker whose value is cut short still says COMMIT or ABORT in its key: settle the
        # transaction by that (as the rebuild always did) rather than refuse to open the partition.
        kind, raw = parse_control_key(records[0].key)
        record = ControlRecord(kind, raw, None)
    return record if record.type in END_TXN_TYPES else None


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
                marker = end_txn_marker(fd, pos, header, str(path))
                if marker is not None:
                    txns.on_marker(header.producer_id, header.base_offset, marker.type is ControlRecordType.COMMIT)
        finally:
            os.close(fd)
