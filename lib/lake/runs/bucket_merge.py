"""`topiclake merge-segments` on an object-store root (docs/OBJECT-STORAGE.md, "Maintenance on the
bucket"): per partition, objectlog.merge's plan over the newest manifest (runs of adjacent small
closed segments), each run written as one segment and swapped in by a manifest commit, then the
garbage pass (objects no manifest needed for `grace_ms`). A dry run reads and prints only.
Partitions a broker leads are fine: its seals land after the merge and the merge after them."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from topiclake.objectlog.garbage import DEFAULT_DELETE_GRACE_MS, collect_garbage
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import load_newest
from topiclake.objectlog.merge import Merge, merge_segments, plan_merges
from topiclake.store.objects import ObjectStore

from ..log.bucket import bucket_topics

WRITE_TIMEOUT_S = 60.0  # one merged segment's objects, the store retried while unavailable


@dataclass
class PartitionMerges:
    topic: str
    partition: int
    merges: list[Merge] = field(default_factory=list)
    garbage: list[str] = field(default_factory=list)


def merge_bucket(root, topics: tuple[str, ...] = (), *, below_bytes: int | None = None, dry_run: bool = False,
                 grace_ms: int = DEFAULT_DELETE_GRACE_MS) -> list[PartitionMerges]:
    """Every partition of `topics` (default: all). `below_bytes`: a segment smaller is small
    (default half the topic's segment.bytes); a merged segment holds at most segment.bytes."""
    store = ObjectStore(root)
    known = bucket_topics(store)
    unknown = [t for t in topics if t not in known]
    if unknown:
        raise ValueError(f"unknown topic(s) on {root}: {', '.join(unknown)}")
    results = []
    for name in topics or tuple(sorted(known)):
        meta = known[name]
        config = meta.log_config
        below = below_bytes if below_bytes is not None else config.segment_bytes // 2
        for partition in range(meta.partitions):
            keys = PartitionKeys(name, partition)
            result = PartitionMerges(name, partition)
            manifest = load_newest(store, keys)
            for merge in plan_merges(manifest, below_bytes=below, max_bytes=config.segment_bytes):
                if dry_run:
                    result.merges.append(merge)
                    continue
                done, committed = merge_segments(store, keys, manifest, merge, config=config,
                                                 deadline=time.monotonic() + WRITE_TIMEOUT_S)
                result.merges.append(done)
                manifest = committed or load_newest(store, keys)
            result.garbage = collect_garbage(store, keys, load_newest(store, keys), grace_ms=grace_ms, dry_run=dry_run)
            results.append(result)
    return results


_WHY = {"changed": "not merged: the manifest changed under it (retention or another merge); run again",
        "taken": "not merged: another merge wrote that segment; run again"}


def format_merges(results: list[PartitionMerges], *, dry_run: bool) -> str:
    """One line per merge and per partition's garbage, then a total."""
    lines = []
    merged = 0
    for result in results:
        where = f"{result.topic}-{result.partition}"
        for merge in result.merges:
            span = (f"{len(merge.sources)} segments [{merge.base_offset}, {merge.end_offset}) "
                    f"({merge.size} bytes)")
            if dry_run:
                lines.append(f"{where}: would merge {span}")
            elif merge.outcome == "merged" and merge.merged is not None:
                merged += 1
                lines.append(f"{where}: merged {span} into {merge.merged.key}")
            else:
                lines.append(f"{where}: {span} {_WHY[merge.outcome]}")
        if result.garbage:
            verb = "would delete" if dry_run else "deleted"
            lines.append(f"{where}: {verb} {len(result.garbage)} objects no manifest needs: "
                         + ", ".join(key.rpartition("/")[2] for key in result.garbage))
    planned = sum(len(r.merges) for r in results)
    lines.append(f"would merge {planned} runs of segments" if dry_run else
                 f"merged {merged} of {planned} runs of segments in {len(results)} partitions")
    return "\n".join(lines)
