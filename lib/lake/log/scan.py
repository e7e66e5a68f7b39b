"""Header-only scan of a partition: where each batch is, and what the transactions did.

The driver plans from batch headers alone (61 bytes per batch, never the records): byte
positions and offsets to cut tasks along batch boundaries, and the transaction markers that
read_committed needs, which may sit far after the data they settle:

- each producer has at most one open transaction per partition, so the transactional data
  batches of a producer between two of its markers are one transaction; an ABORT marker turns
  them into an aborted range (producer id, first offset, marker offset - 1);
- the last stable offset (LSO) is the first offset of the earliest transaction still open at the
  end of the log (the log end offset when none is): nothing at or past it may be read yet.

The scan starts at the segment holding the first offset to read and runs to the log end. A
transaction open at the start offset cannot exist (every run stops at or before the LSO), so no
earlier data is needed to settle anything after it.

Cluster mode (`files.epochs`, segments.leader_reads): only the batches that are part of the log
count. Each segment is read up to `files.limit(i)` (the next segment's base, or the bound of a
takeover in progress), a batch a fenced leader wrote is skipped (its offsets are kept in
`fenced`, to explain gaps) and never opens or closes a transaction, and the log end is where the
valid log ends, so a plan never reaches past it.
"""

from __future__ import annotations

import mmap
from array import array
from dataclasses import dataclass, field

import numpy as np

from topiclake.segments.batch import CURRENT_MAGIC, HEADER, HEADER_SIZE, MAGIC_OFFSET
from topiclake.segments.control import ControlRecordType, parse_control_key
from topiclake.segments.errors import CorruptLogError, CorruptRecordError
from topiclake.segments.filenames import INDEX_SUFFIX, LOG_SUFFIX
from topiclake.segments.leader_reads import log_batches
from topiclake.segments.offset_index import OffsetIndex

from .source import PartitionFiles, SegmentFile


@dataclass(frozen=True, slots=True)
class AbortedRange:
    producer_id: int
    first_offset: int
    last_offset: int  # inclusive: the offset before the ABORT marker


@dataclass(slots=True)
class BatchPositions:
    """Columnar batch index of the scanned range (arrays, not objects: logs hold millions)."""

    segment: array = field(default_factory=lambda: array("i"))  # index into PartitionFiles.segments
    position: array = field(default_factory=lambda: array("q"))
    size: array = field(default_factory=lambda: array("q"))
    base_offset: array = field(default_factory=lambda: array("q"))
    next_offset: array = field(default_factory=lambda: array("q"))

    def __len__(self) -> int:
        return len(self.position)


class Transactions:
    """The transactions' fate, batch by batch in offset order (the rules above): aborted ranges,
    the transactions still open, the control batches seen."""

    def __init__(self, open_at_start: dict[int, int] | None = None) -> None:
        """`open_at_start`: the transactions open where the batches seen begin (a bucket's tail
        begins after the closed segments: log/bucket.py)."""
        self.aborted: list[AbortedRange] = []
        self.open: dict[int, int] = dict(open_at_start or {})  # producer id -> first offset of its open transaction
        self.controls = 0

    def see(self, batch) -> None:
        h = batch.header
        if h.is_transactional and h.producer_id >= 0:
            if h.is_control:
                self.controls += 1
                began = self.open.pop(h.producer_id, None)
                if _control_type(batch) == ControlRecordType.ABORT and began is not None:
                    self.aborted.append(AbortedRange(h.producer_id, began, h.base_offset - 1))
            else:
                self.open.setdefault(h.producer_id, h.base_offset)
        elif h.is_control:
            self.controls += 1

    def last_stable_offset(self, log_end: int) -> int:
        return min(self.open.values(), default=log_end)


@dataclass(slots=True)
class PartitionScan:
    files: PartitionFiles
    start_offset: int
    batches: BatchPositions
    aborted: list[AbortedRange]
    log_end_offset: int  # offset after the last complete batch
    last_stable_offset: int
    control_batches: int = 0
    fenced: list[tuple[int, int]] = field(default_factory=list)  # [first, last] of skipped batches

    @property
    def undecided_from(self) -> int | None:
        """Offsets from here on are not decided yet (a takeover in progress): not planned."""
        return self.files.epochs.bound if self.files.epochs is not None else None


def _map(segment: SegmentFile):
    # Not closed explicitly: batches hold views into the map; it is unmapped when they are gone.
    with open(segment.path, "rb") as f:
        size = f.seek(0, 2)
        if size == 0:
            return None
        return mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)


