"""A partition's log (Kafka's UnifiedLog/LocalLog for one replica): segments, appends, reads.

One writer (the broker's partition owner) calls append/roll/flush/close/refresh; other threads
may call read/offset_for_timestamp/segments at any time. Readers work on an immutable snapshot
of the segment tuple and of the log end offset, so a concurrent roll or refresh never changes
what a read in progress sees, and the .log file objects a read returned stay open until the
read's result is dropped (a segment retired by refresh does not close its file).
"""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
from bisect import bisect_right
from pathlib import Path
from typing import Callable, Iterator

import crc32c

from . import filenames
from .atomic import atomic_write, fsync_dir
from .batch import (ATTRIBUTES_OFFSET, CURRENT_MAGIC, HEADER, HEADER_SIZE, LOG_OVERHEAD, MIN_LENGTH_FIELD,
                    NO_TIMESTAMP, BatchHeader, set_base_offset, set_log_append_time, set_partition_leader_epoch)
from .checkpoints import (LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, read_partition_offset,
                          write_partition_offset)
from .config import LogConfig
from .errors import (CorruptRecordError, LogClosedError, OffsetOutOfRangeError, RecordBatchTooLargeError,
                     RecordTooLargeError)
from .leader_epochs import EpochHistory
from .loader import SegmentCreator, first_batch, load_log, open_segment, partition_lock, remove_clean_shutdown_marker
from .log_results import AppendResult, ReadResult, SegmentInfo
from .read_constants import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from .segment import BatchSummary, LogSegment, RollParams, now_ms as _now_ms
from .time_index import TimestampOffset

log = logging.getLogger(__name__)

_HEAD = struct.Struct(">qii")  # baseOffset, length, partitionLeaderEpoch: the bytes an append rewrites


