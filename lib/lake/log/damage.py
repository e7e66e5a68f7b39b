"""Where a partition's log is damaged, and how far it runs beyond the damage.

A damaged batch (a bad length, a file cut short in its middle, a wrong magic) stops every reader
of the partition at the offset where it starts: the planner raises CorruptLogError there (scan.py),
so an ingest never commits past it. Coverage, the metrics and `topiclake repair-log` ask this
module instead: the damage (None when the log reads whole) and the log's end beyond it as far as
the files tell, so the gap [damage, end) can be shown and counted as lag.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

from topiclake.segments.batch import CURRENT_MAGIC, HEADER, HEADER_SIZE, BatchHeader, iter_batches
from topiclake.segments.errors import CorruptLogError, CorruptRecordError
from topiclake.segments.torn_tail import last_indexed_position, next_valid_batch

from .scan import scan_partition
from .source import PartitionFiles


@dataclass(frozen=True, slots=True)
class LogDamage:
    error: CorruptLogError
    log_end: int  # the offset after the last whole batch the files hold beyond the damage (>= error.offset)

    @property
    def offset(self) -> int:
        return self.error.offset


def find_damage(files: PartitionFiles, start: int | None = None) -> LogDamage | None:
    """The first damage at or after `start` (default: the log start), or None."""
    if not files.segments:
        return None
    try:
        scan_partition(files, files.log_start_offset if start is None else start)
    except CorruptLogError as exc:
        return LogDamage(exc, max(exc.offset, _end_beyond(files, exc), _damaged_header_end(exc)))
    return None


def _damaged_header_end(damage: CorruptLogError) -> int:
    """The next offset the damaged batch's own header names, when the rest of its header agrees
    with where it lies (a damaged length field leaves the offsets readable); else its offset."""
    if damage.source is None or damage.position is None:
        return damage.offset
    try:
        with open(damage.source, "rb") as f:
            head = os.pread(f.fileno(), HEADER_SIZE, damage.position)
    except FileNotFoundError:
        return damage.offset
    if len(head) < HEADER_SIZE:
        return damage.offset
    h = BatchHeader(*HEADER.unpack_from(head))
    plausible = (h.magic == CURRENT_MAGIC and h.base_offset == damage.offset and h.last_offset_delta >= 0
                 and h.records_count == h.last_offset_delta + 1)
    return h.next_offset if plausible else damage.offset


def _end_beyond(files: PartitionFiles, damage: CorruptLogError) -> int:
    """The next offset after the last whole batch of the active segment, read from where the
    damage no longer matters: the active segment's start when the damage is in an older one;
    else the next valid batch after the damage (its last offset index entry, which the broker
    wrote past the damage, or the first position after it where a batch with a valid CRC starts)."""
    active = files.segments[-1]
    with open(active.path, "rb") as f:
        size = f.seek(0, 2)
        if size == 0:
            return damage.offset
        buf = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    try:
        start: int | None = 0
        if damage.source == active.path:
            after = (damage.position or 0) + 1
            indexed = last_indexed_position(active.path)
            start = indexed if indexed is not None and indexed >= after else next_valid_batch(buf, after)
        return _walk_end(buf, start) if start is not None else damage.offset
    finally:
        try:
            buf.close()
        except BufferError:  # a view is still alive somewhere; it is unmapped when dropped
            pass


def _walk_end(buf, start: int) -> int:
    """The next offset after the last whole batch from `start` on (its base offset's batch on)."""
    end = -1
    try:
        for batch in iter_batches(buf, start=start, allow_partial_tail=True, validate=False):
            end = batch.next_offset
            del batch
    except CorruptRecordError:
        pass  # a second damage further on: the end read so far is what the files tell
    return end
