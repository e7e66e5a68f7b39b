"""One segment of a partition log (Kafka's LogSegment): a .log file plus its two indexes.

The segment does no validation of its own on append: the Log has already checked every batch
and assigned its offsets. It keeps the sparse indexes up to date, answers "where does offset X
start" (index lookup, then a short forward scan of batch headers) and rebuilds everything from
the .log in `recover()` after a crash.

Threads: one writer appends; readers may call `read`, `translate_offset` and
`find_offset_by_timestamp` concurrently. The writer writes the bytes, then publishes the new
size, then adds index entries, so a reader that looks up the index first and reads the size
second never sees an entry pointing past the size it uses.
"""

from __future__ import annotations

import io
import logging
import os
import random
import time
from dataclasses import dataclass
from typing import Callable, Iterable, NamedTuple, Sequence

from . import filenames
from .atomic import fsync
from .batch import LOG_OVERHEAD, NO_TIMESTAMP, BatchHeader
from .config import LogConfig
from .errors import CorruptRecordError
from .file_records import MIN_LENGTH, iter_file_batches, iter_file_headers
from .offset_index import OffsetIndex
from .time_index import TimeIndex, TimestampOffset

log = logging.getLogger(__name__)

# (base offset, partition leader epoch, last offset) -> whether the batch belongs to the log
# (`leader_epochs.EpochHistory.is_valid`: cluster mode's rule for a fenced leader's bytes).
BatchValidity = Callable[[int, int, int], bool]

_INT32_MAX = 0x7FFFFFFF
_LENGTH_AT = 8


@dataclass(frozen=True, slots=True)
class BatchPosition:
    """Where a batch is in a segment file (Kafka's LogOffsetPosition)."""

    base_offset: int
    last_offset: int
    position: int
    size: int


@dataclass(frozen=True, slots=True)
class SegmentSlice:
    """Whole batches [position, position + size) of one segment, holding offsets
    [first_offset, next_offset). Only batch headers were read to find these bounds: the bytes
    stay in the file, so a fetch can hand them to sendfile without copying them through Python."""

    position: int
    size: int
    first_offset: int
    next_offset: int


class BatchSummary(NamedTuple):
    """What a segment needs to know about each appended batch."""

    base_offset: int
    last_offset: int
    max_timestamp: int
    size: int


