"""Sealing the tail (docs/OBJECT-STORAGE.md, "Write path", step 4): the valid batches of the flush
objects become one closed segment (`<base>.log`, `.index`, `.timeindex`, built by segments'
LogSegment exactly as a file root's segment), created once each, then manifest N+1 lists it.
Before that commit the flush objects are the log and the segment objects are unreferenced; after
it the segment is the log and the flush objects are garbage (`delete_superseded`, after a grace).
Nothing is renamed or rewritten, so a seal killed at any step leaves a readable log.
"""

from __future__ import annotations

import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

from topiclake.segments import filenames
from topiclake.segments.config import LogConfig
from topiclake.segments.segment import LogSegment
from topiclake.store.objects import ObjectStore

from .flush import FlushConflict, create_once
from .keys import PartitionKeys, parse_flush_name
from .manifest import Manifest, SegmentEntry, commit
from .plan import FLUSH, Listed, superseded_flush_objects
from .reader import PartitionView, iter_piece_batches

DEFAULT_DELETE_GRACE_MS = 3_600_000


def seal_tail(store: ObjectStore, view: PartitionView, epoch: int, *, config: LogConfig,
              deadline: float, before_commit: Callable[[int], None] | None = None) -> Manifest | None:
    """Seal every valid batch of the view's flush objects into one closed segment and commit the
    manifest that lists it (writer epoch `epoch`). None when the tail holds no valid batch.
    When a stale sealer's other bytes hold `<base>.log` (its commit lost), the segment goes to
    `<base>.s<epoch>.log` and its indexes instead (the manifest names every key).
    `before_commit(end_offset)`: called once the segment objects exist, before the commit (the
    broker creates the producer snapshot object there).
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
    with tempfile.TemporaryDirectory(prefix="topiclake-seal-") as workdir:
        segment = LogSegment(workdir, base, config)
        try:
            segment.append(bytes(data), headers)
            segment.on_become_inactive()
            largest_timestamp = segment.largest_timestamp()
        finally:
            segment.close()
        files = {suffix: filenames.segment_file(Path(workdir), base, suffix).read_bytes() for suffix in _SEALED}
        try:
            named = _create_segment(store, files, lambda suffix: keys.segment(base, suffix), deadline)
        except FlushConflict:
            named = _create_segment(store, files, lambda suffix: keys.sealed_segment(base, epoch, suffix), deadline)
    end = headers[-1].next_offset
    if before_commit is not None:
        before_commit(end)
    entry = SegmentEntry(named[filenames.LOG_SUFFIX], base, end, len(data), largest_timestamp,
                         named[filenames.INDEX_SUFFIX], named[filenames.TIME_INDEX_SUFFIX])
    return commit(store, keys, manifest, manifest.successor(leader_epoch=epoch, segments=manifest.segments + (entry,)))


_SEALED = (filenames.LOG_SUFFIX, filenames.INDEX_SUFFIX, filenames.TIME_INDEX_SUFFIX)


def _create_segment(store: ObjectStore, files: dict[str, bytes], key: Callable[[str], str],
                    deadline: float) -> dict[str, str]:
    """Create each of the segment's objects once under `key(suffix)`; their keys by suffix."""
    for suffix, data in files.items():
        create_once(store, key(suffix), data, deadline=deadline)
    return {suffix: key(suffix) for suffix in files}


def delete_superseded(store: ObjectStore, keys: PartitionKeys, manifest: Manifest, *,
                      grace_ms: int = DEFAULT_DELETE_GRACE_MS, now: datetime | None = None) -> list[str]:
    """Delete the flush objects the newest manifest's segments replaced, once older than the grace
    (a Spark task may still be reading one). Returns the keys deleted."""
    now = now or datetime.now(timezone.utc)
    infos = {info.key: info for info in store.list(keys.prefix)}
    doomed = [item.key for item in superseded_flush_objects(keys, manifest,
                                                             [Listed(k, i.size) for k, i in infos.items()])
              if now - infos[item.key].last_modified >= timedelta(milliseconds=grace_ms)]
    for key in doomed:
        store.delete(key)
    return doomed


def delete_unreferenced(store: ObjectStore, keys: PartitionKeys, manifest: Manifest, *,
                        grace_ms: int = DEFAULT_DELETE_GRACE_MS, now: datetime | None = None) -> list[str]:
    """Delete segment and snapshot objects the newest manifest does not name (a seal whose objects
    landed and whose commit lost), once older than the grace. Flush objects are delete_superseded's;
    snapshots at a named segment's end are kept. Returns the keys deleted."""
    now = now or datetime.now(timezone.utc)
    named = {key for entry in manifest.segments for key in (entry.key, entry.index_key, entry.time_index_key)}
    ends = {keys.snapshot(entry.end_offset) for entry in manifest.segments}
    doomed = []
    for info in store.list(keys.prefix):
        relative = keys.relative(info.key)
        if relative is None or "/" in relative or parse_flush_name(relative) is not None:
            continue  # the fence, the manifests, flush objects: not segment objects
        kind = relative.partition(".")[2]
        if not (kind in ("log", "index", "timeindex", "snapshot") or kind.startswith("s")):
            continue
        if info.key in named or info.key in ends:
            continue
        if now - info.last_modified >= timedelta(milliseconds=grace_ms):
            doomed.append(info.key)
    for key in doomed:
        store.delete(key)
    return doomed
