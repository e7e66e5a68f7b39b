"""Transaction state the log cleaner needs, computed from the batches themselves.

Kafka keeps aborted transactions in each segment's `.txnindex` (AbortedTxn: producer id, first
offset, last offset = the ABORT marker's offset) and the producers' last appends in the
ProducerStateManager. topiclake derives the same facts from the record batches:

- `collect_aborted_txns(batches)` (over `walk_aborted`, which a closed segment's scan in
  objectlog.aborted shares): walk the log; a producer's transaction starts at its first
  transactional data batch after its previous marker and ends at its COMMIT/ABORT marker. An
  ABORT marker closing an open transaction gives one AbortedTxn. A marker whose transaction has no
  data batch left (already cleaned away) gives none: Kafka's index may still list it, but with no
  data batch of that producer before the marker the cleaner decides the same either way.
- `AbortedIndex`: a stateless "is this data batch aborted?" lookup (for building the offset map,
  possibly one segment per Spark task): a transactional batch of producer P is aborted iff an
  AbortedTxn of P has first_offset <= batch.last_offset < marker offset. That is exactly when
  Kafka's CleanedTransactionMetadata has P's aborted transaction "ongoing".
- `CleanedTransactionMetadata`: Kafka's stateful tracker used during one cleaning round (all
  groups of the round share it), deciding which markers may go.
- `producer_last_records(batches)`: the producers' last data offsets and epochs
  (UnifiedLog.lastRecordsOfActiveProducers), rebuilt from the log.

All functions want the WHOLE log, up to the log end offset: a transaction whose data lies in the
cleaned range may end with a marker in a later (even the active) segment.
"""

from __future__ import annotations

import bisect
import heapq
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping

from .batch import BatchHeader, RecordBatch
from .control import ControlRecordType, parse_control_key


@dataclass(frozen=True, slots=True, order=True)
class AbortedTxn:
    """An aborted transaction: data from `first_offset`, ABORT marker at `last_offset`
    (the fields of a .txnindex entry, without its last-stable-offset column)."""

    first_offset: int
    producer_id: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class LastRecord:
    """Kafka's LastRecord: an active producer's last data offset (None when its latest append
    was a marker that bumped its epoch) and its current epoch."""

    last_data_offset: int | None
    producer_epoch: int


def control_type(batch: RecordBatch) -> ControlRecordType | None:
    """The type of a control batch's (single) record; None for an empty (cleaned) control batch."""
    records = batch.records()
    if not records:
        return None
    kind, _raw = parse_control_key(records[0].key)
    return kind


def walk_aborted(batches: Iterable[RecordBatch], open_first: dict[int, int] | None = None,
                 unknown_first: int | None = None) -> Iterator[tuple[AbortedTxn, Mapping[int, int]]]:
    """The aborted transactions in `batches`, in marker order, each with the first offsets of the
    transactions still open at its marker (producer id -> first offset; read it before the next
    item: it changes as the walk goes on). A producer's transaction starts at its first
    transactional data batch after its previous marker, or at `open_first`'s offset for the
    transactions open before `batches` start; a marker with no start known gives a transaction
    starting at `unknown_first` (None: none, its data is gone)."""
    started: dict[int, int] = dict(open_first or {})
    for batch in batches:
        h = batch.header
        if not h.is_transactional:
            continue
        if not h.is_control:
            started.setdefault(h.producer_id, h.base_offset)
            continue
        kind = control_type(batch)
        # An empty control batch is a marker whose whole transaction was cleaned already
        # (Kafka's producer state skips it too).
        if kind not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            continue
        first = started.pop(h.producer_id, unknown_first)
        if kind is ControlRecordType.ABORT and first is not None:
            yield AbortedTxn(first, h.producer_id, h.base_offset), started


def collect_aborted_txns(batches: Iterable[RecordBatch]) -> tuple[AbortedTxn, ...]:
    """Every aborted transaction in the log, sorted by first offset."""
    return tuple(sorted(txn for txn, _open in walk_aborted(batches)))


