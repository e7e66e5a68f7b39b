"""Offset coverage: per partition, which offset ranges a table holds, and why each gap exists.

Gaps in a topic table are normal and each has a reason found in the log itself:

- `control`     a transaction marker (COMMIT/ABORT) or other control record, never a table row
- `aborted`     a record of an aborted transaction (read_committed drops it)
- `compacted`   an offset the log no longer has above the log start (the cleaner removed it)
- `retention`   below the log start offset: deleted before it was ingested (a run with
                --allow-data-loss records such ranges in its commit)
- `missing`     an offset the log still has as a data record that the table lacks: a real
                problem (fix it with a backfill)
- `fenced`      cluster mode: an offset the log does not hold where only a fenced leader wrote
                (a late batch, or a segment file it created after the takeover: the new leader
                continued past it, so the log has a gap there)
- `undecided`   cluster mode: a takeover is in progress and the log's end is not decided yet
- `corrupt`     from where the log is damaged (a bad batch length, a file cut short) to the end
                the files hold beyond it: no reader gets past it until `topiclake repair-log`

The held ranges of an append table come from the table (a Spark gaps-and-islands query over the
snapshot, so only ranges reach the driver). An upsert table replaces old rows, so its offsets say
nothing of what it read: its held ranges are the offset ranges its commits read (commitInfo
`topiclake.ranges`); offsets the cleaner removed inside them were never there to read.
Gaps in either are explained the same way: the gaps are explained by decoding just the log bytes inside them, with
the leader-epoch rules every reader applies (segments.leader_reads): a fenced leader's bytes are
never "missing".
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass

from topiclake.segments.arrow import decode_to_arrow
from topiclake.segments.batch import iter_batches
from topiclake.segments.errors import CorruptLogError, CorruptRecordError
from topiclake.segments.filenames import log_file
from topiclake.segments.leader_reads import ReadEpochs
from topiclake.segments.storage import StorageLayout

from ..errors import UsageError
from ..keyed import table_kind
from ..log.damage import find_damage
from ..log.decode import task_bytes, task_ranges
from ..log.offsets import EARLIEST, LATEST, OffsetSpec
from ..log.plan import DEFAULT_TARGET_TASK_BYTES
from ..log.roots import BucketLog, FileLog, log_root
from ..log.scan import scan_partition
from ..log.source import PartitionFiles, list_partition, open_segment
from ..sql.query import snapshot_frame
from ..table import delta
from ..table.location import root_table_uri

CONTROL, ABORTED, COMPACTED, RETENTION, MISSING = "control", "aborted", "compacted", "retention", "missing"
FENCED, UNDECIDED, CORRUPT = "fenced", "undecided", "corrupt"


@dataclass(frozen=True, slots=True)
class OffsetRange:
    first: int
    end: int  # exclusive
    reason: str | None = None  # None: held by the table


@dataclass(frozen=True, slots=True)
class PartitionCoverage:
    topic: str
    partition: int
    committed: int | None  # the group's next offset
    held: tuple[OffsetRange, ...]
    gaps: tuple[OffsetRange, ...]

    @property
    def missing(self) -> tuple[OffsetRange, ...]:
        return tuple(g for g in self.gaps if g.reason == MISSING)

    @property
    def corrupt(self) -> tuple[OffsetRange, ...]:
        return tuple(g for g in self.gaps if g.reason == CORRUPT)


def held_ranges(spark, uri: str) -> dict[tuple[str, int], list[OffsetRange]]:
    """Contiguous offset runs per (topic, partition) in the table's current snapshot."""
    frame = snapshot_frame(spark, uri)
    frame.createOrReplaceTempView("topiclake_coverage_snapshot")
    rows = spark.sql("""
        SELECT topic, `partition`, min(`offset`) AS first, max(`offset`) + 1 AS end
        FROM (SELECT topic, `partition`, `offset`,
                     `offset` - row_number() OVER (PARTITION BY topic, `partition` ORDER BY `offset`) AS island
              FROM (SELECT DISTINCT topic, `partition`, `offset` FROM topiclake_coverage_snapshot))
        GROUP BY topic, `partition`, island ORDER BY topic, `partition`, first
    """).toArrow().to_pylist()
    out: dict[tuple[str, int], list[OffsetRange]] = {}
    for r in rows:
        out.setdefault((r["topic"], r["partition"]), []).append(OffsetRange(r["first"], r["end"]))
    return out


