"""A partition's producer and transaction state across restarts, from Kafka's own files.

Writing (Kafka's ProducerStateManager.takeSnapshot and TransactionIndex.append):
- `take_snapshot` writes `<offset>.snapshot` on every segment roll (named after the new
  segment's base offset) and on clean close (at the log end offset); the newest KEEP_SNAPSHOTS
  are kept, and none below the log start offset (Kafka's deleteSnapshotsBefore);
- every ABORT marker appends an entry to the `.txnindex` of the segment that holds it
  (markers.py), synchronously, before the next snapshot can be taken. So a snapshot at S
  promises: the state after every batch below S, and every abort below S is in a `.txnindex`.

Opening (`load_state`): the newest readable snapshot at or below the log end offset (the
loader already removed those above it) gives the producers and the open transactions, the
`.txnindex` entries below it give the aborted ones, and only the batches from its offset on are
replayed (plus the headers of a recently active producer's last batches below it, for its
duplicate window: ProducerState.restore_windows). Without a usable snapshot (none, corrupt,
below the first segment) or with an unreadable `.txnindex`, everything is rebuilt from the
whole log, as before snapshots existed.
Either way the `.txnindex` files of the replayed range are rewritten from what the replay
found: after a crash the log may have lost a marker whose entry was written, or the reverse,
and a log written before `.txnindex` files existed gets them on its first full rebuild.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from topiclake.segments import filenames
from topiclake.segments.control import ControlRecordType
from topiclake.segments.errors import CorruptRecordError
from topiclake.segments.producer_snapshot import delete_snapshots, list_snapshots, read_snapshot, write_snapshot
from topiclake.segments.txn_index import TxnIndexEntry, read_txn_index, write_txn_index

from .partition_txns import end_txn_marker

log = logging.getLogger(__name__)

KEEP_SNAPSHOTS = 3


@dataclass(frozen=True, slots=True)
class Replay:
    """How a partition's state was loaded: from the snapshot at `snapshot_offset` (None: a full
    rebuild), replaying `batches` batch headers from `start_offset`."""

    start_offset: int
    snapshot_offset: int | None
    batches: int


def take_snapshot(part, offset: int, *, sync_dir: bool = True) -> Path:
    """Write the partition's state as `<offset>.snapshot` (I/O thread) and prune old snapshots.
    `sync_dir=False`: the log's close fsyncs the directory after it (one fsync for both)."""
    directory = part.log.directory
    path = write_snapshot(directory, offset, part.producers.to_snapshot(part.txns.ongoing()), sync_dir=sync_dir)
    # counted even while its rename waits for a clean stop's sync (atomic.deferred_writes)
    names = {*os.listdir(directory), path.name}
    delete_snapshots(directory, below=min(part.log.log_start_offset, offset), keep_newest=KEEP_SNAPSHOTS, names=names)
    return path


def load_state(part, *, now_ms: int | None = None, expiration_ms: int | None = None,
               names: frozenset[str] | None = None) -> Replay:
    """Fill a fresh partition's producer and transaction state (I/O thread; at open). Given
    `now_ms` and `expiration_ms`, the snapshot's expired producers are left out (Kafka's
    loadFromSnapshot); the batches replayed after it are the periodic check's business.
    `names`: the log directory's listing as its load left it (`LoadResult.names`), if the
    caller has it: snapshots and `.txnindex` files are found in it, not by listing and opening."""
    segments = part.log.segments()
    directory = part.log.directory
    try:
        indexed: dict[int, list[TxnIndexEntry]] | None = {
            s.base_offset: _read_txn_index(directory, s.base_offset, names) for s in segments}
    except CorruptRecordError as exc:
        log.warning("%s: rebuilding producer and transaction state from the log", exc)
        indexed = None
    if indexed is not None:
        for offset, path in reversed(list_snapshots(directory, names).items()):
            if offset > part.log.log_end_offset:
                continue
            if offset < segments[0].base_offset:
                break  # the batches between it and the log are gone; older ones are worse
            try:
                entries = read_snapshot(path)
            except CorruptRecordError as exc:
                log.warning("ignoring a corrupt producer snapshot: %s", exc)
                path.unlink(missing_ok=True)
                continue
            part.producers.load(entries, now_ms=now_ms, expiration_ms=expiration_ms)
            try:
                part.producers.restore_windows(lambda budget, at=offset: part.log.batch_headers_before(at, budget),
                                               int(time.time() * 1000) if now_ms is None else now_ms)
            except CorruptRecordError as exc:  # only retries' answers are at stake: open anyway
                log.warning("producer windows below snapshot %d not restored: %s", offset, exc)
            part.txns.restore({e.producer_id: e.current_txn_first_offset for e in entries
                               if e.current_txn_first_offset >= 0},
                              [e.aborted for found in indexed.values() for e in found if e.last_offset < offset])
            return _replay(part, offset, offset, indexed)
    return _replay(part, segments[0].base_offset, None, indexed)


def _read_txn_index(directory, base_offset: int, names: frozenset[str] | None) -> list[TxnIndexEntry]:
    path = filenames.txn_index_file(directory, base_offset)
    if names is not None and path.name not in names:
        return []  # (read_txn_index's answer for a missing file)
    return read_txn_index(path, base_offset)


def _replay(part, start: int, snapshot_offset: int | None, indexed: dict[int, list[TxnIndexEntry]] | None) -> Replay:
    """Apply every batch from `start` on, then make the `.txnindex` files of the replayed range
    say what the replay found (`indexed`: their entries as read, None if unreadable)."""
    found: dict[int, list[TxnIndexEntry]] = {}
    batches = 0
    for segment, position, header in part.log.batch_headers_from(start):
        batches += 1
        if header.producer_id < 0:
            continue
        if not header.is_control:
            part.producers.observe(header, header.base_offset, header.last_offset, header.max_timestamp)
            part.txns.on_data(header, header.base_offset)
            continue
        marker = end_txn_marker(segment.file.fileno(), position, header, str(segment.log_path))
        part.producers.observe_marker(header.producer_id, header.producer_epoch,
                                      None if marker is None else marker.coordinator_epoch,
                                      None if marker is None else header.max_timestamp)
        if marker is None:
            continue
        aborted = part.txns.on_marker(header.producer_id, header.base_offset, marker.type is ControlRecordType.COMMIT)
        if aborted is not None:
            found.setdefault(segment.base_offset, []).append(part.txns.index_entry(aborted))
    for info in part.log.segments():
        if info.next_offset <= start:
            continue
        before = None if indexed is None else indexed.get(info.base_offset, [])
        wanted = [e for e in before or () if e.last_offset < start] + found.get(info.base_offset, [])
        if wanted != before:
            write_txn_index(filenames.txn_index_file(part.log.directory, info.base_offset), wanted)
    part.txns.forget_before(part.log.log_start_offset)
    return Replay(start, snapshot_offset, batches)