class AbortedIndex:
    """Stateless lookup: is a transactional data batch part of an aborted transaction?"""

    __slots__ = ("_by_producer",)

    def __init__(self, aborted: Iterable[AbortedTxn]):
        by_producer: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for txn in aborted:
            by_producer[txn.producer_id].append((txn.first_offset, txn.last_offset))
        self._by_producer = {pid: sorted(spans) for pid, spans in by_producer.items()}

    def is_aborted(self, header: BatchHeader) -> bool:
        if not header.is_transactional or header.is_control:
            return False
        spans = self._by_producer.get(header.producer_id)
        if not spans:
            return False
        # the last transaction of this producer that had started by the batch's last offset
        i = bisect.bisect_right(spans, (header.last_offset, float("inf"))) - 1
        return i >= 0 and header.last_offset < spans[i][1]


class CleanedTransactionMetadata:
    """Kafka's CleanedTransactionMetadata: transaction state carried across one cleaning round.

    Mutable on purpose: it follows the cleaner batch by batch. `on_batch_read` answers "is this
    data batch aborted (discardable)?" and `on_control_batch_read` "may this marker go?":
    an ABORT marker stays while any batch of its transaction was seen in this round (it is then
    re-added to the cleaned .txnindex, see `retained_aborted`); a COMMIT marker may go once no data
    batch of its transaction was traversed in this round.
    """

    def __init__(self, aborted: Iterable[AbortedTxn] = ()):
        self._pending: list[AbortedTxn] = list(aborted)  # min-heap by first offset
        heapq.heapify(self._pending)
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, _AbortedState] = {}
        self.retained_aborted: list[AbortedTxn] = []

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._pending and self._pending[0].first_offset <= offset:
            txn = heapq.heappop(self._pending)
            self._ongoing_aborted.setdefault(txn.producer_id, _AbortedState(txn))

    def on_batch_read(self, header: BatchHeader) -> bool:
        self._consume_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        state = self._ongoing_aborted.get(header.producer_id)
        if state is not None:
            state.seen = True
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch_read(self, header: BatchHeader, kind: ControlRecordType | None) -> bool:
        self._consume_aborted_up_to(header.last_offset)
        if kind is None:
            return True  # an empty control batch was cleaned before: safe to discard
        if kind is ControlRecordType.ABORT:
            state = self._ongoing_aborted.pop(header.producer_id, None)
            if state is not None and state.seen:
                self.retained_aborted.append(state.txn)
                return False
            return True
        if kind is ControlRecordType.COMMIT:
            if header.producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(header.producer_id)
                return False
            return True
        return False  # other control records (leader change, ...) are never discarded

    def take_retained_aborted(self) -> tuple[AbortedTxn, ...]:
        """The aborted transactions kept since the last call (one cleaned group's .txnindex)."""
        out = tuple(self.retained_aborted)
        self.retained_aborted.clear()
        return out


@dataclass(slots=True)
class _AbortedState:
    txn: AbortedTxn
    seen: bool = False


def producer_last_records(batches: Iterable[RecordBatch]) -> dict[int, LastRecord]:
    """Each producer's last data offset and epoch, as ProducerStateManager would hold them after
    appending this log: a batch with a new epoch drops the producer's batch metadata (so a marker
    that bumps the epoch leaves no data offset); a data batch records its last offset.

    An empty control batch (a marker the cleaner emptied because it was its producer's last
    append) counts as a marker of its epoch: a live broker still holds that producer state in
    memory, whereas a replay of the log alone would forget it and let the next round drop it.
    Producers Kafka would have expired (producer.id.expiration.ms) are still listed: that keeps
    a few more empty batches than Kafka might, never fewer."""
    out: dict[int, LastRecord] = {}
    for batch in batches:
        h = batch.header
        if not h.has_producer_id:
            continue
        previous = out.get(h.producer_id)
        data_offset = previous.last_data_offset if previous and previous.producer_epoch == h.producer_epoch else None
        if not h.is_control:
            data_offset = h.last_offset
        out[h.producer_id] = LastRecord(data_offset, h.producer_epoch)
    return out


def as_aborted_index(aborted: AbortedIndex | Iterable[AbortedTxn]) -> AbortedIndex:
    return aborted if isinstance(aborted, AbortedIndex) else AbortedIndex(aborted)


__all__ = ["AbortedTxn", "LastRecord", "AbortedIndex", "CleanedTransactionMetadata", "collect_aborted_txns",
           "walk_aborted", "producer_last_records", "control_type", "as_aborted_index"]