def coverage(spark, root, table: str, topic: str, partitions: list[int], *, group: str) -> list[PartitionCoverage]:
    """`root`: a directory, or an object-store root (topiclake.store's S3Root; `spark` then needs
    its s3a settings: get_session(root=...))."""
    source = log_root(root)
    delta.serve_root(root)  # an object-store root's tables are opened with its server and keys
    uri = root_table_uri(root, table)
    snapshot = delta.load_table(uri)
    kind = table_kind.recorded(snapshot)
    upsert = kind is not None and kind.kind == table_kind.UPSERT
    held = read_ranges(snapshot, group) if upsert else held_ranges(spark, uri)
    starts = delta.group_starts(snapshot, group)
    committed_by_partition = delta.committed_offsets(snapshot, group, [(topic, p) for p in partitions])
    if not any(t == topic for t, _p in held) and all(c is None for c in committed_by_partition.values()):
        holds = sorted({t for t, _p in held})
        raise UsageError(f"table {table} holds nothing of topic {topic} and group {group} committed none of it"
                         + (f" (it holds: {', '.join(holds)})" if holds else " (it holds no records)"),
                         hint="check --topic, and --group if the table is fed by another group")
    out = []
    for p in partitions:
        committed = committed_by_partition[(topic, p)]
        ranges = held.get((topic, p), [])
        lower = starts.get(f"{topic}:{p}", ranges[0].first if ranges else committed or 0)
        upper = committed if committed is not None else (ranges[-1].end if ranges else lower)
        gaps = []
        cursor = lower
        for r in ranges + [OffsetRange(upper, upper)]:
            if r.first > cursor:
                stop = min(r.first, upper)
                gaps += (explain_gap(source.layout, topic, p, cursor, stop) if isinstance(source, FileLog)
                         else explain_bucket_gap(source, topic, p, cursor, stop))
            cursor = max(cursor, r.end)
        damage = find_damage(list_partition(source.layout, topic, p), upper) if isinstance(source, FileLog) else None
        if damage is not None:
            gaps.append(OffsetRange(damage.offset, max(damage.log_end, damage.offset + 1), CORRUPT))
        out.append(PartitionCoverage(topic, p, committed, tuple(ranges), tuple(gaps)))
    return out


def read_ranges(snapshot, group: str) -> dict[tuple[str, int], list[OffsetRange]]:
    """The offset ranges the group's commits read, merged, per (topic, partition)."""
    spans: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for commit in snapshot.history():
        info = commit.get("topiclake") or {}
        if info.get("operation") == "ingest" and info.get("group") == group:
            for tp, (first, end) in (info.get("ranges") or {}).items():
                topic, _, partition = tp.rpartition(":")
                spans.setdefault((topic, int(partition)), []).append((first, end))
    out: dict[tuple[str, int], list[OffsetRange]] = {}
    for tp, ranges in spans.items():
        merged: list[OffsetRange] = []
        for first, end in sorted(ranges):
            if merged and first <= merged[-1].end:
                merged[-1] = OffsetRange(merged[-1].first, max(end, merged[-1].end))
            elif end > first:
                merged.append(OffsetRange(first, end))
        out[tp] = merged
    return out


def explain_gap(layout: StorageLayout, topic: str, partition: int, first: int, end: int) -> list[OffsetRange]:
    """Reasons for the offsets [first, end) that the table lacks, as merged ranges."""
    out: list[OffsetRange] = []
    files = list_partition(layout, topic, partition)
    if first < files.log_start_offset:
        out.append(OffsetRange(first, min(end, files.log_start_offset), RETENTION))
        first = files.log_start_offset
    if first >= end:
        return out
    try:
        scan = scan_partition(files, first)
    except CorruptLogError as exc:
        if exc.offset < end:
            raise
        scan = scan_partition(files, first, until=exc.offset)  # damage beyond the gap: read below it
    history = files.epochs.history if files.epochs is not None else None
    present = []  # (offset, reason) of the records the log still has in the gap
    b = scan.batches
    for i in range(len(b)):
        if b.next_offset[i] <= first or b.base_offset[i] >= end:
            continue
        seg = files.segments[b.segment[i]]
        with open_segment(seg.path, seg.inode) as f:
            buf = mmap.mmap(f.fileno(), b.position[i] + b.size[i], access=mmap.ACCESS_READ)
        records = decode_to_arrow(buf, start=b.position[i], end=b.position[i] + b.size[i], source=seg.path,
                                  min_offset=first, max_offset=end - 1, epochs=history)
        present += _present(records, scan.aborted)
    absent = _absent_reasons(files, scan.fenced) if files.epochs is not None else lambda lo, hi: [(lo, hi, COMPACTED)]
    return _explained(out, first, end, present, absent)


