"""What the maintenance jobs (compaction, retention) know about a partition, from one header scan.

The driver never opens a `Log` (its recovery writes): it lists the segment files (source.py) and
walks every batch header once, which gives the facts Kafka's cleaner and retention are judged
by, as a `segments.log_summary.LogSummary`:

- per segment: size, largest timestamp (max batch timestamp; the file's mtime when it holds no
  batch, as LogSegment.largestTimestamp), first batch timestamp (max.compaction.lag.ms), index
  file sizes (the cleaner's grouping), mtime;
- the high watermark: the end of the last complete batch (the broker may be mid-append; a single
  replica commits what it wrote, and a torn tail is not committed);
- the last stable offset: the first offset of the earliest transaction still open;
- the aborted transactions (for the offset map: aborted data never enters it);
- batch positions per segment (arrays), to cut byte-range tasks along batch boundaries.

Cluster mode (`files.epochs`, segments.leader_reads): only the segment files of the log are
listed, each is walked up to its limit with a fenced leader's batches skipped, and a segment's
size is its valid bytes (`end`), so the active segment is the last one of the log (never a file a
fenced leader created later), every fact above describes the valid log, and a rewrite reads
nothing else. Segments of the log are judged by their own bytes; the fingerprint a swap checks
stays the file's (`file.size`).
"""

from __future__ import annotations

import mmap
import os
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from topiclake.segments.batch import NO_TIMESTAMP
from topiclake.segments.filenames import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX
from topiclake.segments.leader_reads import log_batches
from topiclake.segments.log_summary import LogSummary, SegmentSummary
from topiclake.segments.txn_metadata import AbortedTxn, collect_aborted_txns

from .source import PartitionFiles, SegmentFile


@dataclass(slots=True)
class SegmentScan:
    file: SegmentFile
    end: int  # bytes of whole batches (the active segment may end in a partial one)
    positions: array = field(default_factory=lambda: array("q"))  # batch start positions
    next_offsets: array = field(default_factory=lambda: array("q"))  # each batch's next offset
    max_timestamp: int = NO_TIMESTAMP
    first_batch_timestamp: int = NO_TIMESTAMP
    mtime_ms: int = 0
    index_bytes: int = 0
    time_index_bytes: int = 0

    def valid_size(self, active: bool, epochs: bool) -> int:
        """The bytes a job reads of this segment: its whole batches (the active segment's and,
        in cluster mode, every segment's, a fenced leader's tail excluded), else the file."""
        return self.end if active or epochs else self.file.size


@dataclass(frozen=True, slots=True)
class PartitionState:
    files: PartitionFiles
    segments: tuple[SegmentScan, ...]
    summary: LogSummary
    aborted: tuple[AbortedTxn, ...]

    @property
    def topic(self) -> str:
        return self.files.topic

    @property
    def partition(self) -> int:
        return self.files.partition

    @property
    def high_watermark(self) -> int:
        return self.summary.high_watermark

    def segment(self, base_offset: int) -> SegmentScan:
        for s in self.segments:
            if s.file.base_offset == base_offset:
                return s
        raise KeyError(f"{self.topic}-{self.partition} has no segment {base_offset}")


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def scan_state(files: PartitionFiles) -> PartitionState | None:
    """Scan every batch header of the partition; None when it has no segment file yet."""
    if not files.segments:
        return None
    scans = [SegmentScan(s, 0) for s in files.segments]
    maps: list = []

    def walk():
        for i, scan in enumerate(scans):
            path = scan.file.path
            st = os.stat(path)
            scan.mtime_ms = st.st_mtime_ns // 1_000_000
            stem = path[: -len(LOG_SUFFIX)]
            scan.index_bytes = _file_size(stem + INDEX_SUFFIX)
            scan.time_index_bytes = _file_size(stem + TIME_INDEX_SUFFIX)
            size = min(st.st_size, scan.file.size) if i < len(scans) - 1 else st.st_size
            if size == 0:
                continue
            with open(path, "rb") as f:
                buf = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
            maps.append(buf)
            last = i == len(scans) - 1  # only the active segment may end mid-append
            for batch in log_batches(buf, files.epochs, source=path, last=last, limit=files.limit(i)):
                h = batch.header
                scan.positions.append(batch.position)
                scan.next_offsets.append(h.next_offset)
                scan.end = batch.position + h.size
                if scan.first_batch_timestamp == NO_TIMESTAMP:
                    scan.first_batch_timestamp = h.max_timestamp
                scan.max_timestamp = max(scan.max_timestamp, h.max_timestamp)
                yield batch

    open_txns: dict[int, int] = {}

    def track(batches):
        # Each producer has at most one open transaction: data opens it, any marker closes it.
        for batch in batches:
            h = batch.header
            if h.is_transactional and h.producer_id >= 0:
                if h.is_control:
                    open_txns.pop(h.producer_id, None)
                else:
                    open_txns.setdefault(h.producer_id, h.base_offset)
            yield batch

    aborted = collect_aborted_txns(track(walk()))
    for m in maps:
        try:
            m.close()
        except BufferError:  # a view is still alive somewhere; it is unmapped when dropped
            pass
    active = scans[-1]
    hw = max(active.next_offsets[-1] if len(active.next_offsets) else active.file.base_offset,
             active.file.base_offset)
    lso = min(open_txns.values(), default=hw)
    summaries = tuple(SegmentSummary(
        base_offset=s.file.base_offset, size=s.valid_size(s is active, files.epochs is not None),
        largest_timestamp=s.max_timestamp if s.max_timestamp >= 0 else s.mtime_ms,
        first_batch_timestamp=s.first_batch_timestamp, offset_index_bytes=s.index_bytes,
        time_index_bytes=s.time_index_bytes, last_modified_ms=s.mtime_ms) for s in scans)
    summary = LogSummary(files.topic, files.partition, summaries, log_start_offset=min(files.log_start_offset, hw),
                         log_end_offset=hw, high_watermark=hw, last_stable_offset=min(lso, hw))
    return PartitionState(files, tuple(scans), summary, aborted)


def partition_dir(state: PartitionState) -> Path:
    return Path(state.files.directory)
