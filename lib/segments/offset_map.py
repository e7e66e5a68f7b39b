"""The cleaner's key -> latest offset map (Kafka's SkimpyOffsetMap), by MD5 digest of the key.

Kafka hashes every key with MD5 (CleanerConfig.HASH_ALGORITHM) and keeps only the 16-byte digest
and the offset; two keys with the same digest are treated as one, exactly as here. The map is
built over the dirty range [first dirty offset, first uncleanable offset), skipping control batches
and batches of aborted transactions. `latest_offset` is the last offset the map covers; the
cleaner keeps every record above it, and `latest_offset + 1` becomes the new cleaner checkpoint.

Two ways to get a map:
- `build_offset_map(segments, ...)`: single process, Kafka's buildOffsetMap including its
  per-segment fast-forward of latest_offset and the optional size bound (map "full").
- from outside (Spark): executors call `offset_map_entries(...)` on their share of the dirty
  batches, the entries are reduced to the max offset per digest, and the rewrite task gets
  `OffsetMap.from_arrays(digests, offsets, latest_offset=first_uncleanable_offset - 1)`
  (an unbounded map never fills, so it always covers the whole dirty range).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import pyarrow as pa

from .batch import RecordBatch, iter_batches
from .errors import CorruptRecordError
from .log_summary import SegmentData, check_sorted
from .txn_metadata import AbortedIndex, AbortedTxn, as_aborted_index

DIGEST_SIZE = 16  # MD5
DIGEST_TYPE = pa.binary(DIGEST_SIZE)
ENTRIES_SCHEMA = pa.schema([pa.field("digest", DIGEST_TYPE, nullable=False),
                            pa.field("offset", pa.int64(), nullable=False)])
# Kafka's log.cleaner.io.buffer.load.factor: the map is "full" at 90% of its slots.
DEFAULT_LOAD_FACTOR = 0.9
NO_OFFSET = -1


def key_digest(key: bytes | bytearray | memoryview) -> bytes:
    return hashlib.md5(key).digest()


def key_digests(keys: pa.Array | pa.ChunkedArray) -> pa.Array:
    """MD5 digests of a binary column (null keys stay null), for Spark executors."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    return pa.array([None if k is None else hashlib.md5(k).digest() for k in keys.to_pylist()], type=DIGEST_TYPE)


@dataclass(frozen=True, slots=True)
class OffsetMap:
    """Immutable digest -> latest offset map plus the last offset it covers."""

    entries: Mapping[bytes, int] = field(repr=False)
    latest_offset: int = NO_OFFSET

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key: bytes | bytearray | memoryview) -> int:
        """The latest offset of `key` in the dirty range, or -1 (SkimpyOffsetMap.get)."""
        return self.entries.get(key_digest(key), NO_OFFSET)

    def get_digest(self, digest: bytes) -> int:
        return self.entries.get(digest, NO_OFFSET)

    @property
    def end_offset(self) -> int:
        """The first offset not covered: the new cleaner checkpoint after this round."""
        return self.latest_offset + 1

    @classmethod
    def from_arrays(cls, digests, offsets, *, latest_offset: int) -> "OffsetMap":
        """From columns (pyarrow fixed_size_binary(16) / binary, numpy (n, 16) uint8, or a list of
        16-byte values) and int64 offsets. Duplicate digests keep the largest offset."""
        if isinstance(digests, (pa.Array, pa.ChunkedArray)):
            digest_list = digests.to_pylist()
        elif hasattr(digests, "ndim") and getattr(digests, "ndim") == 2:
            digest_list = [row.tobytes() for row in digests]
        else:
            digest_list = [bytes(d) for d in digests]
        offset_list = offsets.to_pylist() if isinstance(offsets, (pa.Array, pa.ChunkedArray)) else [int(o) for o in offsets]
        if len(digest_list) != len(offset_list):
            raise ValueError(f"{len(digest_list)} digests but {len(offset_list)} offsets")
        entries: dict[bytes, int] = {}
        for digest, offset in zip(digest_list, offset_list):
            if digest is None or len(digest) != DIGEST_SIZE:
                raise ValueError(f"offset map digest must be {DIGEST_SIZE} bytes, got {digest!r}")
            if offset > entries.get(digest, NO_OFFSET):
                entries[digest] = offset
        return cls(entries, latest_offset)

    @classmethod
    def from_table(cls, table: pa.Table, *, latest_offset: int) -> "OffsetMap":
        """From a table with ENTRIES_SCHEMA columns (digest, offset)."""
        return cls.from_arrays(table.column("digest"), table.column("offset"), latest_offset=latest_offset)

    def to_table(self) -> pa.Table:
        return pa.table({"digest": pa.array(list(self.entries), type=DIGEST_TYPE),
                         "offset": pa.array(list(self.entries.values()), type=pa.int64())}, schema=ENTRIES_SCHEMA)


