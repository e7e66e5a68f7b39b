"""Sealing the tail (docs/OBJECT-STORAGE.md, "Write path", step 4): the valid batches of the flush
objects become one closed segment (`<base>.log`, `.index`, `.timeindex`, built by segments'
LogSegment exactly as a file root's segment), created once each, then manifest N+1 lists it.
Before that commit the flush objects are the log and the segment objects are unreferenced; after
it the segment is the log and the flush objects are garbage (garbage.py, after a grace).
Nothing is renamed or rewritten, so a seal killed at any step leaves a readable log.

A segment is built in a scratch directory one source object at a time and uploaded from its
file (memory-mapped), so a seal or a merge of a 1 GiB segment holds one flush object in memory,
not the segment (and not three copies of it).
"""

from __future__ import annotations

import contextlib
import mmap
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from topiclake.segments import filenames
from topiclake.segments.config import LogConfig
from topiclake.segments.segment import LogSegment
from topiclake.segments.txn_index import TxnIndexEntry, encode_txn_index
from topiclake.store.objects import ObjectStore

from .flush import FlushConflict, create_once
from .manifest import Manifest, ManifestConflict, SegmentEntry, commit_change
from .plan import FLUSH
from .reader import PartitionView, iter_piece_batches

# Whole batches in offset order, each chunk with its batches' headers (one chunk per source object).
Chunks = Iterable[tuple[bytes | bytearray | memoryview, Sequence]]


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
    with built_segment(_tail_chunks(store, view), config) as built:
        if built is None:
            return None
        base = built.base_offset
        try:
            entry = upload_segment(store, built, lambda suffix: keys.segment(base, suffix), deadline, aborted=aborted)
        except FlushConflict:
            entry = upload_segment(store, built, lambda suffix: keys.sealed_segment(base, epoch, suffix), deadline,
                                   aborted=aborted)
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


def _tail_chunks(store: ObjectStore, view: PartitionView) -> Iterator[tuple[bytearray, list]]:
    """The tail's valid batches, one chunk per flush object; the same offsets from a second
    object at one base are skipped (the first kept)."""
    next_offset = None
    for piece in (p for p in view.pieces if p.kind == FLUSH):
        data, headers = bytearray(), []
        for batch in iter_piece_batches(store.get(piece.key), piece, view.history, source=store.root.uri(piece.key)):
            if next_offset is not None and batch.base_offset < next_offset:
                continue
            data += batch.data
            headers.append(batch.header)
            next_offset = batch.header.next_offset
        if headers:
            yield data, headers


_SEALED = (filenames.LOG_SUFFIX, filenames.INDEX_SUFFIX, filenames.TIME_INDEX_SUFFIX)


@dataclass(frozen=True, slots=True)
class BuiltSegment:
    """A closed segment's files in a scratch directory, ready to upload."""

    directory: Path
    base_offset: int
    end_offset: int
    size: int
    largest_timestamp: int


@contextlib.contextmanager
def built_segment(chunks: Chunks, config: LogConfig, *, base_offset: int | None = None,
                  end_offset: int | None = None) -> Iterator[BuiltSegment | None]:
    """Build a closed segment of `chunks` with segments' LogSegment, exactly as a file root's,
    appending each chunk as it comes; its files live until the block ends. None when `chunks`
    hold no batch and no `base_offset` is given. `base_offset` / `end_offset`: the segment's
    offsets when they are not its first batch's base and last batch's end (a cleaned segment
    keeps the replaced segments'; it may hold no batch)."""
    with tempfile.TemporaryDirectory(prefix="topiclake-seal-") as workdir:
        segment, end = None, end_offset
        try:
            for data, headers in chunks:
                if not headers:
                    continue
                if segment is None:
                    base = headers[0].base_offset if base_offset is None else base_offset
                    segment = LogSegment(workdir, base, config)
                segment.append(data, headers)
                if end_offset is None:
                    end = headers[-1].next_offset
            if segment is None:
                if base_offset is None:
                    yield None
                    return
                segment = LogSegment(workdir, base_offset, config)
            segment.on_become_inactive()
            built = BuiltSegment(Path(workdir), segment.base_offset, segment.base_offset if end is None else end,
                                 segment.size, segment.largest_timestamp())
        finally:
            if segment is not None:
                segment.close()
        yield built


def upload_segment(store: ObjectStore, built: BuiltSegment, key: Callable[[str], str], deadline: float, *,
                   aborted: Sequence[TxnIndexEntry] | None = None) -> SegmentEntry:
    """Create the built segment's `.log`, `.index` and `.timeindex` once each under `key(suffix)`
    (FlushConflict: a key holds other bytes). `aborted`: aborted transactions to index; those
    whose marker is in the segment become its `.txnindex` object (Kafka's format), none an entry
    without one; None: not known (no key)."""
    base, end = built.base_offset, built.end_offset
    for suffix in _SEALED:
        with _mapped(filenames.segment_file(built.directory, base, suffix)) as data:
            create_once(store, key(suffix), data, deadline=deadline)
    txn_index_key = None
    if aborted is not None:
        mine = sorted((e for e in aborted if base <= e.last_offset < end), key=lambda e: e.last_offset)
        txn_index_key = key(filenames.TXN_INDEX_SUFFIX) if mine else ""
        if mine:
            create_once(store, txn_index_key, encode_txn_index(mine), deadline=deadline)
    return SegmentEntry(key(filenames.LOG_SUFFIX), base, end, built.size, built.largest_timestamp,
                        key(filenames.INDEX_SUFFIX), key(filenames.TIME_INDEX_SUFFIX), txn_index_key)


@contextlib.contextmanager
def _mapped(path: Path) -> Iterator[bytes | memoryview]:
    """The file's bytes without reading them into memory (an empty file: b"", mmap refuses it)."""
    with open(path, "rb") as f:
        if f.seek(0, 2) == 0:
            yield b""
            return
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        view = memoryview(mapped)
        try:
            yield view
        finally:
            try:
                view.release()
                mapped.close()
            except BufferError:
                # The HTTP client still holds the buffer after a failed or timed-out request: the
                # mapping goes when it lets go, and the request's own error is what propagates.
                pass


def write_segment(store: ObjectStore, data: bytes, headers: list, config: LogConfig, key: Callable[[str], str],
                  deadline: float, *, base_offset: int | None = None, end_offset: int | None = None,
                  aborted: Sequence[TxnIndexEntry] | None = None) -> SegmentEntry:
    """`built_segment` of one chunk (`data`: whole batches, `headers` theirs in offset order), then
    `upload_segment`."""
    with built_segment([(data, headers)], config, base_offset=base_offset, end_offset=end_offset) as built:
        if built is None:
            raise ValueError("a segment of no batch needs its base offset")
        return upload_segment(store, built, key, deadline, aborted=aborted)
