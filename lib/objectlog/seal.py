"""Sealing the tail (docs/OBJECT-STORAGE.md, "Write path", step 4): the valid batches of the flush
objects become one closed segment (`<base>.log`, `.index`, `.timeindex`, built by segments'
LogSegment exactly as a file root's segment), created once each, then manifest N+1 lists it.
Before that commit the flush objects are the log and the segment objects are unreferenced; after
it the segment is the log and the flush objects are garbage (garbage.py, after a grace).
Nothing is renamed or rewritten, so a seal killed at any step leaves a readable log.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable, Sequence

from topiclake.segments import filenames
from topiclake.segments.config import LogConfig
from topiclake.segments.segment import LogSegment
from topiclake.segments.txn_index import TxnIndexEntry, encode_txn_index
from topiclake.store.objects import ObjectStore

from .flush import FlushConflict, create_once
from .manifest import Manifest, ManifestConflict, SegmentEntry, commit_change
from .plan import FLUSH
from .reader import PartitionView, iter_piece_batches


def seal_tail(store: ObjectStore, view: PartitionView, epoch: int, *, config: LogConfig,
              deadline: float, before_commit: Callable[[int], None] | None = None,
              aborted: Sequence[TxnIndexEntry] | None = None) -> Manifest | None:
    """Seal every valid batch of the view's flush objects into one closed segment and commit the
    manifest that lists it (writer epoch `epoch`). None when the tail holds no valid batch.
    When a stale sealer's other bytes hold `<base>.log` (its commit lost), the segment goes to
    `<base>.s<epoch>.log` and its indexes instead (the manifest names every key).
    `before_commit(end_offset)`: called once the segment objects exist, before the commit (the
    broker creates the producer snapshot object there).
    `aborted`: the leader's `.txnindex` entries whose ABORT marker is in the tail (more are
    ignored); None when the sealer does not know them (the segment's aborts stay unknown).
    ManifestConflict / StaleManifestWriter from the commit: reload and decide again (or resign);
    FlushConflict: even the sealer's own fallback keys hold other bytes."""
    manifest, keys = view.manifest, view.keys
    data = bytearray()
    headers: list = []  # the batches' headers, in offset order
    for piece in (p for p in view.pieces if p.kind == FLUSH):
        for batch in iter_piece_batches(store.get(piece.key), piece, view.history, source=store.root.uri(piece.key)):
            if headers and batch.base_offset < headers[-1].next_offset:
                continue  # the same offsets from a second object at one base: the first kept
            data += batch.data
            headers.append(batch.header)
    if not headers:
        return None
    base = headers[0].base_offset
    try:
        entry = write_segment(store, bytes(data), headers, config, lambda suffix: keys.segment(base, suffix), deadline,
                              aborted=aborted)
    except FlushConflict:
        entry = write_segment(store, bytes(data), headers, config,
                              lambda suffix: keys.sealed_segment(base, epoch, suffix), deadline, aborted=aborted)
    if before_commit is not None:
        before_commit(entry.end_offset)

    def append_segment(newest: Manifest) -> Manifest | None:
        # A maintenance commit (retention, a merge) keeps end_offset: the seal lands on top of it.
        # Another sealer moved end_offset: this seal's batches may be in its segment; decide again.
        if newest.end_offset != manifest.end_offset:
            return None
        return newest.successor(leader_epoch=epoch, segments=newest.segments + (entry,))

    committed = commit_change(store, keys, manifest, append_segment)
    if committed is None:
        raise ManifestConflict(f"{keys.prefix}: another sealer committed past offset {manifest.end_offset}")
    return committed


_SEALED = (filenames.LOG_SUFFIX, filenames.INDEX_SUFFIX, filenames.TIME_INDEX_SUFFIX)


def write_segment(store: ObjectStore, data: bytes, headers: list, config: LogConfig, key: Callable[[str], str],
                  deadline: float, *, base_offset: int | None = None, end_offset: int | None = None,
                  aborted: Sequence[TxnIndexEntry] | None = None) -> SegmentEntry:
    """Build a closed segment of `data` (whole batches, `headers` theirs in offset order) with
    segments' LogSegment, exactly as a file root's, and create its `.log`, `.index` and
    `.timeindex` once each under `key(suffix)`. FlushConflict: a key holds other bytes.
    `base_offset` / `end_offset`: the segment's offsets when they are not its first batch's base
    and last batch's end (a cleaned segment keeps the replaced segments'; it may hold no batch).
    `aborted`: aborted transactions to index; those whose marker is in the segment become its
    `.txnindex` object (Kafka's format), none an entry without one; None: not known (no key)."""
    base = headers[0].base_offset if base_offset is None else base_offset
    end = headers[-1].next_offset if end_offset is None else end_offset
    with tempfile.TemporaryDirectory(prefix="topiclake-seal-") as workdir:
        segment = LogSegment(workdir, base, config)
        try:
            if headers:
                segment.append(data, headers)
            segment.on_become_inactive()
            largest_timestamp = segment.largest_timestamp()
        finally:
            segment.close()
        for suffix in _SEALED:
            create_once(store, key(suffix), filenames.segment_file(Path(workdir), base, suffix).read_bytes(),
                        deadline=deadline)
    txn_index_key = None
    if aborted is not None:
        mine = sorted((e for e in aborted if base <= e.last_offset < end), key=lambda e: e.last_offset)
        txn_index_key = key(filenames.TXN_INDEX_SUFFIX) if mine else ""
        if mine:
            create_once(store, txn_index_key, encode_txn_index(mine), deadline=deadline)
    return SegmentEntry(key(filenames.LOG_SUFFIX), base, end, len(data), largest_timestamp, key(filenames.INDEX_SUFFIX),
                        key(filenames.TIME_INDEX_SUFFIX), txn_index_key)
