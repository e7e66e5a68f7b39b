"""Arrow rows -> Kafka record batches v2: the other direction of arrow.py.

The rows have arrow.RECORD_SCHEMA's record columns (offset, timestamp, timestamp_type, key,
value, headers). Two twins encode the records sections, as arrow.py decodes them:

- native: ONE call of the C kernel (`_native/compact.c` encode_batches) encodes the records of
  many batches straight from the Arrow buffers, no per-record Python object;
- reference: batch.encode_record per record, slow and obviously right (the tests hold the native
  twin to it).

The log cleaner rebuilds the batches it keeps part of with them; `batches_from_rows` cuts rows
into whole batches (the archive: a topic table's rows served as record batches).
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .batch import (NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, NO_PARTITION_LEADER_EPOCH, TimestampType,
                    build_batch_from_section, encode_record)
from .compression import Compression

try:
    if os.environ.get("TOPICLAKE_NO_EXTENSIONS"):
        raise ImportError("native extensions disabled by TOPICLAKE_NO_EXTENSIONS")
    from ._native import _compact
except ImportError:
    _compact = None  # type: ignore[assignment]  # None: no native kernel, checked before use

#: A record's bytes besides its key, value and headers' bytes, at most (varints, attributes).
RECORD_OVERHEAD = 21
HEADER_OVERHEAD = 10


def timestamps_ms(records: pa.RecordBatch) -> np.ndarray:
    """The timestamp column as Kafka's milliseconds (a `timestamp` column of any unit, or int64 ms)."""
    column = records.column("timestamp")
    if pa.types.is_timestamp(column.type) and column.type.unit != "ms":
        column = column.cast(pa.timestamp("ms", tz=column.type.tz))
    return column.cast(pa.int64()).to_numpy(zero_copy_only=False)


def encode_sections_native(records: pa.RecordBatch, rows: np.ndarray, starts: np.ndarray,
                           base_offsets: np.ndarray, base_timestamps: np.ndarray) -> list[bytes]:
    """The records section of each batch b (rows[starts[b]:starts[b+1]]), in C."""
    def binary(arr: pa.Array) -> tuple:
        validity, offsets, data = arr.buffers()[:3]
        return validity, offsets, data if data is not None else b"", arr.offset

    headers = records.column("headers")
    entries = headers.values
    columns = (records.num_rows, records.column("offset").to_numpy(), timestamps_ms(records),
               binary(records.column("key")), binary(records.column("value")), (headers.buffers()[1], headers.offset),
               binary(entries.field("key")), binary(entries.field("value")))
    return _compact.encode_batches(columns, rows, starts, base_offsets, base_timestamps)


def encode_sections_reference(records: pa.RecordBatch, rows: np.ndarray, starts: np.ndarray,
                              base_offsets: np.ndarray, base_timestamps: np.ndarray) -> list[bytes]:
    """The twin of `encode_sections_native`, with batch.encode_record."""
    # not the timestamp column: as datetimes it would overflow on timestamps far from the epoch
    taken = records.select(["offset", "key", "value", "headers"]).take(pa.array(rows, pa.int64())).to_pydict()
    timestamps = timestamps_ms(records)[rows]
    out = []
    for b in range(len(base_offsets)):
        out.append(b"".join(
            encode_record(taken["offset"][i] - int(base_offsets[b]), int(timestamps[i]) - int(base_timestamps[b]),
                          taken["key"][i], taken["value"][i],
                          tuple((h["key"], h["value"]) for h in taken["headers"][i]))
            for i in range(starts[b], starts[b + 1])))
    return out


encode_sections = encode_sections_native if _compact is not None else encode_sections_reference


def record_sizes(records: pa.RecordBatch) -> np.ndarray:
    """An upper bound of each row's encoded size in a batch (bytes)."""
    def lengths(column: pa.Array) -> np.ndarray:
        return pc.fill_null(pc.binary_length(column), 0).to_numpy(zero_copy_only=False).astype(np.int64)

    headers = records.column("headers")
    entries = headers.values
    entry_bytes = lengths(entries.field("key")) + lengths(entries.field("value")) + HEADER_OVERHEAD
    list_offsets = headers.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    cumulative = np.concatenate(([0], np.cumsum(entry_bytes)))
    header_bytes = cumulative[list_offsets[1:]] - cumulative[list_offsets[:-1]]
    return lengths(records.column("key")) + lengths(records.column("value")) + header_bytes + RECORD_OVERHEAD


def batch_starts(records: pa.RecordBatch, timestamps: np.ndarray, sizes: np.ndarray, batch_bytes: int) -> np.ndarray:
    """Row indexes where a new batch begins (and the row count last): where the timestamp type
    changes, where a LogAppendTime timestamp changes (the batch's max timestamp is its records'
    timestamp then), and every `batch_bytes` or so of records (a batch may pass it by one row)."""
    n = records.num_rows
    types = records.column("timestamp_type").to_numpy(zero_copy_only=False)
    cut = np.zeros(n, bool)
    if n:
        cut[0] = True
        cut[1:] = (types[1:] != types[:-1]) | ((types[1:] == TimestampType.LOG_APPEND_TIME)
                                               & (timestamps[1:] != timestamps[:-1]))
        ends = np.cumsum(sizes)
        bucket = (ends - sizes) // max(batch_bytes, 1)  # the bucket each row starts in
        cut[1:] |= bucket[1:] != bucket[:-1]
    return np.append(np.flatnonzero(cut), n).astype(np.int64)


def batches_from_rows(records: pa.RecordBatch, *, batch_bytes: int = 1 << 20) -> list[bytes]:
    """Record batches v2 of the rows, in their order, keeping each row's offset (gaps are offset
    deltas), timestamp and timestamp type, key, value and headers; uncompressed, no producer
    (non-transactional), partition leader epoch unknown. Rows must be sorted by offset."""
    if records.num_rows == 0:
        return []
    timestamps = timestamps_ms(records)
    offsets = records.column("offset").to_numpy(zero_copy_only=False)
    starts = batch_starts(records, timestamps, record_sizes(records), batch_bytes)
    firsts, lasts = starts[:-1], starts[1:] - 1
    rows = np.arange(records.num_rows, dtype=np.int64)
    sections = encode_sections(records, rows, starts, offsets[firsts].astype(np.int64),
                               timestamps[firsts].astype(np.int64))
    max_timestamps = np.maximum.reduceat(timestamps, firsts)
    types = records.column("timestamp_type").to_numpy(zero_copy_only=False)
    return [build_batch_from_section(
        section, int(last - first + 1), base_offset=int(offsets[first]), compression=Compression.NONE,
        timestamp_type=TimestampType(int(types[first])), producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH,
        base_sequence=NO_SEQUENCE, is_transactional=False, is_control=False,
        partition_leader_epoch=NO_PARTITION_LEADER_EPOCH, has_delete_horizon=False,
        last_offset_delta=int(offsets[last] - offsets[first]), base_timestamp=int(timestamps[first]),
        max_timestamp=int(max_ts))
        for section, first, last, max_ts in zip(sections, firsts, lasts, max_timestamps)]
