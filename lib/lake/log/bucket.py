"""A partition's log on an object-store root, planned for the lake's Spark tasks
(docs/OBJECT-STORAGE.md, "Read path"): objectlog's view of the partition (epoch history, newest
manifest, listing), then tasks that read byte ranges of the objects with ranged GETs from the
executors (decode.read_task: the same decoder as a file root's, another source of bytes).

- Closed segments (the manifest's) are never read on the driver: their `.index` object splits
  them into tasks of about `target_task_bytes`. An index entry is (the last offset of the batch
  at a position, that position), so the batches of a chunk between two entries hold exactly the
  offsets after the first entry's and up to the second's.
- Flush objects (the tail, small: sealed within seal_ms) are read on the driver, header by
  header, with objectlog's piece rule (epoch validity, the piece's offset range): that gives the
  log end, the transactions' fate in the tail (scan.Transactions, as a file root's scan) and the
  last stable offset. Consecutive ones share a task, up to the target task size.
- Transactions in closed segments (read_committed, as a file root's scan decides it): the aborts
  whose ABORT marker a closed segment holds come from its `.txnindex` object (objectlog.aborted;
  a segment sealed before those existed is scanned on the driver, one GET of the whole segment,
  in each run starting below its end); the transactions open at the
  manifest's end from the producer snapshot object there (`current_txn_first_offset`), which
  seeds the tail's scan: a marker in the tail settles a transaction begun in a closed segment,
  and one still open holds the last stable offset at its first offset, as Kafka's. A manifest
  whose end has no snapshot object (a seal that ended elsewhere than its producer state) leaves
  the transactions open there unknown: its closed tasks refuse transactional batches
  (`Task.unsettled`) until a seal writes one.
- A takeover in progress (an epoch claimed, its start not recorded) may adopt or drop the tail:
  only the closed segments are planned until it is decided (`undecided_from`). After the tasks,
  `BucketEpochs.confirm` checks that no takeover started below what was read.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from topiclake.objectlog.aborted import segment_aborted
from topiclake.objectlog.epochs import load_history
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import Manifest
from topiclake.objectlog.plan import FLUSH, Piece
from topiclake.objectlog.reader import PartitionView, iter_piece_batches, view_partition
from topiclake.segments.batch import NO_TIMESTAMP
from topiclake.segments.errors import OffsetOutOfRangeError, UnknownTopicError
from topiclake.segments.filenames import INDEX_SUFFIX
from topiclake.segments.leader_epochs import EpochHistory
from topiclake.segments.offset_index import OffsetIndex
from topiclake.segments.producer_snapshot import decode_snapshot
from topiclake.segments.storage import TopicMeta
from topiclake.segments.time_index import TimeIndex
from topiclake.store.errors import ObjectNotFound
from topiclake.store.objects import ObjectStore

from ..errors import DataLossError, LakeError
from .offsets import OffsetSpec
from .plan import PartitionPlan, Task
from .scan import AbortedRange, Transactions

TOPICS_PREFIX = "topics"  # topics/<topic>.json, the file root's topic files as objects
TIME_ENTRY = TimeIndex.ENTRY  # (timestamp, relative offset)


def bucket_topics(store: ObjectStore) -> dict[str, TopicMeta]:
    """Every topic registered under the root (topics/<topic>.json, segments' TopicMeta format)."""
    found = {}
    for info in store.list(TOPICS_PREFIX):
        name = info.key.rpartition("/")[2]
        if name.endswith(".json") and info.key.count("/") == 1:
            meta = TopicMeta.from_json(store.get(info.key), source=store.root.uri(info.key))
            found[meta.name] = meta
    return found


def bucket_topic(store: ObjectStore, topic: str) -> TopicMeta:
    key = f"{TOPICS_PREFIX}/{topic}.json"
    try:
        return TopicMeta.from_json(store.get(key), source=store.root.uri(key))
    except ObjectNotFound:
        raise UnknownTopicError(f"unknown topic {topic!r} (no {store.root.uri(key)})") from None


class BucketEpochs:
    """The epoch history a bucket plan read with; `confirm` is plan.confirm_reads' check."""

    def __init__(self, store: ObjectStore, keys: PartitionKeys, history: EpochHistory):
        self.store, self.keys, self.history = store, keys, history

    @property
    def entries(self) -> list[list[int]]:
        return [[e.epoch, e.start_offset] for e in self.history.entries]

    def confirm(self, _directory: str, end: int) -> None:
        """LakeError if an epoch the plan did not know was claimed and starts (or may start) below
        `end`: a takeover may have dropped offsets the tasks read (leader_reads' rule 5)."""
        now = load_history(self.store, self.keys, self.history)
        known = {e.epoch for e in self.history.entries}
        first_new = 0 if self.history.claimed is None else self.history.claimed + 1
        for epoch in range(first_new, (-1 if now.claimed is None else now.claimed) + 1):
            start = now.starts.get(epoch)
            if epoch not in known and (start is None or 0 <= start < end):
                raise LakeError(
                    f"{self.store.root.uri(self.keys.prefix)}: leader epoch {epoch} was claimed while offsets up "
                    f"to {end} were read; nothing was committed, run again")


@dataclass(frozen=True, slots=True)
class _TailBatch:
    piece: Piece
    position: int
    size: int
    base_offset: int
    next_offset: int


def plan_bucket_partition(store: ObjectStore, topic: str, partition: int, *, table_uri: str, committed: int | None,
                          starting: OffsetSpec, ending: OffsetSpec, target_task_bytes: int,
                          allow_data_loss: bool = False) -> PartitionPlan:
    """The plan of one partition of a bucket root: PartitionPlan and Tasks as log.plan makes them
    for a file root, the tasks' `root` set (they read objects)."""
    keys = PartitionKeys(topic, partition)
    view = view_partition(store, keys)
    manifest, history = view.manifest, view.history
    undecided_from = manifest.end_offset if history.pending else None
    tail = [] if undecided_from is not None else scan_tail(store, view)
    open_at_end = open_transactions(store, keys, manifest)
    txns = Transactions(open_at_end)
    for _where, batch in tail:
        txns.see(batch)
    log_start = manifest.log_start_offset
    log_end = tail[-1][1].next_offset if tail else manifest.end_offset
    lso = txns.last_stable_offset(log_end)
    if committed is not None:
        start = committed
    else:
        kind, value = starting.resolve(topic, partition)
        if kind == "time":
            raise LakeError(f"topic {topic!r} partition {partition}: --starting-offsets by time is not supported "
                            f"on an object-store root yet ({store.root})")
        start = {"earliest": log_start, "offset": value}.get(kind, lso)
    lost = None
    if start < log_start:
        if not allow_data_loss:
            raise DataLossError(topic, partition, start, log_start)
        lost, start = (start, log_start), log_start
    if start > log_end and undecided_from is None:
        raise OffsetOutOfRangeError(
            f"topic {topic!r} partition {partition}: offset {start} to read next is beyond the log end "
            f"{log_end} (was the topic deleted and re-created?)")
    kind, value = ending.resolve(topic, partition)
    end = max(start, min(value, lso) if kind == "offset" else lso)
    epochs = BucketEpochs(store, keys, history)
    # Markers past `end` count too: a transaction aborted after the LSO may hold records below it.
    every_abort = closed_aborted(store, keys, manifest, start) + txns.aborted if start < end else []
    tasks = [task for piece in view.pieces if piece.kind != FLUSH
             for task in _segment_tasks(store, piece, start, end, table_uri, keys, epochs, target_task_bytes,
                                        every_abort, unsettled=open_at_end is None)]
    tasks += _tail_tasks(store, tail, start, end, table_uri, keys, epochs, every_abort, target_task_bytes)
    aborted = tuple(a for a in every_abort if a.last_offset >= start and a.first_offset < end)
    return PartitionPlan(topic, partition, committed, start, end, log_start, log_end, lso, tuple(tasks), aborted,
                         lost, store.root.uri(keys.prefix), epochs, 0, undecided_from)


def open_transactions(store: ObjectStore, keys: PartitionKeys, manifest: Manifest) -> dict[int, int] | None:
    """Producer id -> first offset of its transaction open at the manifest's end, from the
    producer snapshot object the seal wrote there; None when there is none (unknown)."""
    if not manifest.segments:
        return {}  # nothing closed to hold a transaction's records
    key = keys.snapshot(manifest.end_offset)
    try:
        raw = store.get(key)
    except ObjectNotFound:
        return None
    return {entry.producer_id: entry.current_txn_first_offset
            for entry in decode_snapshot(raw, source=store.root.uri(key)) if entry.current_txn_first_offset >= 0}


def closed_aborted(store: ObjectStore, keys: PartitionKeys, manifest: Manifest, start: int) -> list[AbortedRange]:
    """The aborted transactions whose ABORT marker a closed segment holds at or after `start`
    (objectlog.aborted: the `.txnindex` object, or a scan of a segment sealed before those)."""
    return [AbortedRange(txn.producer_id, txn.first_offset, txn.last_offset - 1)
            for entry in manifest.segments if entry.end_offset > start
            for txn in segment_aborted(store, keys, entry) if txn.last_offset > start]


def scan_tail(store: ObjectStore, view: PartitionView) -> list:
    """(_TailBatch, RecordBatch) of every batch of the tail's flush objects that belongs to the log,
    in offset order, each offset once (objectlog.reader's rule)."""
    out, next_offset = [], view.manifest.end_offset
    for piece in view.pieces:
        if piece.kind != FLUSH:
            continue
        for batch in iter_piece_batches(store.get(piece.key), piece, view.history, source=store.root.uri(piece.key)):
            if batch.last_offset < next_offset:
                continue
            out.append((_TailBatch(piece, int(batch.position or 0), batch.header.size, batch.base_offset,
                                   batch.header.next_offset), batch))
            next_offset = batch.header.next_offset
    return out


def _task(store: ObjectStore, key: str, start: int, end: int, first: int, last: int, table_uri: str,
          keys: PartitionKeys, epochs: BucketEpochs, aborted: list[AbortedRange], closed: bool = False,
          unsettled: bool = False) -> Task:
    entries = tuple((epoch, start_offset) for epoch, start_offset in epochs.entries) or None
    return Task(table_uri, keys.topic, keys.partition, key, 0, start, end, first, last,
                tuple(a for a in aborted if a.last_offset >= first and a.first_offset <= last), entries, store.root,
                closed, unsettled)


def _tail_tasks(store, tail, start, end, table_uri, keys, epochs, aborted, target_bytes: int) -> list[Task]:
    """Tasks over the flush objects' byte ranges of batches holding offsets in [start, end): a
    flush object is small (one tick of one partition), and a Spark task each made a fresh tail
    slow to ingest, so consecutive ones share a task up to `target_bytes` (Task.more)."""
    by_piece: dict[str, list[_TailBatch]] = {}
    for batch, _header in tail:
        if batch.next_offset > start and batch.base_offset < end:
            by_piece.setdefault(batch.piece.key, []).append(batch)
    tasks: list[Task] = []
    group: list[tuple[str, list[_TailBatch]]] = []

    def close() -> None:
        first = max(start, group[0][1][0].base_offset)
        last = min(end, group[-1][1][-1].next_offset) - 1
        ranges = [(key, batches[0].position, batches[-1].position + batches[-1].size) for key, batches in group]
        task = _task(store, ranges[0][0], ranges[0][1], ranges[0][2], first, last, table_uri, keys, epochs, aborted)
        tasks.append(dataclasses.replace(task, more=tuple(ranges[1:])))
        group.clear()

    size = 0
    for key, batches in by_piece.items():  # in offset order (scan_tail's)
        piece_bytes = batches[-1].position + batches[-1].size - batches[0].position
        if group and size + piece_bytes > target_bytes:
            close()
            size = 0
        group.append((key, batches))
        size += piece_bytes
    if group:
        close()
    return tasks


def _segment_tasks(store, piece: Piece, start: int, end: int, table_uri, keys, epochs, target_bytes,
                   aborted: list[AbortedRange], *, unsettled: bool) -> list[Task]:
    """Tasks over a closed segment's bytes holding offsets in [start, end), cut at its index
    entries. The byte ranges never overlap, so trimming each task by its chunks' offset bounds
    (which may overlap a neighbour's) keeps every record exactly once."""
    assert piece.end_offset is not None and piece.size is not None, "a closed segment's piece has both"
    if piece.end_offset <= start or piece.base_offset >= end or not piece.size:
        return []  # nothing there, or a segment compaction emptied (no byte to read)
    tasks: list[Task] = []
    group: list[tuple[int, int, int, int]] = []

    def close() -> None:
        first, last = max(start, group[0][2]), min(end - 1, group[-1][3])
        tasks.append(_task(store, piece.key, group[0][0], group[-1][1], first, last, table_uri, keys, epochs,
                           aborted, closed=True, unsettled=unsettled))
        group.clear()

    for chunk in _index_chunks(store, piece):  # (position, end position, lowest offset, highest offset)
        if chunk[3] < start or chunk[2] >= end:
            continue
        if group and chunk[1] - group[0][0] > target_bytes:
            close()
        group.append(chunk)
    if group:
        close()
    return tasks


def _index_chunks(store: ObjectStore, piece: Piece) -> list[tuple[int, int, int, int]]:
    """(position, end position, lowest offset, highest offset) of the byte ranges between the
    index entries of a closed segment; the whole segment when its index is missing or empty.
    The batch at an entry's position ends at the entry's offset, and every later batch starts
    after it: so a chunk from entry i to entry i+1 holds offsets above entry i-1's and up to
    entry i+1's."""
    size, end_offset = int(piece.size or 0), int(piece.end_offset or 0)  # a closed segment's piece has both
    whole = [(0, size, piece.base_offset, end_offset - 1)]
    try:
        raw = store.get(piece.key[: -len(".log")] + INDEX_SUFFIX)
    except ObjectNotFound:
        return whole
    entries = np.frombuffer(raw[: len(raw) - len(raw) % OffsetIndex.ENTRY.size], dtype=">i4").reshape(-1, 2)
    marks: list[tuple[int, int | None]] = []  # (position, last offset of the batch there)
    for relative, position in entries.tolist():
        if 0 <= position < size and (not marks or (position > marks[-1][0] and relative + piece.base_offset
                                                         > (marks[-1][1] or -1))):
            marks.append((position, piece.base_offset + relative))
    if not marks:
        return whole
    if marks[0][0] != 0:
        marks.insert(0, (0, None))
    chunks = []
    for i, (position, _last) in enumerate(marks):
        following = marks[i + 1] if i + 1 < len(marks) else None
        before = marks[i - 1][1] if i > 0 else None
        chunks.append((position, following[0] if following else size,
                       before + 1 if before is not None else piece.base_offset,
                       following[1] or 0 if following else end_offset - 1))
    return chunks


def bucket_freshness(store: ObjectStore, topic: str, partition: int,
                     committed: int | None) -> tuple[int, int | None, int | None]:
    """(log end, the newest committed record's timestamp, the last record's timestamp) of a
    partition, as metrics.freshness reports a file root's: from the tail's batch headers, and
    for offsets in closed segments from the manifest's largest timestamps and `.timeindex` objects
    (no closed segment is read)."""
    view = view_partition(store, PartitionKeys(topic, partition))
    tail = [batch for _where, batch in scan_tail(store, view)]
    log_end = tail[-1].next_offset if tail else view.manifest.end_offset

    def newest_below(offset: int) -> int | None:
        for batch in reversed(tail):
            if batch.base_offset < offset and not batch.is_control and batch.header.max_timestamp != NO_TIMESTAMP:
                return batch.header.max_timestamp
        for entry in reversed(view.manifest.segments):
            if entry.base_offset >= offset:
                continue
            if entry.end_offset <= offset:
                return entry.largest_timestamp
            return _time_index_below(store, entry.time_index_key, entry.base_offset, offset)
        return None

    return log_end, newest_below(committed) if committed else None, newest_below(log_end)


def _time_index_below(store: ObjectStore, key: str, base_offset: int, offset: int) -> int | None:
    """The largest timestamp a closed segment's time index records below `offset`."""
    try:
        raw = store.get(key)
    except ObjectNotFound:
        return None
    found = [timestamp for timestamp, relative in TIME_ENTRY.iter_unpack(raw[: len(raw) - len(raw) % TIME_ENTRY.size])
             if base_offset + relative < offset and timestamp != NO_TIMESTAMP]
    return max(found) if found else None