def _keyed_records(batch: RecordBatch, start: int) -> Iterable[tuple[bytes, int]]:
    for record in batch.records():
        if record.key is not None and record.offset >= start:
            yield key_digest(record.key), record.offset


def _mappable(batch: RecordBatch, aborted: AbortedIndex) -> bool:
    # Control batches and aborted transactional data never enter the map (Cleaner.buildOffsetMapForSegment).
    return not batch.is_control and not aborted.is_aborted(batch.header)


def offset_map_entries(batches: Iterable[RecordBatch], *, start: int, end: int,
                       aborted: AbortedIndex | Iterable[AbortedTxn]) -> pa.Table:
    """(digest, offset) of every keyed record in [start, end) of committed / non-transactional data
    batches, in log order. For one Spark task's share of the dirty range; reduce with max(offset)."""
    index = as_aborted_index(aborted)
    digests: list[bytes] = []
    offsets: list[int] = []
    for batch in batches:
        if batch.base_offset >= end:
            break
        if batch.last_offset < start or not _mappable(batch, index):
            continue
        for digest, offset in _keyed_records(batch, start):
            if offset < end:
                digests.append(digest)
                offsets.append(offset)
    return pa.table({"digest": pa.array(digests, type=DIGEST_TYPE), "offset": pa.array(offsets, type=pa.int64())},
                    schema=ENTRIES_SCHEMA)


def build_offset_map(segments: Sequence[SegmentData], *, start: int, end: int,
                     aborted: AbortedIndex | Iterable[AbortedTxn], max_entries: int | None = None,
                     topic: str = "", partition: int = -1) -> OffsetMap:
    """Kafka's buildOffsetMap over the segments that hold [start, end) (`segments` may be the
    whole log; the ones outside the range are skipped as Kafka's logSegments(start, end) does).

    latest_offset follows Kafka: every batch ending at or after `start` moves it to its last
    offset, and a fully read segment fast-forwards it to the next segment's base - 1 (offset gaps
    left by earlier cleanings). With `max_entries` (Kafka: slots * load factor) the map stops when
    full, part-way through a segment; the round then cleans only up to latest_offset."""
    check_sorted(topic, partition, segments)
    index = as_aborted_index(aborted)
    entries: dict[bytes, int] = {}
    latest = NO_OFFSET
    dirty = _dirty_segments(segments, start, end)
    for i, segment in enumerate(dirty):
        next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
        source = f"{topic}-{partition} segment {segment.base_offset}"
        try:
            for batch in iter_batches(segment.data, source=source):
                if _mappable(batch, index):
                    for digest, offset in _keyed_records(batch, start):
                        if max_entries is not None and len(entries) >= max_entries:
                            # SkimpyOffsetMap refuses any put once full, even of a known key
                            return OffsetMap(entries, latest)
                        entries[digest] = offset
                        latest = offset
                if batch.last_offset >= start:
                    latest = batch.last_offset
        except CorruptRecordError as exc:
            raise exc.at(source=source) from None
        latest = next_start - 1
    return OffsetMap(entries, latest)


def _dirty_segments(segments: Sequence[SegmentData], start: int, end: int) -> list[SegmentData]:
    """logSegments(start, end): the segment containing `start`, up to those with base < end."""
    if start >= end:
        return []
    first = 0
    for i, s in enumerate(segments):
        if s.base_offset <= start:
            first = i
    return [s for s in segments[first:] if s.base_offset < end]