def explain_bucket_gap(source: BucketLog, topic: str, partition: int, first: int, end: int) -> list[OffsetRange]:
    """explain_gap on an object-store root: the gap's records read as an ingest's tasks would
    (log/bucket.py); what the log does not hold above its start the cleaner removed."""
    plan = source.plan(topic, partition, table_uri="", committed=None,
                       starting=OffsetSpec(EARLIEST, {(topic, partition): first}),
                       ending=OffsetSpec(LATEST, {(topic, partition): end}),
                       target_task_bytes=DEFAULT_TARGET_TASK_BYTES, allow_data_loss=True)
    out: list[OffsetRange] = []
    if plan.lost is not None:
        out.append(OffsetRange(first, min(end, plan.lost[1]), RETENTION))
        first = plan.lost[1]
    if first >= end:
        return out
    present = []
    for piece in (piece for task in plan.tasks for piece in task_ranges(task.as_dict())):
        buf, start, stop, where = task_bytes(piece)
        records = decode_to_arrow(buf, start=start, end=stop, source=where, min_offset=first, max_offset=end - 1,
                                  epochs=ReadEpochs.history_of(piece["epochs"]))
        present += _present(records, plan.aborted)
    present.sort()
    decided = min(end, plan.undecided_from) if plan.undecided_from is not None else end

    def absent(lo: int, hi: int) -> list[tuple[int, int, str]]:
        reasons = [(lo, min(hi, max(lo, decided)), COMPACTED)] if lo < decided else []
        return reasons + ([(max(lo, decided), hi, UNDECIDED)] if hi > decided else [])

    return _explained(out, first, end, present, absent)


def _present(records, aborted) -> list[tuple[int, str]]:
    """(offset, reason) of the decoded records of a gap: a control record, an aborted
    transaction's, or a data record the table lacks."""
    present = []
    for offset, control, txn, pid in zip(records["offset"].to_pylist(), records["is_control"].to_pylist(),
                                         records["is_transactional"].to_pylist(), records["producer_id"].to_pylist()):
        if control:
            reason = CONTROL
        elif txn and any(a.producer_id == pid and a.first_offset <= offset <= a.last_offset for a in aborted):
            reason = ABORTED
        else:
            reason = MISSING
        present.append((offset, reason))
    return present


def _explained(out: list[OffsetRange], first: int, end: int, present: list[tuple[int, str]],
               absent) -> list[OffsetRange]:
    """`out` with [first, end) explained: the records present, and `absent(lo, hi)`'s reasons between them."""
    cursor = first
    for offset, reason in present + [(end, None)]:
        if offset > cursor:
            for lo, hi, why in absent(cursor, offset):
                _push(out, OffsetRange(lo, hi, why))
        if reason is not None:
            _push(out, OffsetRange(offset, offset + 1, reason))
        cursor = offset + 1
    return out


def _absent_reasons(files: PartitionFiles, fenced: list[tuple[int, int]]):
    """Cluster mode: why offsets the log does not hold are absent. Where a fenced leader wrote
    (skipped batches, and the batches of the files that are not part of the log): `fenced`; from
    the bound of a takeover in progress: `undecided`; elsewhere the cleaner removed them."""
    spans = sorted(fenced + _skipped_file_spans(files))
    bound = files.epochs.bound

    def reasons(lo: int, hi: int) -> list[tuple[int, int, str]]:
        out, cursor = [], lo
        decided = hi if bound is None else max(lo, min(hi, bound))
        for first, last in spans:
            a, b = max(first, cursor), min(last + 1, decided)
            if a >= b:
                continue
            if a > cursor:
                out.append((cursor, a, COMPACTED))
            out.append((a, b, FENCED))
            cursor = b
        if cursor < decided:
            out.append((cursor, decided, COMPACTED))
        if decided < hi:
            out.append((decided, hi, UNDECIDED))
        return out

    return reasons


def _skipped_file_spans(files: PartitionFiles) -> list[tuple[int, int]]:
    """[first, last] offsets of every batch in the segment files that are not part of the log."""
    spans = []
    for base, _why in files.skipped:
        try:
            data = log_file(files.directory, base).read_bytes()
            for batch in iter_batches(data, allow_partial_tail=True, validate=False):
                spans.append((batch.base_offset, batch.last_offset))
        except (FileNotFoundError, CorruptRecordError):
            continue  # gone, or damaged where a fenced leader stopped: what was read is enough
    return spans


def _push(out: list[OffsetRange], r: OffsetRange) -> None:
    if out and out[-1].reason == r.reason and out[-1].end == r.first:
        out[-1] = OffsetRange(out[-1].first, r.end, r.reason)
    else:
        out.append(r)


def format_coverage(report: list[PartitionCoverage]) -> str:
    lines = []
    for c in report:
        held = ", ".join(f"[{r.first}, {r.end})" for r in c.held) or "nothing"
        lines.append(f"{c.topic}-{c.partition}: committed {c.committed}; holds {held}")
        for g in c.gaps:
            lines.append(f"  gap [{g.first}, {g.end}) {g.reason}")
    return "\n".join(lines)
