"""Planning a run: per partition, which offsets to read, and the tasks that read them.

A partition's range is [start, end): start is the group's committed offset (its txn version in
the table) or, for a new group, the --starting-offsets position; end is the smaller of the last
stable offset and --ending-offsets. Tasks are cut along batch boundaries (from the header scan)
at about `target_task_bytes`, never across a segment file, so each task is one contiguous byte
range of one file, and a batch that straddles `start` or `end` is read whole and trimmed by
offset in the executor.

Cluster mode (segments.leader_reads, docs/CLUSTER.md "Readers"): the scan counts only the batches
that are part of the log, so `end` never passes where the valid log ends, nor the start of a
takeover in progress (`undecided_from`); each task carries the epoch entries its executor drops
a fenced leader's batches with. After the tasks ran and before anything is committed,
`confirm_reads` checks that no takeover moved the log's end below what was read.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Any, Protocol

from topiclake.segments.errors import OffsetOutOfRangeError
from topiclake.segments.repair import RepairRecord, read_repairs

from ..errors import DataLossError
from .offsets import OffsetSpec
from .scan import AbortedRange, PartitionScan, offset_for_timestamp, scan_partition
from .source import PartitionFiles

DEFAULT_TARGET_TASK_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Task:
    """One Spark partition of work: a byte range of one segment file."""

    table_uri: str
    topic: str
    partition: int
    path: str
    inode: int
    start: int  # byte position of the first batch
    end: int  # byte position after the last batch
    min_offset: int  # first offset to keep
    max_offset: int  # last offset to keep (inclusive)
    aborted: tuple[AbortedRange, ...]
    epochs: tuple[tuple[int, int], ...] | None = None  # cluster mode: (epoch, start offset) entries
    root: Any = None  # an object-store root (topiclake.store's S3Root): `path` is an object key (log/bucket.py)
    closed: bool = False  # a bucket's closed segment (log/bucket.py)
    # A bucket's closed segment whose transactions' fate the planner could not learn (no producer
    # snapshot object at the manifest's end): its transactional batches are refused (decode.read_task)
    unsettled: bool = False
    # A bucket's tail: more (object key, start, end) ranges whose batches follow this one's, in
    # offset order (small flush objects read by one task, not one Spark task each: log/bucket.py)
    more: tuple[tuple[str, int, int], ...] = ()

    @property
    def bytes(self) -> int:
        return self.end - self.start + sum(end - start for _key, start, end in self.more)

    def as_dict(self) -> dict:
        """The task as decode.read_task and the executors take it (plain values: cheap to pickle)."""
        return {"table_uri": self.table_uri, "topic": self.topic, "partition": self.partition, "path": self.path,
                "inode": self.inode, "start": self.start, "end": self.end, "min_offset": self.min_offset,
                "max_offset": self.max_offset, "epochs": self.epochs, "root": self.root, "closed": self.closed,
                "unsettled": self.unsettled, "more": self.more,
                "aborted": [{"producer_id": a.producer_id, "first_offset": a.first_offset,
                             "last_offset": a.last_offset} for a in self.aborted]}


class ReadsConfirmed(Protocol):
    """The epoch history a plan read with: segments' ReadEpochs, or a bucket's (log/bucket.py)."""

    def confirm(self, directory: str, end: int) -> Any: ...


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    topic: str
    partition: int
    committed: int | None  # the group's txn version when planning (None: a new group)
    start_offset: int
    end_offset: int  # exclusive; the group's next offset after this run
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int
    tasks: tuple[Task, ...]
    aborted: tuple[AbortedRange, ...]  # aborted ranges inside [start, end)
    lost: tuple[int, int] | None = None  # [first, end) deleted before ingestion (--allow-data-loss)
    directory: str = ""
    epochs: ReadsConfirmed | None = None  # cluster mode or a bucket: the history this plan was read with
    fenced_batches: int = 0  # batches a fenced leader wrote, skipped from `start_offset` on
    undecided_from: int | None = None  # a takeover in progress: nothing from here on was planned
    repaired: tuple[RepairRecord, ...] = ()  # repair-log cuts at or after `start_offset`: lost offsets

    @property
    def app_id_suffix(self) -> str:
        return f"{self.topic}:{self.partition}"

    @property
    def bytes(self) -> int:
        return sum(t.bytes for t in self.tasks)

    @property
    def moves(self) -> bool:
        """Whether this run changes the group's offset (a new group records where it starts)."""
        return self.committed is None or self.end_offset != self.committed


