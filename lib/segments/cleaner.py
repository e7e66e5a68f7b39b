"""Kafka's log cleaner rewrite (Cleaner.doClean / cleanSegments + MemoryRecords.filterTo), pure.

Input: the partition's segment bytes, an OffsetMap (built here or by Spark), the aborted
transactions and the producers' last records (both derivable from the log, see txn_metadata),
the topic config, `now_ms` and the round's upper bound (LogToClean.first_uncleanable_offset).
Output: one byte string per group of segments (to be written as `<first base>.log.cleaned` and
swapped in by `maintenance.replace_segments`) and the new cleaner checkpoint. Offsets never
change. The rules, batch by batch:

- checkBatchRetention: a batch is RETAIN_EMPTY when it is an active producer's last data batch
  (or, for a producer with no data offset, its marker of the current epoch), or when it ends the
  round (nextOffset == upper bound); DELETE when all its records may go (aborted data, or a
  discardable marker whose delete horizon has passed); DELETE_EMPTY otherwise.
- shouldRetainRecord: above map.latest_offset everything stays; keyless records go; a record
  stays iff offset >= map[key] and (it has a value, or its batch's delete horizon is unset or
  still ahead). Control records stay unless the whole batch is discarded.
- A batch keeping every record and needing no new delete horizon is copied byte for byte.
  Otherwise it is rebuilt (same base offset, codec, producer fields, flags, leader epoch and
  lastOffsetDelta); a retained tombstone, or a discardable marker, without a horizon gets
  horizon = now + delete.retention.ms (bit 6, in baseTimestamp): tombstones go in two passes.
  A retained batch with no record left becomes writeEmptyHeader (no codec, count 0,
  baseTimestamp -1, the original maxTimestamp).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields
from typing import Iterator, Mapping, Sequence

from .batch import BatchHeader, Record, RecordBatch, TimestampType, build_batch, iter_batches
from .config import LogConfig
from .errors import CorruptRecordError
from .log_summary import InvalidLogStateError, SegmentData, check_sorted
from .offset_map import OffsetMap, build_offset_map
from .txn_metadata import (AbortedTxn, CleanedTransactionMetadata, LastRecord, collect_aborted_txns, control_type,
                           producer_last_records)

_INT32_MAX = 2**31 - 1


class BatchRetention(enum.Enum):
    DELETE = "delete"  # drop without looking at the records
    RETAIN_EMPTY = "retain_empty"  # keep, as an empty batch if no record is left
    DELETE_EMPTY = "delete_empty"  # keep only if some record is left


@dataclass(frozen=True, slots=True)
class CleanerStats:
    batches_read: int = 0
    records_read: int = 0
    bytes_read: int = 0
    batches_copied: int = 0  # retained byte for byte
    batches_rebuilt: int = 0
    batches_emptied: int = 0  # retained as writeEmptyHeader
    records_retained: int = 0
    bytes_written: int = 0

    def __add__(self, other: "CleanerStats") -> "CleanerStats":
        return CleanerStats(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


@dataclass(frozen=True, slots=True)
class CleanedGroup:
    """One output segment: write `data` as `<base_offset>.log.cleaned` and swap it in for
    `replaces`; give it `last_modified_ms` (the last replaced segment's mtime, as Kafka does) and
    a .txnindex of `aborted_txns` if the log keeps transaction indexes."""

    base_offset: int
    replaces: tuple[int, ...]
    data: bytes
    next_offset: int  # after the last batch written (base_offset when nothing is left)
    aborted_txns: tuple[AbortedTxn, ...]
    last_modified_ms: int | None
    stats: CleanerStats


@dataclass(frozen=True, slots=True)
class CleanResult:
    topic: str
    partition: int
    groups: tuple[CleanedGroup, ...]
    checkpoint: int  # the new cleaner checkpoint: offset_map.latest_offset + 1
    offset_map_entries: int

    @property
    def stats(self) -> CleanerStats:
        return sum((g.stats for g in self.groups), CleanerStats())


@dataclass(frozen=True, slots=True)
class _Round:
    """What every batch of one cleaning round is judged against."""

    offset_map: OffsetMap
    last_records: Mapping[int, LastRecord]
    now_ms: int
    delete_retention_ms: int
    upper_bound: int  # upperBoundOffsetOfCleaningRound


# ---------------------------------------------------------------------------------------------
# Grouping (Cleaner.groupSegmentsBySize)

def group_segments_by_size(segments: Sequence[SegmentData], *, max_size: int, max_index_size: int,
                           first_uncleanable_offset: int) -> list[tuple[SegmentData, ...]]:
    """Consecutive runs whose log size <= max_size (segment.bytes) and index sizes <= max_index_size
    (segment.index.bytes), and whose offsets fit an int32 relative to the group's base. A segment's
    last offset is bounded by the next segment's base - 1 (or first_uncleanable_offset - 1 for the
    last one), so no batch needs reading; an empty segment never breaks a group on offsets."""
    groups: list[tuple[SegmentData, ...]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_size, index_size, time_size = (segments[i].size, segments[i].offset_index_bytes,
                                           segments[i].time_index_bytes)
        i += 1
        while i < len(segments):
            nxt = segments[i]
            bound = segments[i + 1].base_offset - 1 if i + 1 < len(segments) else first_uncleanable_offset - 1
            fits = (log_size + nxt.size <= max_size
                    and index_size + nxt.offset_index_bytes <= max_index_size
                    and time_size + nxt.time_index_bytes <= max_index_size
                    and (nxt.size == 0 or bound - group[0].base_offset <= _INT32_MAX))
            if not fits:
                break
            group.append(nxt)
            log_size += nxt.size
            index_size += nxt.offset_index_bytes
            time_size += nxt.time_index_bytes
            i += 1
        groups.append(tuple(group))
    return groups


# ---------------------------------------------------------------------------------------------
# One batch (the log cleaner's RecordFilter inside MemoryRecords.filterTo)

def _is_producers_last(h: BatchHeader, last_records: Mapping[int, LastRecord]) -> bool:
    # Kept so the producer's last sequence / epoch survive (idempotence and fencing).
    last = last_records.get(h.producer_id)
    if last is None:
        return False
    if last.last_data_offset is not None:
        return h.last_offset == last.last_data_offset
    return h.is_control and h.producer_epoch == last.producer_epoch


def _batch_retention(h: BatchHeader, discard_records: bool, rnd: _Round) -> BatchRetention:
    if h.has_producer_id and _is_producers_last(h, rnd.last_records):
        return BatchRetention.RETAIN_EMPTY
    if h.next_offset == rnd.upper_bound:
        # the round's last batch stays, even empty, so the last offset is not lost
        return BatchRetention.RETAIN_EMPTY
    return BatchRetention.DELETE if discard_records else BatchRetention.DELETE_EMPTY


def _retain_record(record: Record, h: BatchHeader, rnd: _Round) -> bool:
    if record.offset > rnd.offset_map.latest_offset:
        return True  # beyond what the map saw: nothing newer is known
    if record.key is None:
        return False  # a keyless record in a compacted topic is invalid and dropped
    if record.offset < rnd.offset_map.get(record.key):
        return False  # a later record of this key exists
    if record.value is not None:
        return True
    # A tombstone stays until its batch's delete horizon (set by an earlier cleaning) passes.
    horizon = h.delete_horizon
    return horizon is None or rnd.now_ms < horizon


def _rebuild(h: BatchHeader, records: Sequence[Record], delete_horizon: int | None) -> bytes:
    log_append_time = h.timestamp_type == TimestampType.LOG_APPEND_TIME
    return build_batch(
        records, base_offset=h.base_offset, compression=h.compression, timestamp_type=h.timestamp_type,
        producer_id=h.producer_id, producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
        is_transactional=h.is_transactional, is_control=h.is_control,
        partition_leader_epoch=h.partition_leader_epoch, delete_horizon=delete_horizon,
        # overrideLastOffset: the original span keeps the producer's last sequence number
        last_offset_delta=h.last_offset_delta,
        # empty: writeEmptyHeader keeps maxTimestamp; LogAppendTime: the append time stays
        max_timestamp=h.max_timestamp if (log_append_time or not records) else None)


@dataclass(frozen=True, slots=True)
class _Filtered:
    output: bytes | None
    records_read: int
    records_retained: int
    copied: bool = False
    emptied: bool = False


def _filter_batch(batch: RecordBatch, rnd: _Round, txn: CleanedTransactionMetadata) -> _Filtered:
    h = batch.header
    if h.is_control:
        can_discard = txn.on_control_batch_read(h, control_type(batch))
        # a discardable marker first gets a delete horizon; it goes once the horizon has passed
        discard_records = can_discard and h.delete_horizon is not None and h.delete_horizon <= rnd.now_ms
    else:
        can_discard = txn.on_batch_read(h)  # aborted data
        discard_records = can_discard
    retention = _batch_retention(h, discard_records, rnd)
    if retention is BatchRetention.DELETE:
        return _Filtered(None, 0, 0)
    records = batch.records()
    if discard_records:
        retained = []
    elif h.is_control:
        retained = records
    else:
        retained = [r for r in records if _retain_record(r, h, rnd)]
    if retained:
        marker_for_empty_txn = can_discard and h.is_control
        has_tombstone = any(r.value is None for r in retained)
        new_horizon = (has_tombstone or marker_for_empty_txn) and not h.has_delete_horizon
        if len(retained) == len(records) and not new_horizon:
            return _Filtered(bytes(batch.data), len(records), len(retained), copied=True)
        horizon = rnd.now_ms + rnd.delete_retention_ms if new_horizon else h.delete_horizon
        return _Filtered(_rebuild(h, retained, horizon), len(records), len(retained))
    if retention is BatchRetention.RETAIN_EMPTY:
        return _Filtered(_rebuild(h, (), None), len(records), 0, emptied=True)
    return _Filtered(None, len(records), 0)


# ---------------------------------------------------------------------------------------------
# Groups and rounds

def _source(topic: str, partition: int, segment: SegmentData) -> str:
    return f"{topic}-{partition} segment {segment.base_offset}"


def _batches(segments: Sequence[SegmentData], topic: str, partition: int) -> Iterator[RecordBatch]:
    for segment in segments:
        yield from iter_batches(segment.data, source=_source(topic, partition, segment))


def clean_group(group: Sequence[SegmentData], rnd: _Round, txn: CleanedTransactionMetadata, *,
                topic: str = "", partition: int = -1) -> CleanedGroup:
    """Clean one group of segments into one output segment (Cleaner.cleanSegments + cleanInto)."""
    base = group[0].base_offset
    next_offset = base
    out = bytearray()
    counts = dict(batches_read=0, records_read=0, bytes_read=0, batches_copied=0, batches_rebuilt=0,
                  batches_emptied=0, records_retained=0)
    for segment in group:
        source = _source(topic, partition, segment)
        try:
            for batch in iter_batches(segment.data, source=source):
                result = _filter_batch(batch, rnd, txn)
                counts["batches_read"] += 1
                counts["bytes_read"] += batch.size
                counts["records_read"] += result.records_read
                counts["records_retained"] += result.records_retained
                if result.output is None:
                    continue
                if batch.last_offset - base > _INT32_MAX:
                    raise InvalidLogStateError(
                        f"{topic}-{partition}: offset {batch.last_offset} does not fit a segment based at {base} "
                        f"(relative offset above 2^31-1); split the segment first")
                counts["batches_copied" if result.copied else
                       "batches_emptied" if result.emptied else "batches_rebuilt"] += 1
                out += result.output
                next_offset = batch.next_offset
        except CorruptRecordError as exc:
            raise exc.at(source=source) from None
    stats = CleanerStats(**counts, bytes_written=len(out))
    return CleanedGroup(base_offset=base, replaces=tuple(s.base_offset for s in group), data=bytes(out),
                        next_offset=next_offset,
                        aborted_txns=txn.take_retained_aborted(), last_modified_ms=group[-1].last_modified_ms,
                        stats=stats)


def rewrite_log(segments: Sequence[SegmentData], offset_map: OffsetMap, *, first_uncleanable_offset: int,
                config: LogConfig, now_ms: int, aborted_txns: Sequence[AbortedTxn] | None = None,
                last_records: Mapping[int, LastRecord] | None = None, topic: str = "",
                partition: int = -1) -> CleanResult:
    """One cleaning round's rewrite for one partition (the Spark rewrite task).

    `segments`: the partition's segments from the first one, oldest first. Segments with base
    offset < offset_map.end_offset are rewritten; pass the later ones too (up to the active
    segment) unless you give `aborted_txns` and `last_records` computed over the whole log,
    since transactions and producer state run up to the log end.
    """
    check_sorted(topic, partition, segments)
    if aborted_txns is None:
        aborted_txns = collect_aborted_txns(_batches(segments, topic, partition))
    if last_records is None:
        last_records = producer_last_records(_batches(segments, topic, partition))
    to_clean = [s for s in segments if s.base_offset < offset_map.end_offset]
    rnd = _Round(offset_map, last_records, now_ms, config.delete_retention_ms, first_uncleanable_offset)
    txn = CleanedTransactionMetadata(aborted_txns)
    groups = group_segments_by_size(to_clean, max_size=config.segment_bytes, max_index_size=config.segment_index_bytes,
                                    first_uncleanable_offset=first_uncleanable_offset)
    cleaned = tuple(clean_group(g, rnd, txn, topic=topic, partition=partition) for g in groups)
    return CleanResult(topic, partition, cleaned, offset_map.end_offset, len(offset_map))


def clean_log(segments: Sequence[SegmentData], *, first_dirty_offset: int, first_uncleanable_offset: int,
              config: LogConfig, now_ms: int, last_records: Mapping[int, LastRecord] | None = None,
              max_map_entries: int | None = None, topic: str = "", partition: int = -1) -> CleanResult:
    """A whole round in one process (Cleaner.doClean): offset map over the dirty range, then the
    rewrite. Offsets come from `cleanable.log_to_clean(...)`; `segments` is the whole log."""
    check_sorted(topic, partition, segments)
    if first_dirty_offset >= first_uncleanable_offset:
        return CleanResult(topic, partition, (), first_dirty_offset, 0)  # nothing dirty: nothing to do
    aborted = collect_aborted_txns(_batches(segments, topic, partition))
    offset_map = build_offset_map(segments, start=first_dirty_offset, end=first_uncleanable_offset,
                                  aborted=aborted, max_entries=max_map_entries, topic=topic, partition=partition)
    return rewrite_log(segments, offset_map, first_uncleanable_offset=first_uncleanable_offset, config=config,
                       now_ms=now_ms, aborted_txns=aborted, last_records=last_records, topic=topic,
                       partition=partition)