def scan_partition(files: PartitionFiles, start_offset: int, *, until: int | None = None) -> PartitionScan:
    """Scan headers from the segment holding `start_offset` to the log end (CorruptLogError at
    damage), or only up to the batch that ends at or after `until` (the offset of a damage found
    before, to scan what lies below it)."""
    segments = files.segments
    first = 0
    for i, seg in enumerate(segments):
        if seg.base_offset <= start_offset:
            first = i
    out = BatchPositions()
    txns = Transactions()
    log_end = segments[-1].base_offset if segments else files.log_start_offset
    fenced: list[tuple[int, int]] = []
    reached = -1  # the next offset after the last batch walked

    def skipped(batch, _reason: str) -> None:
        fenced.append((batch.base_offset, batch.last_offset))

    for index in range(first, len(segments)):
        if until is not None and reached >= until:
            break
        seg = segments[index]
        buf = _map(seg)
        if buf is None:
            continue
        last = index == len(segments) - 1  # only the active segment may end mid-append
        begin = _index_position(seg, start_offset, buf) if index == first else 0
        batches = log_batches(buf, files.epochs, start=begin, source=seg.path, last=last, limit=files.limit(index),
                              on_skip=skipped)
        for batch in damage_named(batches, files, seg.base_offset):
            h = batch.header
            log_end = reached = h.next_offset
            if h.next_offset <= start_offset:
                continue
            txns.see(batch)
            out.segment.append(index)
            out.position.append(batch.position)
            out.size.append(h.size)
            out.base_offset.append(h.base_offset)
            out.next_offset.append(h.next_offset)
            if until is not None and h.next_offset >= until:
                break  # the damage follows: never walk into it
    return PartitionScan(files, start_offset, out, txns.aborted, log_end, txns.last_stable_offset(log_end),
                         txns.controls, fenced)


def damage_named(batches, files: PartitionFiles, base_offset: int):
    """`batches` of one of the partition's segments (based at `base_offset`), a CorruptRecordError
    raised while walking them named as the partition's damage at the offset after the last whole
    batch (CorruptLogError)."""
    readable = base_offset
    try:
        for batch in batches:
            yield batch
            readable = batch.next_offset
    except CorruptRecordError as exc:
        raise CorruptLogError.of(exc, topic=files.topic, partition=files.partition, offset=readable) from None


def _index_position(seg: SegmentFile, target: int, buf) -> int:
    """Where to start scanning `seg` for `target`: the offset index's largest entry at or below
    it (the batch there ends at or before the target, so nothing earlier can hold it). The index
    is only a hint: missing, preallocated (a zero tail) or stale after a crash, it falls back to
    the start of the file, and a position that is not a batch header there is ignored."""
    path = seg.path[: -len(LOG_SUFFIX)] + INDEX_SUFFIX
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return 0
    entries = np.frombuffer(raw[: len(raw) - len(raw) % OffsetIndex.ENTRY.size], dtype=">i4").reshape(-1, 2)
    if len(entries) == 0:
        return 0
    rel = entries[:, 0].astype(np.int64)
    steps = np.diff(rel) > 0  # entries increase strictly; a preallocated tail of zeros ends them
    valid = len(rel) if steps.all() else int(np.argmin(steps)) + 1
    slot = int(np.searchsorted(rel[:valid], target - seg.base_offset, side="right")) - 1
    if slot < 0:
        return 0
    position = int(entries[slot, 1])
    if position < 0 or position + HEADER_SIZE > len(buf) or buf[position + MAGIC_OFFSET] != CURRENT_MAGIC:
        return 0
    base_offset = HEADER.unpack_from(buf, position)[0]
    return position if seg.base_offset <= base_offset <= target else 0


def _control_type(batch) -> ControlRecordType:
    records = batch.records()  # one tiny record: decoding it here is not a hot path
    if len(records) != 1:
        raise CorruptRecordError(f"control batch at offset {batch.base_offset} holds {len(records)} records",
                                 source=batch.source, position=batch.position)
    kind, _raw = parse_control_key(records[0].key)
    return kind


def offset_for_timestamp(files: PartitionFiles, timestamp_ms: int) -> int | None:
    """Kafka's ListOffsets by time: the first offset whose record timestamp >= timestamp_ms, or None
    (then the consumer starts at the log end). Batch max timestamps skip whole batches; only the
    one batch that holds the answer is decoded."""
    for index, seg in enumerate(files.segments):
        buf = _map(seg)
        if buf is None:
            continue
        last = index == len(files.segments) - 1
        for batch in log_batches(buf, files.epochs, source=seg.path, last=last, limit=files.limit(index),
                                 validate=True):
            if batch.is_control or batch.header.max_timestamp < timestamp_ms:
                continue
            if batch.header.next_offset <= files.log_start_offset:
                continue
            for record in batch.records():
                if record.timestamp >= timestamp_ms and record.offset >= files.log_start_offset:
                    return record.offset
    return None