class RollParams(NamedTuple):
    """What shouldRoll needs to know about the incoming append (Kafka's RollParams)."""

    max_timestamp: int
    max_offset: int
    size: int
    now_ms: int


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class LogSegment:
    def __init__(self, directory: str | os.PathLike, base_offset: int, config: LogConfig, *,
                 suffix: str = "", writable: bool = True, created_ms: int | None = None):
        """Open (or create) the segment `base_offset` in `directory`. `suffix` selects the files
        of an in-progress swap (".cleaned", ".swap"). A new segment gets preallocated indexes."""
        self.directory = filenames.as_path(directory)
        self.base_offset = base_offset
        self.config = config
        self.suffix = suffix
        self.writable = writable
        self.log_path = filenames.log_file(self.directory, base_offset, suffix)
        if writable:
            fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
            self._file = io.FileIO(fd, "r+", closefd=True)
        else:
            self._file = io.FileIO(self.log_path, "r")
        self._size = os.fstat(self._file.fileno()).st_size
        # Whether the .log is on disk up to _size: not known for a file this object did not write
        # (a killed process may have left bytes in the page cache only).
        self._synced = False
        max_index = config.segment_index_bytes
        self.offset_index = OffsetIndex(filenames.index_file(self.directory, base_offset, suffix),
                                        base_offset, max_index, writable=writable)
        self.time_index = TimeIndex(filenames.time_index_file(self.directory, base_offset, suffix),
                                    base_offset, max_index, writable=writable)
        # Kafka starts "max timestamp so far" from the time index's last entry, which for a
        # segment closed cleanly is its largest timestamp.
        self._max_ts: TimestampOffset = self.time_index.last_entry
        self._bytes_since_last_index_entry = 0  # restarts at 0 on every open, as in Kafka
        self._first_batch_timestamp: int | None = None
        self._next_offset: int | None = None
        self._created_ms = now_ms() if created_ms is None else created_ms
        jitter = config.segment_jitter_ms
        self.roll_jitter_ms = random.randrange(min(jitter, config.segment_ms)) if jitter > 0 else 0

    # -- identity and size
    @property
    def size(self) -> int:
        return self._size

    @property
    def file(self) -> io.FileIO:
        """The open .log file; a ReadResult keeps it alive even after the segment is retired."""
        return self._file

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path}, size={self._size})"

    # -- appending
    def append(self, data: bytes | bytearray | memoryview, batches: Sequence[BatchHeader]) -> int:
        """Write already validated, offset-assigned batches (`data` is exactly them, in order);
        return the position they start at."""
        return self.append_summaries(data, [BatchSummary(h.base_offset, h.last_offset, h.max_timestamp, h.size)
                                            for h in batches])

    def append_summaries(self, data: bytes | bytearray | memoryview, batches: Sequence["BatchSummary"]) -> int:
        """`append` with just the four header fields the segment needs (the Log's hot path
        skips building full BatchHeader objects)."""
        if not batches:
            return self._size
        if batches[0].base_offset < self.base_offset:
            raise CorruptRecordError(f"batch base offset {batches[0].base_offset} is below the segment's "
                                     f"base offset {self.base_offset}", source=str(self.log_path))
        self._require_relative(batches[-1].last_offset)
        start = self._size
        view = memoryview(data)
        written = 0
        while written < len(view):  # pwrite may write less than asked (signals, huge buffers)
            written += os.pwrite(self._file.fileno(), view[written:], start + written)
        self._synced = False
        self._size = start + len(view)  # publish the bytes before any index entry refers to them
        if start == 0:
            self._first_batch_timestamp = batches[0].max_timestamp
        position = start
        for batch in batches:
            self._index_batch(batch, position)
            position += batch.size
        self._next_offset = batches[-1].last_offset + 1
        return start

    def append_batch(self, head: bytes, data: bytes, last_offset: int, max_timestamp: int) -> int:
        """Write one already validated batch whose offsets are assigned: `head` replaces the
        first bytes of `data` (base offset, length, leader epoch: outside the CRC), written with
        the rest in one pwritev, no copy of the batch. The Log checked that its base offset
        (in `head`) is at least this segment's; return the position it starts at."""
        self._require_relative(last_offset)
        start = self._size
        size = len(data)
        fd = self._file.fileno()
        written = os.pwritev(fd, (head, memoryview(data)[len(head):]), start)
        if written < size:  # pwritev may write less than asked (signals, huge buffers)
            whole = memoryview(head + bytes(memoryview(data)[len(head):]))
            while written < size:
                written += os.pwrite(fd, whole[written:], start + written)
        self._synced = False
        self._size = start + size  # publish the bytes before any index entry refers to them
        if start == 0:
            self._first_batch_timestamp = max_timestamp
        self._index(last_offset, max_timestamp, size, start)
        self._next_offset = last_offset + 1
        return start

    def _index_batch(self, header: "BatchSummary | BatchHeader", position: int) -> None:
        self._index(header.last_offset, header.max_timestamp, header.size, position)

    def _index(self, last_offset: int, max_timestamp: int, size: int, position: int) -> None:
        """The one index rule for append and recovery (Kafka 4's per-batch form): a new entry
        (batch last offset, batch start) once more than index.interval.bytes were added since
        the last one. In recovery the counter equals Kafka's validBytes - lastIndexEntry."""
        if max_timestamp > self._max_ts.timestamp:
            self._max_ts = TimestampOffset(max_timestamp, last_offset)
        if self._bytes_since_last_index_entry > self.config.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self._max_ts.timestamp, self._max_ts.offset)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += size

    def _require_relative(self, offset: int) -> None:
        if not self.can_convert_to_relative_offset(offset):
            raise CorruptRecordError(f"offset {offset} does not fit as an int32 relative to base offset "
                                     f"{self.base_offset}", source=str(self.log_path))

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= _INT32_MAX

    def should_roll(self, incoming: RollParams) -> bool:
        """Kafka's LogSegment.shouldRoll."""
        return self.should_roll_at(incoming.max_timestamp, incoming.max_offset, incoming.size, incoming.now_ms)

    def should_roll_at(self, max_timestamp: int, max_offset: int, size: int, now_ms: int) -> bool:
        """`should_roll` with RollParams' fields as arguments (cheapest checks first: it runs on
        every append)."""
        config = self.config
        current = self._size
        if current > config.segment_bytes - size:
            return True
        if current > 0 and self._time_waited_for_roll(max_timestamp, now_ms) > config.segment_ms - self.roll_jitter_ms:
            return True
        return (self.offset_index.is_full() or self.time_index.is_full()
                or not 0 <= max_offset - self.base_offset <= _INT32_MAX)

    def _time_waited_for_roll(self, max_timestamp: int, now: int) -> int:
        first = self._first_batch_timestamp if self._first_batch_timestamp is not None else self.first_batch_timestamp()
        if first is not None and first >= 0:
            return max_timestamp - first
        return now - self._created_ms

    def first_batch_timestamp(self) -> int | None:
        """Max timestamp of the first batch (what segment.ms counts from), None if empty."""
        if self._first_batch_timestamp is None and self._size > 0:
            for _pos, header in iter_file_headers(self._file.fileno(), 0, self._size, source=str(self.log_path)):
                self._first_batch_timestamp = header.max_timestamp
                break
        return self._first_batch_timestamp

    # -- reading
    def translate_offset(self, offset: int, start_position: int = 0) -> BatchPosition | None:
        """The first batch whose last offset >= `offset` (index lookup + header scan), or None."""
        entry = self.offset_index.lookup(offset)
        end = self._size  # read after the index (see the module docstring)
        for pos, header in iter_file_headers(self._file.fileno(), max(entry.position, start_position), end,
                                             source=str(self.log_path), whole=True):
            if header.last_offset >= offset:
                return BatchPosition(header.base_offset, header.last_offset, pos, header.size)
        return None

    def read(self, start_offset: int, max_size: int, *, max_position: int | None = None,
             min_one_message: bool = True) -> SegmentSlice | None:
        """Whole batches from the one holding `start_offset`, at most `max_size` bytes (but at
        least the first batch with min_one_message), ending at or before `max_position`.
        None if no batch of this segment holds offsets >= start_offset."""
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        end = self._size if max_position is None else min(max_position, self._size)
        if found.position >= end:
            return None
        budget = max(max_size, found.size) if min_one_message else max_size
        limit = min(end, found.position + budget)
        stop, next_offset = self._whole_batches_end(found, limit)
        if stop == found.position:
            return None
        held = os.fstat(self._file.fileno()).st_size
        if held < stop:  # cut short under the broker: send the whole batches it still holds
            if found.position + found.size > held:
                raise CorruptRecordError(f"the file holds {held} bytes, fewer than the {self._size} written to it: "
                                         f"the batch here is cut short", source=str(self.log_path),
                                         position=found.position)
            stop, next_offset = self._whole_batches_end(found, held)
        return SegmentSlice(found.position, stop - found.position, found.base_offset, next_offset)

    def _whole_batches_end(self, first: BatchPosition, limit: int) -> tuple[int, int]:
        """(end position, next offset) of the whole batches from `first` that end at or before
        `limit`, reading batch headers only. The offset index jumps close to `limit` (an entry's
        position is where a batch starts, and it was written after that batch's bytes), so a
        multi-MB read costs a few small preads, not a copy of the data."""
        if first.position + first.size > limit:
            return first.position, first.base_offset
        fd = self._file.fileno()
        end, next_offset = first.position + first.size, first.last_offset + 1
        hint = self.offset_index.entry_at_or_below_position(limit)
        if hint is not None and hint.position > end:
            # Everything in [end, hint.position) is whole batches; the batch at the hint starts
            # with the offset that follows them (its base offset: compaction may leave a gap).
            head = os.pread(fd, _SCAN_HEAD, hint.position)
            if len(head) == _SCAN_HEAD:
                end, next_offset = hint.position, _scan_head(head)[0]
        while limit - end >= LOG_OVERHEAD:
            head = os.pread(fd, _SCAN_HEAD, end)
            if len(head) < _SCAN_HEAD:
                break
            base, size, after = _scan_head(head)
            if size < MIN_LENGTH + LOG_OVERHEAD or end + size > limit:
                break
            end, next_offset = end + size, after
        return end, next_offset

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int | None = None) -> TimestampOffset | None:
        """The first record with timestamp >= `timestamp` and offset >= starting_offset, as
        (record timestamp, offset); None if this segment has none (ListOffsets semantics)."""
        starting_offset = self.base_offset if starting_offset is None else starting_offset
        indexed = self.time_index.lookup(timestamp)
        start = self.offset_index.lookup(max(indexed.offset, starting_offset)).position
        for batch in iter_file_batches(self._file.fileno(), start, self._size, source=str(self.log_path)):
            if batch.header.max_timestamp < timestamp or batch.last_offset < starting_offset:
                continue
            for record in batch.records():
                if record.timestamp >= timestamp and record.offset >= starting_offset:
                    return TimestampOffset(record.timestamp, record.offset)
        return None

    def max_timestamp_record(self) -> TimestampOffset | None:
        """ListOffsets MAX_TIMESTAMP within this segment: the first record whose timestamp is the
        segment's largest, as (timestamp, offset); None if it has no timestamps. The batch is the
        first one reaching that maximum (max_timestamp_so_far records it), found from the index
        entry at or below it; its records are decoded to find the exact one (Kafka's
        RecordBatch.offsetOfMaxTimestamp), since the batch's last offset need not be it."""
        best = self._max_ts
        if best.timestamp < 0:
            return None
        start = self.offset_index.lookup(best.offset).position
        for batch in iter_file_batches(self._file.fileno(), start, self._size, source=str(self.log_path)):
            if batch.header.max_timestamp == best.timestamp:
                return next((TimestampOffset(r.timestamp, r.offset) for r in batch.records()
                             if r.timestamp == best.timestamp), None)
        return None

    def read_next_offset(self) -> int:
        """The offset after the last batch (scan from the last index entry), base if empty."""
        if self._next_offset is None:
            start = self.offset_index.entry(self.offset_index.entries - 1).position if self.offset_index.entries else 0
            next_offset = self.base_offset
            for _pos, header in iter_file_headers(self._file.fileno(), start, self._size, source=str(self.log_path)):
                next_offset = header.next_offset
            self._next_offset = next_offset
        return self._next_offset

    @property
    def max_timestamp_so_far(self) -> TimestampOffset:
        return self._max_ts

    def largest_timestamp(self) -> int:
        """Largest batch timestamp, or the file's mtime if there is none (retention.ms uses it)."""
        if self._max_ts.timestamp >= 0:
            return self._max_ts.timestamp
        return os.stat(self.log_path).st_mtime_ns // 1_000_000

    def batch_headers(self, start_position: int = 0) -> Iterable[tuple[int, BatchHeader]]:
        return iter_file_headers(self._file.fileno(), start_position, self._size, source=str(self.log_path))

    def batch_headers_before(self, offset: int, max_bytes: int) -> tuple[list[BatchHeader], int]:
        """The headers of this segment's batches ending below `offset`, from about `max_bytes`
        before it (an index entry: a batch boundary), oldest first, and the bytes they span."""
        found = self.translate_offset(offset)
        end = self._size if found is None else found.position
        entry = self.offset_index.entry_at_or_below_position(end - max_bytes) if end > max_bytes else None
        start = 0 if entry is None else entry.position
        headers = []
        for _, header in self.batch_headers(start):
            if header.last_offset >= offset:
                break
            headers.append(header)
        return headers, end - start

    # -- recovery
    def recover(self, valid: BatchValidity | None = None, *, keep_room: bool = False) -> int:
        """Rebuild both indexes from the .log, checking every batch (size, CRC, offsets), and cut
        the file at the first bad or partial batch, or (`valid` given: the partition's leader
        epochs, cluster mode) at the first batch a fenced leader wrote. Returns the number of
        bytes truncated. `keep_room`: the active segment, whose indexes keep segment.index.bytes
        of room (not trimmed, to be preallocated again right after)."""
        self.offset_index.begin_rebuild()
        self.time_index.begin_rebuild()
        self._max_ts = TimestampOffset(NO_TIMESTAMP, self.base_offset)
        self._first_batch_timestamp = None
        self._bytes_since_last_index_entry = 0
        valid_bytes = 0
        next_offset = self.base_offset
        try:
            for batch in iter_file_batches(self._file.fileno(), 0, self._size, source=str(self.log_path)):
                batch.ensure_valid()
                header = batch.header
                if header.base_offset < next_offset or not self.can_convert_to_relative_offset(header.last_offset):
                    raise CorruptRecordError(
                        f"batch offsets {header.base_offset}..{header.last_offset} do not follow offset "
                        f"{next_offset - 1} in a segment based at {self.base_offset}",
                        source=str(self.log_path), position=batch.position)
                if valid is not None and not valid(header.base_offset, header.partition_leader_epoch,
                                                   header.last_offset):
                    log.warning("%s: batch %d..%d of leader epoch %d was written by a fenced leader: the "
                                "segment ends before it", self.log_path, header.base_offset, header.last_offset,
                                header.partition_leader_epoch)
                    break
                self._index_batch(header, valid_bytes)
                valid_bytes += header.size
                next_offset = header.next_offset
        except CorruptRecordError as exc:
            log.warning("recovery stops at a bad batch: %s", exc)
        truncated = self._size - valid_bytes
        if truncated:
            log.warning("truncating %s from %d to %d bytes (%d invalid bytes)", self.log_path, self._size,
                        valid_bytes, truncated)
            os.ftruncate(self._file.fileno(), valid_bytes)
            self._synced = False
            self._size = valid_bytes
        self._next_offset = next_offset
        self.offset_index.finish_rebuild(keep_room=keep_room)
        self.time_index.maybe_append(self._max_ts.timestamp, self._max_ts.offset, skip_full_check=True)
        self.time_index.finish_rebuild(keep_room=keep_room)
        return truncated

    def sanity_check(self) -> None:
        """Checks Kafka runs on load are skipped for offset/time indexes; this is for tools."""
        self.offset_index.sanity_check()
        self.time_index.sanity_check()

    # -- lifecycle
    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    def on_become_inactive(self) -> None:
        """On roll: final time-index entry for the largest timestamp, then trim both indexes."""
        self._append_final_time_entry()
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def _append_final_time_entry(self) -> None:
        if self.writable and self._max_ts.timestamp >= 0:
            self.time_index.maybe_append(self._max_ts.timestamp, self._max_ts.offset, skip_full_check=True)

    def flush(self, *, indexes: bool = True) -> None:
        """fdatasync the .log (unless nothing was written since the last one) and flush the indexes."""
        if self.writable and not self._file.closed:
            if not self._synced:
                fsync(self._file.fileno(), data_only=True)
                self._synced = True
            for index in (self.offset_index, self.time_index):
                index.flush(sync=indexes)

    def close(self) -> None:
        """Clean close: final time-index entry, trimmed indexes, file closed."""
        if self._file.closed:
            return
        self._append_final_time_entry()
        self.offset_index.close()
        self.time_index.close()
        self._file.close()

    def release(self) -> None:
        """Let go of the segment without touching its files (they were replaced or deleted by a
        maintenance job). The .log file object is not closed here: reads in flight may still
        hold it, and it closes when the last of them drops it."""
        self.offset_index.close_handler()
        self.time_index.close_handler()

    def delete(self) -> None:
        self.release()
        self._file.close()
        for suffix in filenames.SEGMENT_SUFFIXES:
            filenames.segment_file(self.directory, self.base_offset, suffix + self.suffix).unlink(missing_ok=True)


_SCAN_HEAD = 27  # baseOffset, length, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta
_MAGIC_AT = 16
_LAST_DELTA_AT = 23


def _scan_head(head: bytes) -> tuple[int, int, int]:
    """(base offset, size with the log overhead, offset after the batch) from a batch's first bytes.
    A legacy (magic 0/1) wrapper's offset field is its last offset."""
    base = int.from_bytes(head[0:8], "big", signed=True)
    size = int.from_bytes(head[_LENGTH_AT : _LENGTH_AT + 4], "big", signed=True) + LOG_OVERHEAD
    if head[_MAGIC_AT] < 2:
        return base, size, base + 1
    return base, size, base + int.from_bytes(head[_LAST_DELTA_AT:_SCAN_HEAD], "big", signed=True) + 1
