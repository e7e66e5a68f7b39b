"""Idempotent-producer state of one partition (Kafka's ProducerStateManager, the parts an
idempotent, non-transactional producer needs).

Per producer id: the current epoch and the metadata of its last five batches (first/last
sequence and offsets, as Kafka's ProducerStateEntry keeps NUM_BATCHES_TO_RETAIN = 5). A batch
whose sequence range matches a cached one is a retry: it is answered with the original offsets
and not written again. Otherwise the first sequence must follow the last one (or be 0 for a new
epoch); anything else is OUT_OF_ORDER_SEQUENCE_NUMBER.

The state survives restarts in Kafka's producer snapshots (`to_snapshot` / `load`, written on
segment roll and clean close, see partition_snapshot.py) plus a replay of the batches after the
snapshot (`observe` on each batch header), so a producer retrying across a broker restart still
gets its duplicate detected. A snapshot keeps only each producer's LAST batch, as Kafka's does;
`restore_windows` fills the rest of a recently active producer's window back from the batch
headers just below the snapshot (Kafka's new leader has them from replicating every batch), so a
producer retrying its in-flight batches after a failover or restart is answered with duplicates,
not OUT_OF_ORDER_SEQUENCE_NUMBER.

Expiration (Kafka's removeExpiredProducers / isProducerExpired): a producer with no open
transaction whose last timestamp (the max timestamp of its last batch, or its last marker's
timestamp) is `producer.id.expiration.ms` or more behind the wall clock is forgotten: by the
broker's periodic check (`remove_expired`) and when a snapshot is loaded (`load`). A batch from
it afterwards is treated like any unknown producer's. Mutated only on the partition manager's
I/O thread.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Container, Iterable

from topiclake.segments.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, NO_TIMESTAMP, BatchHeader
from topiclake.segments.producer_snapshot import NO_OFFSET, ProducerSnapshotEntry

from .errors import InvalidProducerEpoch, OutOfOrderSequence

BATCHES_TO_RETAIN = 5
EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms default
EXPIRATION_CHECK_INTERVAL_MS = 600_000  # producer.id.expiration.check.interval.ms
_SEQ_MASK = 0x7FFFFFFF
# A client retries a batch until its delivery.timeout.ms (120 s by default in Java and librdkafka):
# producers idle longer than this have nothing in flight, and their windows are not read back.
RETRY_HORIZON_MS = 600_000
# Bytes read back below a snapshot, growing until the windows are full: 5 batches of ~50 KiB at most
WINDOW_READS = (16 * 1024, 64 * 1024, 256 * 1024)


@dataclass(frozen=True, slots=True)
class BatchMeta:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class _Entry:
    epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1  # of the last COMMIT/ABORT marker (kept for the snapshot)
    batches: deque = field(default_factory=lambda: deque(maxlen=BATCHES_TO_RETAIN))
    last_timestamp: int = NO_TIMESTAMP  # of its last batch or marker (Kafka's lastTimestamp)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE


@dataclass(frozen=True, slots=True)
class Duplicate:
    """The batch was already appended: answer with these offsets."""

    first_offset: int
    last_offset: int
    timestamp: int


class ProducerState:
    def __init__(self, topic: str, partition: int):
        self.where = f"{topic}-{partition}"
        self._producers: dict[int, _Entry] = {}

    def check(self, header: BatchHeader) -> Duplicate | None:
        """Before appending: None (go ahead), a Duplicate, or raise the Kafka error."""
        if header.producer_id < 0:
            return None
        entry = self._producers.get(header.producer_id)
        if entry is None:
            # Unknown producer (new, or its records were deleted): Kafka accepts any sequence.
            return None
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpoch(
                f"{self.where}: producer {header.producer_id} epoch {header.producer_epoch} "
                f"is older than the current epoch {entry.epoch}")
        if header.producer_epoch == entry.epoch:
            for meta in entry.batches:
                if meta.first_seq == header.base_sequence and meta.last_seq == header.last_sequence:
                    return Duplicate(meta.first_offset, meta.last_offset, meta.timestamp)
            expected = (entry.last_seq + 1) & _SEQ_MASK
            if entry.last_seq != NO_SEQUENCE and header.base_sequence != expected:
                raise OutOfOrderSequence(
                    f"{self.where}: out of order sequence for producer {header.producer_id} "
                    f"epoch {header.producer_epoch}: got {header.base_sequence}, expected {expected}")
        elif header.base_sequence != 0:
            raise OutOfOrderSequence(
                f"{self.where}: producer {header.producer_id} starts epoch {header.producer_epoch} "
                f"with sequence {header.base_sequence}, expected 0")
        return None

    def observe(self, header: BatchHeader, first_offset: int, last_offset: int, timestamp: int) -> None:
        """After an append (or while replaying the log): remember the batch."""
        if header.producer_id < 0 or header.is_control:
            return
        entry = self._producers.get(header.producer_id)
        if entry is None:
            entry = self._producers[header.producer_id] = _Entry()
        if header.producer_epoch != entry.epoch:
            entry.epoch = header.producer_epoch
            entry.batches.clear()
        entry.batches.append(BatchMeta(header.base_sequence, header.last_sequence,
                                       first_offset, last_offset, timestamp))
        entry.last_timestamp = timestamp

    def observe_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int | None = None,
                       timestamp: int | None = None) -> None:
        """A COMMIT/ABORT marker was appended (or replayed) with the producer's current epoch. A
        higher epoch (the coordinator fenced the producer) makes its older batches INVALID_PRODUCER_EPOCH;
        the sequence carries on within one epoch, as Kafka's appendEndTxnMarker keeps it. The
        marker's timestamp becomes the producer's last timestamp, as there."""
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = _Entry()
        if producer_epoch > entry.epoch:
            entry.epoch = producer_epoch
            entry.batches.clear()
        if coordinator_epoch is not None:
            entry.coordinator_epoch = coordinator_epoch
        if timestamp is not None:
            entry.last_timestamp = timestamp

    def restore_windows(self, headers_below: Callable[[int], Iterable[BatchHeader]], now_ms: int) -> int:
        """After a snapshot was loaded (each producer's last batch only): put the batches before
        that one back into the window of every producer whose last batch is at most
        RETRY_HORIZON_MS old at `now_ms`. `headers_below(n)` reads the headers of the batches
        ending below the snapshot, oldest first, from about `n` bytes back: called with growing
        reads (WINDOW_READS) until every such producer's window is full or reaches its epoch's
        first batch (sequence 0); never called when no producer is that recent. Returns the
        batches put back."""
        recent = {producer_id for producer_id, entry in self._producers.items()
                  if entry.batches and now_ms - entry.last_timestamp <= RETRY_HORIZON_MS}
        older: dict[int, list[BatchMeta]] = {}
        for budget in WINDOW_READS if recent else ():
            headers = list(headers_below(budget))
            older = {producer_id: [] for producer_id in recent}
            for header in headers:
                if header.producer_id not in older or header.is_control:
                    continue
                entry = self._producers[header.producer_id]
                if header.producer_epoch == entry.epoch and header.last_offset < entry.batches[0].first_offset:
                    older[header.producer_id].append(BatchMeta(header.base_sequence, header.last_sequence,
                                                               header.base_offset, header.last_offset,
                                                               header.max_timestamp))
            if all(self._window_complete(producer_id, metas) for producer_id, metas in older.items()):
                break
        restored = 0
        for producer_id, metas in older.items():
            entry = self._producers[producer_id]
            window = [*metas, *entry.batches][-BATCHES_TO_RETAIN:]
            restored += len(window) - len(entry.batches)
            entry.batches = deque(window, maxlen=BATCHES_TO_RETAIN)
        return restored

    def _window_complete(self, producer_id: int, older: list[BatchMeta]) -> bool:
        """`older` and the producer's batches fill its window, or go back to its epoch's start."""
        first = (older or self._producers[producer_id].batches)[0]
        return len(older) + 1 >= BATCHES_TO_RETAIN or first.first_seq == 0

    def remove_expired(self, now_ms: int, expiration_ms: int, ongoing: Container[int]) -> list[int]:
        """Forget every producer idle for `expiration_ms` at `now_ms` (wall-clock ms) that has no
        open transaction (`ongoing`: producer ids, from PartitionTxns). Returns the ids removed."""
        expired = [producer_id for producer_id, entry in self._producers.items()
                   if _expired(entry.last_timestamp, producer_id in ongoing, now_ms, expiration_ms)]
        for producer_id in expired:
            del self._producers[producer_id]
        return expired

    def to_snapshot(self, ongoing: dict[int, int]) -> list[ProducerSnapshotEntry]:
        """Kafka's snapshot entries: each producer's epoch and last batch, plus the first offset
        of its open transaction (`ongoing`: producer id -> first offset, from PartitionTxns)."""
        out = []
        for producer_id in sorted(self._producers.keys() | ongoing.keys()):
            entry = self._producers.get(producer_id) or _Entry()
            txn_first = ongoing.get(producer_id, NO_OFFSET)
            if entry.batches:
                last = entry.batches[-1]
                out.append(ProducerSnapshotEntry(producer_id, entry.epoch, last.last_seq, last.last_offset,
                                                 last.last_offset - last.first_offset, entry.last_timestamp,
                                                 entry.coordinator_epoch, txn_first))
            else:
                out.append(ProducerSnapshotEntry(producer_id, entry.epoch, NO_SEQUENCE, NO_OFFSET, 0,
                                                 entry.last_timestamp, entry.coordinator_epoch, txn_first))
        return out

    def load(self, entries: list[ProducerSnapshotEntry], *, now_ms: int | None = None,
             expiration_ms: int | None = None) -> None:
        """Replace the state with a snapshot's (Kafka's loadProducerEntry). An entry with no epoch
        and no batch only records an open transaction of a producer this state never saw. Given
        `now_ms` and `expiration_ms`, expired entries are skipped (Kafka's loadFromSnapshot)."""
        self._producers = {}
        for e in entries:
            if e.epoch == NO_PRODUCER_EPOCH and e.last_offset < 0:
                continue
            if now_ms is not None and expiration_ms is not None and _expired(
                    e.timestamp, e.current_txn_first_offset >= 0, now_ms, expiration_ms):
                continue
            entry = self._producers[e.producer_id] = _Entry(e.epoch, e.coordinator_epoch, last_timestamp=e.timestamp)
            if e.last_offset >= 0:
                entry.batches.append(BatchMeta(e.first_sequence, e.last_sequence, e.first_offset, e.last_offset,
                                               e.timestamp))

    def __len__(self) -> int:
        return len(self._producers)

    def __contains__(self, producer_id: int) -> bool:
        return producer_id in self._producers


def _expired(last_timestamp: int, in_transaction: bool, now_ms: int, expiration_ms: int) -> bool:
    """Kafka's isProducerExpired: no open transaction and idle for at least `expiration_ms`."""
    return not in_transaction and now_ms - last_timestamp >= expiration_ms