def plan_partition(files: PartitionFiles, *, table_uri: str, committed: int | None, starting: OffsetSpec,
                   ending: OffsetSpec, target_task_bytes: int = DEFAULT_TARGET_TASK_BYTES,
                   allow_data_loss: bool = False) -> PartitionPlan:
    topic, partition = files.topic, files.partition
    at_end = False
    if committed is not None:
        start = committed
    else:
        start, at_end = _resolve_start(files, starting)
    lost = None
    if start < files.log_start_offset:
        if not allow_data_loss:
            raise DataLossError(topic, partition, start, files.log_start_offset)
        lost = (start, files.log_start_offset)
        start = files.log_start_offset
    scan = scan_partition(files, start)
    if start > scan.log_end_offset and scan.undecided_from is None:  # undecided: the end is not known yet
        raise OffsetOutOfRangeError(
            f"topic {topic!r} partition {partition}: offset {start} to read next is beyond the log end "
            f"{scan.log_end_offset} (was the topic deleted and re-created?)")
    if at_end:
        start = scan.last_stable_offset  # read_committed "latest" is the LSO, not the log end
    end = _resolve_end(scan, ending)
    if end < start:
        end = start  # an --ending-offsets below the committed position never moves offsets back
    tasks = tuple(cut_tasks(scan, start, end, table_uri=table_uri, target_bytes=target_task_bytes))
    aborted = tuple(a for a in scan.aborted if a.last_offset >= start and a.first_offset < end)
    repaired = tuple(r for r in read_repairs(files.directory) if r.offset >= start)
    return PartitionPlan(topic, partition, committed, start, end, files.log_start_offset, scan.log_end_offset,
                         scan.last_stable_offset, tasks, aborted, lost, files.directory, files.epochs,
                         sum(1 for _first, last in scan.fenced if last >= start), scan.undecided_from, repaired)


def confirm_reads(plans) -> None:
    """After the tasks of `plans` ran, before any commit: LeadershipChangedError if a takeover
    moved a partition's log end below the offsets its plan read (leader_reads rule 5)."""
    for plan in plans:
        if plan.epochs is not None and plan.moves:
            plan.epochs.confirm(plan.directory, plan.end_offset)


def _resolve_start(files: PartitionFiles, starting: OffsetSpec) -> tuple[int, bool]:
    """(offset, at_end): at_end means "the last stable offset", known only after the scan, which
    then starts from the active segment."""
    kind, value = starting.resolve(files.topic, files.partition)
    if kind == "earliest":
        return files.log_start_offset, False
    if kind == "offset":
        return value, False
    if kind == "time":
        found = offset_for_timestamp(files, value)
        if found is not None:
            return found, False
    # latest, or a time after every record (Kafka's ListOffsets then answers the log end)
    return max(files.log_start_offset, files.segments[-1].base_offset if files.segments else 0), True


def _resolve_end(scan: PartitionScan, ending: OffsetSpec) -> int:
    kind, value = ending.resolve(scan.files.topic, scan.files.partition)
    if kind == "offset":
        return min(value, scan.last_stable_offset)
    return scan.last_stable_offset


def cut_tasks(scan: PartitionScan, start: int, end: int, *, table_uri: str, target_bytes: int):
    """Tasks reading offsets [start, end) of a scanned partition."""
    b = scan.batches
    lo = bisect_right(b.next_offset, start)  # first batch with next_offset > start
    hi = bisect_left(b.base_offset, end)  # batches with base_offset < end
    segments = scan.files.segments
    epochs = tuple(map(tuple, scan.files.epochs.entries)) if scan.files.epochs is not None else None
    i = lo
    while i < hi:
        first = i
        seg = b.segment[i]
        total = 0
        # whole batches up to the target (a batch bigger than the target is a task of its own)
        while i < hi and b.segment[i] == seg and (total + b.size[i] <= target_bytes or i == first):
            total += b.size[i]
            i += 1
        last = i - 1
        min_offset = max(start, b.base_offset[first])
        max_offset = min(end, b.next_offset[last]) - 1
        segment = segments[seg]
        yield Task(table_uri, scan.files.topic, scan.files.partition, segment.path, segment.inode,
                   b.position[first], b.position[last] + b.size[last], min_offset, max_offset,
                   tuple(a for a in scan.aborted if a.last_offset >= min_offset and a.first_offset <= max_offset),
                   epochs)
