"""What a compaction run plans and reports, on a directory or an object-store root alike: its
options, each partition's plan and outcome, Kafka's choice of a partition to clean (`chosen`)
and the run's result (runs/compaction.py for a directory, runs/bucket_compaction.py for a bucket)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Sequence

from topiclake.segments.cleanable import LogToClean
from topiclake.segments.config import LogConfig
from topiclake.segments.errors import TopiclakeError
from topiclake.segments.leader_reads import ReadEpochs
from topiclake.segments.txn_metadata import AbortedTxn

DEFAULT_TARGET_TASK_BYTES = 64 * 1024 * 1024

@dataclass(frozen=True, slots=True)
class CompactOptions:
    root: Path | Any  # a directory, or an object-store root (topiclake.store's S3Root: bucket_compaction)
    topics: tuple[str, ...] = ()  # empty: every topic whose cleanup.policy includes compact
    force: bool = False  # clean every partition with a cleanable range, whatever its dirty ratio
    target_task_bytes: int = DEFAULT_TARGET_TASK_BYTES
    now_ms: int | None = None  # the cleaner's clock (delete horizons, compaction lags); tests


@dataclass(frozen=True, slots=True)
class SegmentRef:
    base_offset: int
    path: str
    inode: int
    size: int  # bytes the rewrite reads (the active segment: up to the planned high watermark)
    file_size: int  # the file's size when planned: with the inode, what the swap checks it against
    index_bytes: int
    time_index_bytes: int
    mtime_ms: int


@dataclass(frozen=True, slots=True)
class RewriteSpec:
    """What one partition's rewrite task needs (pickled to the executor with the function)."""

    topic: str
    partition: int
    directory: str
    segments: tuple[SegmentRef, ...]
    first_dirty_offset: int
    first_uncleanable_offset: int
    config: dict[str, str]
    now_ms: int
    aborted: tuple[AbortedTxn, ...]
    epochs: tuple[tuple[int, int], ...] | None = None  # cluster mode: (epoch, start offset) entries


class SkipReason(Enum):
    """Why a partition was not cleaned; the value reads after a count in the run's summary."""

    NOT_COMPACTED = "in topics without cleanup.policy=compact"
    NO_SEGMENTS = "without segments"
    NOTHING_CLEANABLE = "with nothing to clean"
    BELOW_DIRTY_RATIO = "below min.cleanable.dirty.ratio"
    LOCKED = "held by another compaction job"
    TAKEOVER = "in a leader's takeover (run again)"  # a bucket root: the tail is not decided yet


@dataclass(slots=True)
class PartitionCompaction:
    topic: str
    partition: int
    to_clean: LogToClean | None = None
    spec: RewriteSpec | None = None
    map_tasks: list[MapTask] = field(default_factory=list)
    skipped: str | None = None  # why nothing was cleaned, with the figures
    skip_reason: SkipReason | None = None
    error: str | None = None
    bytes_before: int = 0  # of the replaced segments
    bytes_after: int = 0
    records_read: int = 0
    records_retained: int = 0
    segments_before: int = 0
    segments_after: int = 0
    checkpoint: int | None = None
    map_entries: int = 0
    split: bool = False  # its key map came from map tasks over pieces of its dirty range (runs.compaction)
    epochs: ReadEpochs | None = None  # cluster mode: the history the plan read the log with
    read_end: int = 0  # the planned high watermark: the tasks read nothing at or past it

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def records_dropped(self) -> int:
        return self.records_read - self.records_retained

    @property
    def dirty_bytes(self) -> int:
        """Bytes of the dirty range (its map tasks' byte ranges): the size of the partition's work."""
        return sum(t.end - t.start for t in self.map_tasks)

    def skip(self, reason: SkipReason, detail: str | None = None) -> "PartitionCompaction":
        self.skip_reason, self.skipped = reason, detail or reason.value
        return self


@dataclass(slots=True)
class CompactResult:
    run_id: str
    partitions: list[PartitionCompaction] = field(default_factory=list)
    duration_s: float = 0.0
    named_topics: tuple[str, ...] = ()  # the --topic list: its skipped partitions are listed one by one

    @property
    def cleaned(self) -> list[PartitionCompaction]:
        return [p for p in self.partitions if p.checkpoint is not None and p.error is None]

    @property
    def bytes_before(self) -> int:
        return sum(p.bytes_before for p in self.cleaned)

    @property
    def bytes_after(self) -> int:
        return sum(p.bytes_after for p in self.cleaned)

    @property
    def errors(self) -> list[PartitionCompaction]:
        return [p for p in self.partitions if p.error is not None]


@dataclass(frozen=True, slots=True)
class MapTask:
    """One map task: a byte range of a dirty segment, cut at batch boundaries."""

    topic: str
    partition: int
    path: str
    inode: int
    start: int  # byte positions in the segment file
    end: int
    dirty_start: int  # the partition's dirty range [start, end) in offsets
    dirty_end: int
    aborted: tuple[AbortedTxn, ...]
    epochs: tuple[tuple[int, int], ...] | None = None  # cluster mode: (epoch, start offset) entries


def compacted_of(metas, *, named: bool) -> list[tuple[str, int, LogConfig]]:
    """compacted_topics' rule over topics read from any root; `named`: the --topic list's."""
    out = []
    for meta in metas:
        config = meta.log_config
        if not config.compact:
            if named:
                raise TopiclakeError(f"topic {meta.name!r} has cleanup.policy={','.join(config.cleanup_policy)}: "
                                     "only compacted topics are compacted")
            continue
        out.append((meta.name, meta.partitions, config))
    return out


def chosen(out: PartitionCompaction, ltc: LogToClean, config: LogConfig, force: bool) -> bool:
    """Whether Kafka's cleaner would clean `ltc` (or `force`); if not, `out` says why."""
    out.to_clean = ltc
    if ltc.first_dirty_offset >= ltc.first_uncleanable_offset or ltc.cleanable_bytes == 0:
        out.skip(SkipReason.NOTHING_CLEANABLE, f"nothing cleanable (dirty from {ltc.first_dirty_offset}, "
                                               f"uncleanable from {ltc.first_uncleanable_offset})")
        return False
    if not (ltc.eligible or force):
        out.skip(SkipReason.BELOW_DIRTY_RATIO, f"dirty ratio {ltc.cleanable_ratio:.2f} <= "
                                               f"min.cleanable.dirty.ratio {config.min_cleanable_dirty_ratio}")
        return False
    return True


def describe_planned(planned: Sequence[PartitionCompaction]) -> str:
    return "topiclake compact: " + " ".join(
        f"{p.name}@[{ltc.first_dirty_offset},{ltc.first_uncleanable_offset})" for p in planned
        if (ltc := p.to_clean) is not None)
