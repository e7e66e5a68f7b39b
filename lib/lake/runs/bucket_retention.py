"""Segment retention on an object-store root (docs/OBJECT-STORAGE.md, "Maintenance on the
bucket"): the same rules as a directory root's (segments.retention.deletable_segments over a
LogSummary), decided from the newest manifest and the tail, and applied as ONE manifest commit
that drops whole closed segments and raises `log_start_offset`. Nothing is renamed or deleted
here: the dropped segments' objects are garbage once no manifest names them (the garbage pass
deletes them after delete_grace_ms, so a Spark task planned before the commit still reads them).

The tail (flush objects) is the log's active segment: only its leader seals it, so, as on a
directory root, retention never takes it. The commit keeps the manifest's writer epoch and its
end_offset, so it competes with a leader's seal only for the version number: a lost race reloads
and decides again.
"""

from __future__ import annotations

from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import ManifestConflict, commit
from topiclake.objectlog.notices import post_notice
from topiclake.objectlog.reader import view_partition
from topiclake.segments.log_summary import LogSummary, SegmentSummary
from topiclake.segments.retention import deletable_segments

from ..log.bucket import scan_tail
from ..log.roots import BucketLog
from ..table import delta
from ..table.location import discover_bucket_tables

COMMIT_ATTEMPTS = 5


def bucket_group_offsets(source: BucketLog, groups) -> dict[str, dict[tuple[str, int], int]]:
    """group -> {(topic, partition): next offset}: the Delta txn versions of the tables under the
    root's tables/ (a bucket holds no __consumer_offsets yet)."""
    out: dict[str, dict[tuple[str, int], int]] = {g: {} for g in groups}
    tps = [(name, p) for name, meta in source.topics().items() for p in range(meta.partitions)]
    for uri in discover_bucket_tables(source.root).values():
        table = delta.load_table(uri, source.delta_storage_options)
        if table is None:
            continue
        for group in groups:
            for tp, offset in delta.committed_offsets(table, group, tps).items():
                if offset is not None:
                    out[group][tp] = max(offset, out[group].get(tp, offset))
    return out


def retain_bucket_partition(source: BucketLog, topic: str, partition: int, config, *, now_ms: int,
                            protect: dict[str, int | None], dry_run: bool, out):
    """Fill `out` (retention.PartitionRetention) for one partition: what retention drops, and
    unless `dry_run` the manifest commit that drops it."""
    keys = PartitionKeys(topic, partition)
    for _attempt in range(COMMIT_ATTEMPTS):
        view = view_partition(source.store, keys)
        manifest = view.manifest
        if not manifest.segments:
            return out  # nothing closed: nothing retention may take
        tail = scan_tail(source.store, view)
        log_end = tail[-1][1].next_offset if tail else manifest.end_offset
        tail_bytes = sum(where.size for where, _batch in tail)
        live = [e for e in manifest.segments if e.end_offset > manifest.log_start_offset]
        segments = tuple(SegmentSummary(e.base_offset, e.size, e.largest_timestamp) for e in live)
        summary = LogSummary(topic, partition, segments + (SegmentSummary(manifest.end_offset, tail_bytes),),
                             max(manifest.log_start_offset, live[0].base_offset if live else manifest.end_offset),
                             log_end)
        out.high_watermark, out.log_start_offset = summary.high_watermark, summary.log_start_offset
        floor = {g: (o if o is not None else summary.log_start_offset) for g, o in protect.items()}
        plan = deletable_segments(summary, config, now_ms, protect_offsets=floor if floor else None)
        out.plan = plan
        dropped = {d.base_offset for d in plan.deletions if d.base_offset != manifest.end_offset}
        out.active_kept = len(dropped) < len(plan.deletions)
        if not dropped:
            return out
        out.deleted = tuple(sorted(dropped))
        out.deleted_bytes = sum(d.size for d in plan.deletions if d.base_offset in dropped)
        new_start = max(manifest.log_start_offset, min(plan.log_start_offset, manifest.end_offset))
        out.log_start_offset = new_start
        if dry_run:
            return out
        kept = tuple(e for e in manifest.segments if e.base_offset not in dropped)
        try:
            committed = commit(source.store, keys, manifest, manifest.successor(
                leader_epoch=manifest.leader_epoch, segments=kept, log_start_offset=new_start))
            post_notice(source.store, keys, committed.version)  # the leader's ListOffsets within its 5 s poll
            return out
        except ManifestConflict:
            continue  # a seal or another maintenance job committed first: decide again on the new manifest
    raise ManifestConflict(f"{source.root.uri(keys.prefix)}: {COMMIT_ATTEMPTS} manifest commits lost to other writers")
