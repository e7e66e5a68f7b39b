"""Merging small closed segments (docs/OBJECT-STORAGE.md, "Maintenance on the bucket", merge): a
slow partition seals a small segment every seal_ms; runs of adjacent closed segments each below
`below_bytes` become one segment of at most `max_bytes` (as Kafka's cleaner groups segments).

The same crash-safe swap as a seal: the merged segment's objects (`<base>.m<version>.log`, with its
`.index` and `.timeindex`, built by seal.write_segment exactly as any closed segment) are created
first and are unreferenced until ONE manifest commit replaces the small segments by it. Killed
before the commit, the small segments are still the log (the new objects are garbage); after it,
the merged one is. The commit keeps the writer epoch and end_offset of the manifest it lands on,
so a leader's seal or takeover meanwhile does not undo it, nor it them: a lost version is retried
on the newest manifest as long as every small segment is still in it (manifest.commit_change).
The small segments' objects are deleted by the garbage pass a grace after the commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from topiclake.segments.batch import iter_batches
from topiclake.segments.config import LogConfig
from topiclake.store.objects import ObjectStore

from .aborted import known_aborted
from .flush import FlushConflict
from .keys import PartitionKeys
from .manifest import Manifest, SegmentEntry, commit_change
from .notices import post_notice
from .seal import built_segment, upload_segment

MAX_RELATIVE_OFFSET = 2**31 - 1  # a segment's index holds offsets relative to its base as int32


@dataclass(frozen=True)
class Merge:
    """Adjacent closed segments to become one, and (once written) the segment they became."""

    sources: tuple[SegmentEntry, ...]
    merged: SegmentEntry | None = None
    outcome: str = "planned"  # planned, merged, or why not: "changed" (the manifest moved), "taken"

    @property
    def base_offset(self) -> int:
        return self.sources[0].base_offset

    @property
    def end_offset(self) -> int:
        return self.sources[-1].end_offset

    @property
    def size(self) -> int:
        return sum(entry.size for entry in self.sources)


def plan_merges(manifest: Manifest, *, below_bytes: int, max_bytes: int) -> list[Merge]:
    """Runs of at least two adjacent live closed segments, each under `below_bytes`, together at
    most `max_bytes` and within one segment's offset range; oldest first."""
    merges: list[Merge] = []
    run: list[SegmentEntry] = []

    def close_run() -> None:
        if len(run) >= 2:
            merges.append(Merge(tuple(run)))
        run.clear()

    for entry in (e for e in manifest.segments if e.end_offset > manifest.log_start_offset):
        if entry.size >= below_bytes:
            close_run()
            continue
        if run and (sum(e.size for e in run) + entry.size > max_bytes
                    or entry.end_offset - run[0].base_offset > MAX_RELATIVE_OFFSET):
            close_run()
        run.append(entry)
    close_run()
    return merges


def merge_segments(store: ObjectStore, keys: PartitionKeys, manifest: Manifest, merge: Merge, *,
                   config: LogConfig, deadline: float) -> tuple[Merge, Manifest | None]:
    """Write `merge`'s segment (planned on `manifest`) and commit the manifest that replaces its
    sources by it. (merge with its outcome, the manifest committed or None when it was not)."""
    aborted: list | None = []  # the sources' .txnindex entries; None when any source's are unknown
    for entry in merge.sources:
        found = known_aborted(store, entry)
        aborted = None if found is None or aborted is None else aborted + found
    try:
        # The sources' offsets, not the batches': compaction leaves gaps, and may empty a segment.
        with built_segment(_source_chunks(store, merge), config, base_offset=merge.base_offset,
                           end_offset=merge.end_offset) as built:
            assert built is not None  # a base offset is given
            merged = upload_segment(store, built,
                                    lambda suffix: keys.merged_segment(merge.base_offset, manifest.version, suffix),
                                    deadline, aborted=aborted)
    except FlushConflict:  # another merge planned on this version wrote other bytes there
        return Merge(merge.sources, outcome="taken"), None

    def replace(newest: Manifest) -> Manifest | None:
        segments = newest.segments
        if not all(entry in segments for entry in merge.sources):
            return None  # retention dropped one, or another merge replaced them
        at = segments.index(merge.sources[0])
        kept = segments[:at] + (merged,) + segments[at + len(merge.sources):]
        return newest.successor(leader_epoch=newest.leader_epoch, segments=kept)

    committed = commit_change(store, keys, manifest, replace)
    if committed is not None:
        post_notice(store, keys, committed.version)
    return Merge(merge.sources, merged, "merged" if committed is not None else "changed"), committed


def _source_chunks(store: ObjectStore, merge: Merge) -> Iterator[tuple[bytearray, list]]:
    """The sources' batches within their entries' offsets, one chunk per source segment (one in
    memory at a time)."""
    for entry in merge.sources:
        data, headers = bytearray(), []
        for batch in iter_batches(store.get(entry.key), source=store.root.uri(entry.key)):
            if entry.base_offset <= batch.base_offset < entry.end_offset:
                data += batch.data
                headers.append(batch.header)
        yield data, headers