class Log:
    def __init__(self, directory: Path, config: LogConfig, topic: str, partition: int, *, now_ms: int | None = None,
                 epochs: EpochHistory | None = None, create_segment: SegmentCreator | None = None):
        """Use Log.open."""
        self.directory = filenames.as_path(directory)
        self.config = config
        self.topic = topic
        self.partition = partition
        # Cluster mode (many brokers on the root): the leader-epoch history bounds what loads, every
        # new segment file is created exclusively (`leader_fence.PartitionFence.create_segment`),
        # and no clean-shutdown marker is written (a fenced leader could write one too).
        self.shared = epochs is not None
        self.epochs = epochs  # the leader keeps it current (it records its own epoch's start)
        self._create_segment = create_segment
        loaded = load_log(self.directory, config, topic=topic, partition=partition, epochs=epochs,
                          create_segment=create_segment)
        # The segments this Log created exclusively: nobody else writes them, so it may append.
        self._own_segments: set[int] = {loaded.created} if loaded.created is not None else set()
        self._roll_before_append = False  # cluster mode: set by take_over until the first append
        self.load_result = loaded
        self._segments: tuple[LogSegment, ...] = tuple(loaded.segments)
        last = self._segments[-1] if self._segments else None
        # (log end offset, the segment it ends in, the byte position it ends at), replaced in one
        # assignment per append: a reader takes all three at once and never returns bytes that
        # were appended after the end offset it read (the segment's size grows first).
        self._tail: tuple[int, LogSegment | None, int] = (loaded.log_end_offset, last, last.size if last else 0)
        self._log_start_offset = loaded.log_start_offset
        self._recovery_point = loaded.recovery_point
        self._checkpointed_recovery_point = loaded.recovery_checkpoint  # what the file says: unchanged, not rewritten
        self._write_lock = threading.Lock()
        self._unflushed_messages = 0
        self._last_flush_ms = _now_ms() if now_ms is None else now_ms
        self._closed = False
        # Called with the new segment's base offset on every roll, after the old segment is
        # flushed and before the new one exists: where the broker takes a producer snapshot.
        self.on_roll: Callable[[int], None] | None = None
        # From here on a crash is not a clean shutdown (Kafka removes the marker after loading).
        # The removal is durable before anything is appended: the directory is fsynced, once for
        # it and a changed checkpoint together (a start after a clean stop rewrites none).
        marker_removed = remove_clean_shutdown_marker(self.directory, loaded.names)
        # The load read the start checkpoint under the partition lock: unchanged, it is not read again.
        start_unchanged = loaded.start_checkpoint == self._log_start_offset
        if self._write_checkpoints(sync_dir=False, start_unchanged=start_unchanged) or marker_removed:
            fsync_dir(self.directory)

    @classmethod
    def open(cls, directory: str | os.PathLike, config: LogConfig | None = None, *, topic: str | None = None,
             partition: int | None = None, now_ms: int | None = None, epochs: EpochHistory | None = None,
             create_segment: SegmentCreator | None = None) -> "Log":
        """Open (creating if needed) the partition directory, repairing it like Kafka's loader.
        topic/partition default to what the directory name `<topic>-<partition>` says. In cluster
        mode pass the partition's leader-epoch history and the fence's exclusive segment creator."""
        directory = filenames.as_path(directory)
        if topic is None or partition is None:
            parsed_topic, parsed_partition = filenames.parse_partition_dir(directory.name)
            topic = parsed_topic if topic is None else topic
            partition = parsed_partition if partition is None else partition
        return cls(directory, config or LogConfig(), topic, partition, now_ms=now_ms, epochs=epochs,
                   create_segment=create_segment)

    # -- offsets
    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def _log_end_offset(self) -> int:
        return self._tail[0]

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._log_end_offset  # a single replica: everything appended is committed

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_in_bytes(self) -> int:
        """Bytes of all segments' .log files (Kafka's Log `Size` metric); the sizes are in memory."""
        return sum(segment.size for segment in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    def segments(self) -> list[SegmentInfo]:
        segments = self._segments
        return [SegmentInfo(s.base_offset, s.read_next_offset(), s.size, s.largest_timestamp(), s.log_path)
                for s in segments]

    # -- appending
    def append(self, batches: bytes | bytearray | memoryview, *, assign_offsets: bool = True,
               now_ms: int | None = None, leader_epoch: int | None = None) -> AppendResult:
        """Append one or more v2 batches, all or nothing. Every batch is checked first (size,
        CRC, dense offsets) and nothing is written if any is bad. With assign_offsets the
        baseOffsets are rewritten from the log end offset (outside the CRC, no re-encoding)."""
        with self._write_lock:
            self._require_open()
            now = _now_ms() if now_ms is None else now_ms
            buf = bytearray(batches)
            fields = self._validate(buf, assign_offsets)
            if self._roll_before_append:  # cluster mode: the first append after a takeover
                self._roll_exclusive(self._segments[-1], self._log_end_offset, now, takeover=True)
            log_append_time = self.config.log_append_time

            def place(next_offset: int) -> tuple[list[BatchSummary], int, int, int]:
                """Assign offsets from `next_offset` (and epoch, append time) in `buf`."""
                summaries: list[BatchSummary] = []
                position = records = 0
                max_timestamp = NO_TIMESTAMP
                for f in fields:  # f: the raw HEADER fields of one batch
                    base = next_offset if assign_offsets else f[0]
                    if assign_offsets:
                        set_base_offset(buf, position, base)
                    if leader_epoch is not None:
                        set_partition_leader_epoch(buf, position, leader_epoch)
                    batch_max_timestamp = now if log_append_time else f[8]
                    if log_append_time:
                        set_log_append_time(buf, position, now)
                    size = f[1] + LOG_OVERHEAD
                    summaries.append(BatchSummary(base, base + f[6], batch_max_timestamp, size))
                    max_timestamp = max(max_timestamp, batch_max_timestamp)
                    records += f[12]
                    next_offset = base + f[6] + 1
                    position += size
                return summaries, next_offset, records, max_timestamp

            summaries, next_offset, records, max_timestamp = place(self._log_end_offset)
            first, last = summaries[0], summaries[-1]
            incoming = RollParams(max_timestamp, last.last_offset, len(buf), now)
            segment = self._segments[-1]
            if segment.should_roll(incoming):
                segment = self._roll(first.base_offset, now)
                if assign_offsets and segment.base_offset != first.base_offset:  # a taken name: a gap
                    summaries, next_offset, records, max_timestamp = place(segment.base_offset)
                    first, last = summaries[0], summaries[-1]
            start = segment.append_summaries(buf, summaries)
            self._tail = (next_offset, segment, segment.size)
            self._maybe_flush(records, now)
            return AppendResult(first.base_offset, last.last_offset, max_timestamp,
                                now if log_append_time else NO_TIMESTAMP, start, segment.base_offset, records,
                                len(buf), self._log_start_offset)

    def append_validated(self, data: bytes, header: BatchHeader, *, leader_epoch: int | None = None,
                         now_ms: int | None = None) -> AppendResult:
        """Append one batch whose size, magic, CRC-32C and record count the caller checked against
        these very bytes (Produce's validate_batch, on the event loop): `append` of it with
        offsets assigned, without checking the CRC a second time or copying the batch (its new
        base offset and leader epoch are written from a 16-byte head, see LogSegment.append_batch).
        The checks that depend on this log's config or state are made here as in `append`."""
        if self.config.log_append_time:  # the batch is rewritten and its CRC recomputed: the general path
            return self.append(data, leader_epoch=leader_epoch, now_ms=now_ms)
        with self._write_lock:
            if self._closed:
                self._require_open()
            now = _now_ms() if now_ms is None else now_ms
            size = len(data)
            if size != header.length + LOG_OVERHEAD or header.magic != CURRENT_MAGIC:
                raise self._corrupt("the batch is not the one its header was read from", 0)
            max_size = self.config.max_message_bytes
            if size > max_size:
                raise RecordTooLargeError(
                    f"batch at position 0 of the append to {self.directory} is {size} bytes, larger "
                    f"than max.message.bytes {max_size}")
            records, delta = header.records_count, header.last_offset_delta
            if records < 1:
                raise self._corrupt("a produced batch must hold at least one record", 0)
            if delta != records - 1:
                raise self._corrupt(f"batch declares {records} records but lastOffsetDelta "
                                    f"{delta}: offsets must be dense", 0)
            if size > self.config.segment_bytes:
                raise RecordBatchTooLargeError(f"append of {size} bytes to {self.directory} is larger than "
                                               f"segment.bytes {self.config.segment_bytes}")
            if self._roll_before_append:  # cluster mode: the first append after a takeover
                self._roll_exclusive(self._segments[-1], self._log_end_offset, now, takeover=True)
            base = self._tail[0]
            max_timestamp = header.max_timestamp
            segment = self._segments[-1]
            if segment.should_roll_at(max_timestamp, base + delta, size, now):
                segment = self._roll(base, now)
                if segment.base_offset != base:  # a taken name (cluster mode): the log has a gap
                    base = segment.base_offset
            if base < segment.base_offset:
                raise CorruptRecordError(f"batch base offset {base} is below the segment's base offset "
                                         f"{segment.base_offset}", source=str(segment.log_path))
            epoch = header.partition_leader_epoch if leader_epoch is None else leader_epoch
            last = base + delta
            start = segment.append_batch(_HEAD.pack(base, header.length, epoch), data, last, max_timestamp)
            self._tail = (last + 1, segment, segment.size)
            self._maybe_flush(records, now)
            return AppendResult(base, last, max_timestamp, NO_TIMESTAMP, start, segment.base_offset, records, size,
                                self._log_start_offset)

    def _validate(self, buf: bytearray, assign_offsets: bool) -> list[tuple]:
        """Every batch's raw header fields (HEADER order), after checking size, magic, CRC-32C and offsets (Kafka's
        LogValidator checks that need no record decoding). A tight loop: this is the hot path."""
        if not buf:
            raise CorruptRecordError("empty append: no record batch", source="append")
        headers = []
        expected = self._log_end_offset
        max_size = self.config.max_message_bytes
        view = memoryview(buf)
        end = len(buf)
        pos = 0
        while pos < end:
            if end - pos < HEADER_SIZE:
                raise self._corrupt(f"truncated batch: {end - pos} trailing bytes", pos)
            fields = HEADER.unpack_from(buf, pos)
            size = fields[1] + LOG_OVERHEAD
            if fields[3] != CURRENT_MAGIC:
                raise self._corrupt(f"unsupported magic {fields[3]}: only v2 batches are appended", pos)
            if fields[1] < MIN_LENGTH_FIELD:
                raise self._corrupt(f"batch length {fields[1]} is below the v2 minimum {MIN_LENGTH_FIELD}", pos)
            if size > max_size:  # checked before the CRC: do not checksum what is refused
                raise RecordTooLargeError(
                    f"batch at position {pos} of the append to {self.directory} is {size} bytes, larger "
                    f"than max.message.bytes {max_size}")
            if pos + size > end:
                raise self._corrupt(f"truncated batch: needs {size} bytes, {end - pos} left", pos)
            crc = crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size])
            if crc != fields[4]:
                raise self._corrupt(f"CRC mismatch: stored {fields[4]:#010x}, computed {crc:#010x}", pos)
            base_offset, last_offset_delta, records_count = fields[0], fields[6], fields[12]
            if assign_offsets:
                if records_count < 1:
                    raise self._corrupt("a produced batch must hold at least one record", pos)
                if last_offset_delta != records_count - 1:
                    raise self._corrupt(f"batch declares {records_count} records but lastOffsetDelta "
                                        f"{last_offset_delta}: offsets must be dense", pos)
            else:
                if base_offset < expected:
                    raise self._corrupt(f"batch base offset {base_offset} is below the next offset "
                                        f"{expected} of {self.directory}", pos)
                expected = base_offset + last_offset_delta + 1
            headers.append(fields)
            pos += size
        # After the per-batch checks, as Kafka's UnifiedLog.append: a batch within
        # max.message.bytes that cannot fit in any segment is RECORD_LIST_TOO_LARGE.
        if end > self.config.segment_bytes:
            raise RecordBatchTooLargeError(f"append of {end} bytes to {self.directory} is larger than "
                                           f"segment.bytes {self.config.segment_bytes}")
        return headers

    def _corrupt(self, reason: str, position: int) -> CorruptRecordError:
        return CorruptRecordError(reason, source=f"append to {self.directory}", position=position)

    def update_config(self, config: LogConfig) -> None:
        """A topic config change (AlterConfigs), effective for the next append: segment.bytes,
        segment.ms, max.message.bytes, message.timestamp.type, flush.* are read per append, and
        the segments get it too because should_roll and indexing read the segment's config.
        Settings fixed when a segment is created (index preallocation, roll jitter) wait for the
        next segment, as in Kafka."""
        with self._write_lock:
            self.config = config
            for segment in self._segments:
                segment.config = config

    def roll(self, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active one is empty)."""
        with self._write_lock:
            self._require_open()
            return self._roll(self._log_end_offset, _now_ms() if now_ms is None else now_ms)

    def take_over(self) -> None:
        """Cluster mode, a new leader: its first append goes to a segment file this Log creates
        exclusively, so never into one a previous (maybe paused, not yet dead) leader may still
        write. The previous leader's active segment is left exactly as it is (no final index
        entry, no trimming). The new file waits for that first append: a leader that writes
        nothing creates nothing, and a partition that changes leaders while idle does not grow."""
        with self._write_lock:
            self._require_open()
            self._roll_before_append = self._segments[-1].base_offset not in self._own_segments

    def _roll(self, base_offset: int, now: int, *, takeover: bool = False) -> LogSegment:
        old = self._segments[-1]
        if old.size == 0 and old.base_offset == base_offset and not takeover:
            return old
        if self._create_segment is not None:
            return self._roll_exclusive(old, base_offset, now, takeover)
        for suffix in filenames.SEGMENT_SUFFIXES:  # an empty leftover would only confuse the loader
            leftover = filenames.segment_file(self.directory, base_offset, suffix)
            if leftover.exists():
                if leftover.stat().st_size and suffix == filenames.LOG_SUFFIX:
                    raise CorruptRecordError(f"cannot roll: {leftover} already exists with data")
                leftover.unlink()
        old.on_become_inactive()
        old.flush()  # Kafka flushes the rolled segment (asynchronously); the recovery point follows
        if self.on_roll is not None:
            self.on_roll(base_offset)
        new = LogSegment(self.directory, base_offset, self.config, created_ms=now)
        self._segments = self._segments + (new,)
        self._recovery_point = max(self._recovery_point, base_offset)
        self._write_checkpoints()
        log.info("rolled %s to a new segment at offset %d", self.directory, base_offset)
        return new

    def _roll_exclusive(self, old: LogSegment, base_offset: int, now: int, takeover: bool) -> LogSegment:
        """Cluster mode's roll: the new .log is created exclusively; if its name is taken (a fenced
        leader's file) the next free base offset is used and the log has a gap there."""
        self._roll_before_append = False
        if not takeover:
            old.on_become_inactive()
        if old.base_offset in self._own_segments:
            old.flush()
        base = self._create_segment(base_offset)
        if self.on_roll is not None:
            self.on_roll(base)
        new = LogSegment(self.directory, base, self.config, created_ms=now)
        self._own_segments.add(base)
        self._segments = self._segments + (new,)
        if base != self._log_end_offset:
            log.warning("%s: segment %d was taken (a fenced leader's): the log continues at %d", self.directory,
                        base_offset, base)
            self._tail = (base, new, 0)
        self._recovery_point = max(self._recovery_point, base)
        self._write_checkpoints()
        log.info("rolled %s to a new segment at offset %d", self.directory, base)
        return new

    # -- durability
    def _maybe_flush(self, records: int, now: int) -> None:
        self._unflushed_messages += records
        if (self._unflushed_messages >= self.config.flush_messages
                or now - self._last_flush_ms >= self.config.flush_ms):
            self._flush(now)

    def flush(self, *, indexes: bool = True) -> None:
        """fsync what was appended. `indexes=False`: the data only, for a cluster leader's
        acknowledgement (every append): the active segment's indexes are rebuilt from the data by
        whoever loads the log next (in cluster mode the loader recovers from the recovery point,
        and the active segment always), and a rolled segment's are fsynced at the roll; their two
        fsyncs per append only made every acknowledgement wait longer."""
        with self._write_lock:
            self._require_open()
            self._flush(_now_ms(), indexes=indexes)

    def _flush(self, now: int, *, indexes: bool = True) -> None:
        for segment in self._segments:
            if segment.read_next_offset() > self._recovery_point or segment is self._segments[-1]:
                segment.flush(indexes=indexes)
        self._recovery_point = self._log_end_offset
        self._unflushed_messages = 0
        self._last_flush_ms = now

    def _write_checkpoints(self, *, sync_dir: bool = True, start_unchanged: bool = False) -> bool:
        """Write the checkpoints whose offsets changed; whether any was written. `sync_dir=False`:
        the caller fsyncs the directory (their renames) itself. `start_unchanged`: the log start
        offset is known to be the one on disk (just loaded from it)."""
        written = False
        if self._recovery_point != self._checkpointed_recovery_point:
            write_partition_offset(self.directory, RECOVERY_POINT_CHECKPOINT, self.topic, self.partition,
                                   self._recovery_point, sync_dir=sync_dir)
            self._checkpointed_recovery_point = self._recovery_point
            written = True
        if start_unchanged:
            return written
        # A maintenance job may have moved the start offset on disk: never write it back down.
        with partition_lock(self.directory):
            on_disk = read_partition_offset(self.directory, LOG_START_OFFSET_CHECKPOINT, self.topic,
                                            self.partition)
            self._log_start_offset = max(self._log_start_offset, on_disk or 0)
            if on_disk != self._log_start_offset:  # (renamed under the lock: jobs write it under it too)
                write_partition_offset(self.directory, LOG_START_OFFSET_CHECKPOINT, self.topic, self.partition,
                                       self._log_start_offset, sync_dir=sync_dir, deferrable=False)
                written = True
        return written

    def close(self, *, mark_clean: bool = True) -> None:
        """Clean shutdown: flush, close segments (final time-index entries, trimmed indexes),
        write the checkpoints, then the clean-shutdown marker. One fsync of the directory makes
        every rename in it durable (the checkpoint's, a producer snapshot written just before).
        `mark_clean=False`: everything but the marker, which `mark_clean_shutdown` writes once
        the broker's every log is closed (Kafka writes its marker after all logs are durable)."""
        with self._write_lock:
            if self._closed:
                return
            self._flush(_now_ms())
            for segment in self._segments:
                segment.close()
            self._recovery_point = self._log_end_offset
            self._write_checkpoints(sync_dir=False)
            self._closed = True
            if mark_clean and not self.shared:
                self._write_clean_shutdown_marker()  # its directory fsync covers the renames above
            else:
                fsync_dir(self.directory)

    def mark_clean_shutdown(self) -> None:
        """The clean-shutdown marker of a log closed with `mark_clean=False` (none in cluster mode:
        a fenced leader could write one too)."""
        with self._write_lock:
            if not self._closed:
                raise RuntimeError(f"{self.directory}: the clean-shutdown marker of a log that is still open")
            if not self.shared:
                self._write_clean_shutdown_marker()

    def _write_clean_shutdown_marker(self) -> None:
        atomic_write(self.directory / filenames.CLEAN_SHUTDOWN_FILE,
                     json.dumps({"version": 0, "brokerEpoch": -1}, separators=(",", ":")).encode())

    def close_handlers(self) -> None:
        """Let go of every file without flushing, trimming or marking a clean shutdown (Kafka's
        closeHandlers: what a crash leaves, minus the process dying)."""
        with self._write_lock:
            for segment in self._segments:
                segment.release()
                segment.file.close()
            self._closed = True

    def _require_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed")

    # -- reading
    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_message: bool = True) -> ReadResult:
        """Whole batches from the batch holding `offset`, up to max_bytes (at least one batch
        with min_one_message), none holding offsets >= max_offset (exclusive bound, e.g. the
        high watermark or last stable offset). OffsetOutOfRangeError outside [start, end]."""
        segments = self._segments
        log_end, tail_segment, tail_position = self._tail
        log_start = self._log_start_offset
        if offset < log_start or offset > log_end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.directory}: log start offset {log_start}, "
                f"log end offset {log_end}")
        bound = log_end if max_offset is None else min(max_offset, log_end)
        empty = ReadResult(None, None, 0, 0, offset, offset, log_end, log_start)
        if offset >= bound:
            return empty
        i = max(bisect_right([s.base_offset for s in segments], offset) - 1, 0)
        for segment in segments[i:]:
            if segment.base_offset >= bound:
                break
            # never past the end this read started from: a concurrent append may be growing the file
            max_position = tail_position if segment is tail_segment else None
            if bound < log_end:  # stop before the batch holding `bound`
                stop = segment.translate_offset(bound)
                max_position = stop.position if stop is not None else max_position
            piece = segment.read(offset, max_bytes, max_position=max_position, min_one_message=min_one_message)
            if piece is not None:
                return ReadResult(segment.file, segment.log_path, piece.position, piece.size, piece.first_offset,
                                  piece.next_offset, log_end, log_start)
        return empty

    def batch_headers_from(self, offset: int) -> Iterator[tuple[LogSegment, int, BatchHeader]]:
        """(segment, position, header) of every batch whose last offset is >= `offset`, oldest
        first: what the broker replays on top of a producer snapshot taken at `offset`."""
        segments = self._segments
        i = max(bisect_right([s.base_offset for s in segments], offset) - 1, 0)
        for segment in segments[i:]:
            start = 0
            if offset > segment.base_offset:
                found = segment.translate_offset(offset)
                if found is None:
                    continue
                start = found.position
            for position, header in segment.batch_headers(start):
                yield segment, position, header

    def batch_headers_before(self, offset: int, max_bytes: int) -> list[BatchHeader]:
        """What the broker reads back below a producer snapshot taken at `offset`: the headers of
        the batches ending below it within about `max_bytes`, oldest first, from the segment
        holding `offset - 1` and the ones before it while bytes are left."""
        runs: list[list[BatchHeader]] = []
        for segment in reversed(self._segments[:bisect_right([s.base_offset for s in self._segments], offset - 1)]):
            if max_bytes <= 0:
                break
            headers, read = segment.batch_headers_before(offset, max_bytes)
            runs.append(headers)
            max_bytes -= read
        return [header for headers in reversed(runs) for header in headers]

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """ListOffsets: the first record with timestamp >= `timestamp` as (timestamp, offset), or
        None; LATEST_TIMESTAMP/EARLIEST_TIMESTAMP/MAX_TIMESTAMP give (-1, LEO), (-1, start) and
        the largest timestamp with the offset of the first record holding it."""
        segments = self._segments
        log_start = self._log_start_offset
        if timestamp == LATEST_TIMESTAMP:
            return TimestampOffset(NO_TIMESTAMP, self._log_end_offset)
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampOffset(NO_TIMESTAMP, log_start)
        if timestamp == MAX_TIMESTAMP:
            # The first segment holding the largest timestamp (max keeps the first of equals), then
            # the exact record in it.
            latest = max(segments, key=lambda s: s.max_timestamp_so_far.timestamp, default=None)
            return latest.max_timestamp_record() if latest is not None else None
        for segment in segments:
            if segment.max_timestamp_so_far.timestamp < timestamp or segment.size == 0:
                continue
            found = segment.find_offset_by_timestamp(timestamp, max(log_start, segment.base_offset))
            if found is not None:
                return found
        return None

    # -- changes made by maintenance jobs
    def refresh(self) -> bool:
        """Pick up segments replaced or deleted by a maintenance job and a new log start offset.
        Returns False (nothing changed, try later) while a job holds the partition lock."""
        with self._write_lock, partition_lock(self.directory, shared=True, blocking=False) as locked:
            self._require_open()
            if not locked:
                return False
            on_disk = _regular_logs(self.directory)
            active = self._segments[-1]
            kept: list[LogSegment] = []
            for segment in self._segments[:-1]:
                if on_disk.get(segment.base_offset) == os.fstat(segment.file.fileno()).st_ino:
                    del on_disk[segment.base_offset]
                    kept.append(segment)
                else:
                    segment.release()  # its file object closes when the last reader drops it
            on_disk.pop(active.base_offset, None)
            for base in sorted(b for b in on_disk if b < active.base_offset):
                if self.epochs is not None and not self.epochs.counts_segment(
                        *first_batch(filenames.log_file(self.directory, base))):
                    continue  # a fenced leader's file, not a maintenance job's
                segment, _truncated = open_segment(self.directory, base, self.config)
                kept.append(segment)
            kept.sort(key=lambda s: s.base_offset)
            self._segments = tuple(kept) + (active,)
            checkpoint = read_partition_offset(self.directory, LOG_START_OFFSET_CHECKPOINT, self.topic,
                                               self.partition) or 0
            self._log_start_offset = max(self._log_start_offset, checkpoint, self._segments[0].base_offset)
            return True

    def advance_log_start_offset(self, offset: int) -> None:
        """DeleteRecords: move the log start offset forward (never past the end) and checkpoint it."""
        with self._write_lock:
            if offset > self._log_end_offset:
                raise OffsetOutOfRangeError(f"cannot move the log start offset of {self.directory} to {offset}, "
                                            f"past the log end offset {self._log_end_offset}")
            if offset > self._log_start_offset:
                self._log_start_offset = offset
                self._write_checkpoints()


def _regular_logs(directory: Path) -> dict[int, int]:
    """base offset -> inode of every regular (not transient) .log file."""
    out = {}
    for entry in os.scandir(directory):
        parsed = filenames.parse_name(entry.name)
        if parsed is not None and not parsed.transient and parsed.kind == filenames.LOG_SUFFIX:
            out[parsed.base_offset] = entry.inode()
    return out
