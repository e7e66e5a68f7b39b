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

from topiclake.segments import filenames
from topiclake.segments.config import LogConfig
from topiclake.segments.segment import LogSegment
from topiclake.store.objects import ObjectStore

from .flush import create_once
from .keys import PartitionKeys
from .manifest import Manifest, SegmentEntry, commit
from .plan import FLUSH, Listed, superseded_flush_objects
from .reader import PartitionView, iter_piece_batches

DEFAULT_DELETE_GRACE_MS = 3_600_000


def seal_tail(store: ObjectStore, view: PartitionView, epoch: int, *, config: LogConfig,
              deadline: float) -> Manifest | None:
    """Seal every valid batch of the view's flush objects into one closed segment and commit the
    manifest that lists it (writer epoch `epoch`). None when the tail holds no valid batch.
    ManifestConflict / StaleManifestWriter from the commit: reload and decide again (or resign);
    FlushConflict: another sealer's different segment holds the key (the tail stays the log)."""
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
        for suffix in (filenames.LOG_SUFFIX, filenames.INDEX_SUFFIX, filenames.TIME_INDEX_SUFFIX):
            local = filenames.segment_file(Path(workdir), base, suffix)
            create_once(store, keys.segment(base, suffix), local.read_bytes(), deadline=deadline)
    entry = SegmentEntry(keys.segment(base), base, headers[-1].next_offset, len(data), largest_timestamp,
                         keys.segment(base, filenames.INDEX_SUFFIX), keys.segment(base, filenames.TIME_INDEX_SUFFIX))
    return commit(store, keys, manifest, manifest.successor(leader_epoch=epoch, segments=manifest.segments + (entry,)))


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
