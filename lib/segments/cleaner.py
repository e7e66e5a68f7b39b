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

Cluster mode (`epochs`: the partition's leader-epoch history): a batch a fenced leader wrote is not
part of the log (segments.leader_reads): it feeds neither the transactions nor the producers'
state, and the rewrite drops it, whatever the offset map says.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields
from typing import Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from . import offset_map
from .arrow import decode_record_batches
from .arrow_encode import encode_sections as _encode_sections  # the tests swap in the reference twin here
from .arrow_encode import timestamps_ms as _timestamps
from .batch import (BatchHeader, Record, RecordBatch, TimestampType, build_batch, build_batch_from_section,
                    iter_batches)
from .config import LogConfig
from .errors import CorruptRecordError
from .leader_epochs import EpochHistory
from .leader_reads import valid_only
from .log_summary import InvalidLogStateError, SegmentData, check_sorted
from .offset_map import NO_OFFSET, OffsetMap, batch_windows, build_offset_map
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
    epochs: EpochHistory | None = None  # cluster mode: only valid batches are the log


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


def _header_fields(h: BatchHeader) -> dict:
    """What a rebuilt batch keeps of the original header."""
    # overrideLastOffset: the original span (last_offset_delta) keeps the producer's last sequence
    return dict(base_offset=h.base_offset, compression=h.compression, timestamp_type=h.timestamp_type,
                producer_id=h.producer_id, producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
                is_transactional=h.is_transactional, is_control=h.is_control,
                partition_leader_epoch=h.partition_leader_epoch, last_offset_delta=h.last_offset_delta)


def _rebuild(h: BatchHeader, records: Sequence[Record], delete_horizon: int | None) -> bytes:
    log_append_time = h.timestamp_type == TimestampType.LOG_APPEND_TIME
    return build_batch(
        records, delete_horizon=delete_horizon, **_header_fields(h),
        # empty: writeEmptyHeader keeps maxTimestamp; LogAppendTime: the append time stays
        max_timestamp=h.max_timestamp if (log_append_time or not records) else None)


@dataclass(frozen=True, slots=True)
class _Filtered:
    output: bytes | None
    records_read: int
    records_retained: int
    copied: bool = False
    emptied: bool = False


@dataclass(frozen=True, slots=True)
class _Verdict:
    """The batch-level half of filterTo, decided from the header (and a marker's type) in log
    order, since the transaction state follows the batches."""

    batch: RecordBatch
    retention: BatchRetention
    can_discard: bool
    discard_records: bool

    @property
    def columnar(self) -> bool:
        # data whose records must be judged one by one: the bulk of any log, done columnar
        return not self.batch.is_control and not self.discard_records


def _judge(batch: RecordBatch, rnd: _Round, txn: CleanedTransactionMetadata) -> _Verdict:
    h = batch.header
    if h.is_control:
        can_discard = txn.on_control_batch_read(h, control_type(batch))
        # a discardable marker first gets a delete horizon; it goes once the horizon has passed
        discard_records = can_discard and h.delete_horizon is not None and h.delete_horizon <= rnd.now_ms
    else:
        can_discard = txn.on_batch_read(h)  # aborted data
        discard_records = can_discard
    return _Verdict(batch, _batch_retention(h, discard_records, rnd), can_discard, discard_records)


def _filter_records(v: _Verdict, rnd: _Round) -> _Filtered:
    """Markers and discarded batches (few, small): from `Record` objects."""
    h = v.batch.header
    records = v.batch.records()
    retained = [] if v.discard_records else records
    if retained:
        new_horizon = (any(r.value is None for r in retained) or v.can_discard) and not h.has_delete_horizon
        if not new_horizon:
            return _Filtered(bytes(v.batch.data), len(records), len(retained), copied=True)
        return _Filtered(_rebuild(h, retained, rnd.now_ms + rnd.delete_retention_ms), len(records), len(retained))
    return _kept_nothing(v, len(records))


def _kept_nothing(v: _Verdict, records_read: int) -> _Filtered:
    if v.retention is BatchRetention.RETAIN_EMPTY:
        return _Filtered(_rebuild(v.batch.header, (), None), records_read, 0, emptied=True)
    return _Filtered(None, records_read, 0)


# ---------------------------------------------------------------------------------------------
# Data batches, columnar: a window of batches is decoded at once (arrow.decode_record_batches),
# shouldRetainRecord becomes numpy masks over the whole window, untouched batches are copied byte
# for byte and the kept records of the others are re-encoded natively in one call.


def _keep_mask(records: pa.RecordBatch, batch_of_row: np.ndarray, horizon_open: np.ndarray,
               rnd: _Round) -> tuple[np.ndarray, np.ndarray]:
    """shouldRetainRecord for every row, and which rows are tombstones."""
    offsets = records.column("offset").to_numpy()
    keys = records.column("key")
    has_key = keys.is_valid().to_numpy(zero_copy_only=False)
    tombstone = records.column("value").is_null().to_numpy(zero_copy_only=False)
    beyond = offsets > rnd.offset_map.latest_offset  # nothing newer is known above what the map saw
    judged = has_key & ~beyond  # keyless records go; the rest need the map
    latest = np.full(len(offsets), NO_OFFSET, np.int64)
    if judged.any():
        latest[judged] = rnd.offset_map.lookup(offset_map.digest_words(keys.filter(pa.array(judged))))
    # a tombstone stays until its batch's delete horizon (set by an earlier cleaning) passes
    keep = beyond | (judged & (offsets >= latest) & (~tombstone | horizon_open[batch_of_row]))
    return keep, tombstone


def _filter_columnar(verdicts: Sequence[_Verdict], rnd: _Round) -> list[_Filtered]:
    """shouldRetainRecord and the batch rewrite for data batches, one result per verdict."""
    table = decode_record_batches([v.batch for v in verdicts]).combine_chunks()
    records = table.to_batches()[0] if table.num_rows else None
    counts = np.array([v.batch.header.records_count for v in verdicts], np.int64)
    starts = np.concatenate(([0], np.cumsum(counts)))
    if records is None:
        return [_kept_nothing(v, 0) for v in verdicts]
    batch_of_row = np.repeat(np.arange(len(verdicts)), counts)
    horizon_open = np.array([v.batch.header.delete_horizon is None or rnd.now_ms < v.batch.header.delete_horizon
                             for v in verdicts], bool)
    keep, tombstone = _keep_mask(records, batch_of_row, horizon_open, rnd)
    kept_before = np.concatenate(([0], np.cumsum(keep)))
    tombstones_before = np.concatenate(([0], np.cumsum(keep & tombstone)))
    timestamps = _timestamps(records)

    out: list[_Filtered | None] = [None] * len(verdicts)
    rebuild: list[tuple[int, int | None]] = []  # (verdict index, delete horizon)
    for i, v in enumerate(verdicts):
        h = v.batch.header
        read = int(counts[i])
        kept = int(kept_before[starts[i + 1]] - kept_before[starts[i]])
        if not kept:
            out[i] = _kept_nothing(v, read)
            continue
        new_horizon = bool(tombstones_before[starts[i + 1]] - tombstones_before[starts[i]]) and not h.has_delete_horizon
        if kept == read and not new_horizon:
            out[i] = _Filtered(bytes(v.batch.data), read, kept, copied=True)
        else:
            rebuild.append((i, rnd.now_ms + rnd.delete_retention_ms if new_horizon else h.delete_horizon))
    if rebuild:
        picked = [np.flatnonzero(keep[starts[i]:starts[i + 1]]) + starts[i] for i, _ in rebuild]
        rows = np.concatenate(picked)
        first = np.concatenate(([0], np.cumsum([len(p) for p in picked])))
        # build_batch's base timestamp: the horizon if any, else the first kept record's
        base_timestamps = np.array([timestamps[p[0]] if horizon is None else horizon
                                    for p, (_, horizon) in zip(picked, rebuild)], np.int64)
        base_offsets = np.array([verdicts[i].batch.header.base_offset for i, _ in rebuild], np.int64)
        sections = _encode_sections(records, rows, first, base_offsets, base_timestamps)
        max_timestamps = np.maximum.reduceat(timestamps[rows], first[:-1])
        for (i, horizon), p, section, base_ts, max_ts in zip(rebuild, picked, sections, base_timestamps,
                                                              max_timestamps):
            h = verdicts[i].batch.header
            log_append_time = h.timestamp_type == TimestampType.LOG_APPEND_TIME
            data = build_batch_from_section(
                section, len(p), has_delete_horizon=horizon is not None, base_timestamp=int(base_ts),
                # LogAppendTime: the append time stays
                max_timestamp=h.max_timestamp if log_append_time else int(max_ts), **_header_fields(h))
            out[i] = _Filtered(data, int(counts[i]), len(p))
    return out


def _filter_window(verdicts: Sequence[_Verdict], rnd: _Round) -> list[_Filtered]:
    columnar = [v for v in verdicts if v.columnar]
    judged = iter(_filter_columnar(columnar, rnd) if columnar else ())
    return [next(judged) if v.columnar else _filter_records(v, rnd) for v in verdicts]


# ---------------------------------------------------------------------------------------------
# Groups and rounds

def _source(topic: str, partition: int, segment: SegmentData) -> str:
    return f"{topic}-{partition} segment {segment.base_offset}"


def _batches(segments: Sequence[SegmentData], topic: str, partition: int,
             epochs: EpochHistory | None = None) -> Iterator[RecordBatch]:
    for segment in segments:
        yield from valid_only(iter_batches(segment.data, source=_source(topic, partition, segment)), epochs)


def _segment_windows(segment: SegmentData, rnd: _Round, txn: CleanedTransactionMetadata,
                     source: str) -> Iterator[list[_Verdict]]:
    """The segment's batches judged in log order, in windows (offset_map.batch_windows); a DELETE
    batch is judged without looking at its records."""
    for window in batch_windows(valid_only(iter_batches(segment.data, source=source), rnd.epochs)):
        yield [_judge(batch, rnd, txn) for batch in window]


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
            for window in _segment_windows(segment, rnd, txn, source):
                kept = [v for v in window if v.retention is not BatchRetention.DELETE]
                results = iter(_filter_window(kept, rnd))
                for v in window:
                    batch = v.batch
                    result = next(results) if v.retention is not BatchRetention.DELETE else _Filtered(None, 0, 0)
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
                partition: int = -1, epochs: EpochHistory | None = None) -> CleanResult:
    """One cleaning round's rewrite for one partition (the Spark rewrite task).

    `segments`: the partition's segments from the first one, oldest first. Segments with base
    offset < offset_map.end_offset are rewritten; pass the later ones too (up to the active
    segment) unless you give `aborted_txns` and `last_records` computed over the whole log,
    since transactions and producer state run up to the log end.
    """
    check_sorted(topic, partition, segments)
    if aborted_txns is None:
        aborted_txns = collect_aborted_txns(_batches(segments, topic, partition, epochs))
    if last_records is None:
        last_records = producer_last_records(_batches(segments, topic, partition, epochs))
    to_clean = [s for s in segments if s.base_offset < offset_map.end_offset]
    rnd = _Round(offset_map, last_records, now_ms, config.delete_retention_ms, first_uncleanable_offset, epochs)
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
