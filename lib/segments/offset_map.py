"""The cleaner's key -> latest offset map (Kafka's SkimpyOffsetMap), by MD5 digest of the key.

Kafka hashes every key with MD5 (CleanerConfig.HASH_ALGORITHM) and keeps only the 16-byte digest
and the offset; two keys with the same digest are treated as one, exactly as here. The map is
built over the dirty range [first dirty offset, first uncleanable offset), skipping control batches
and batches of aborted transactions. `latest_offset` is the last offset the map covers; the
cleaner keeps every record above it, and `latest_offset + 1` becomes the new cleaner checkpoint.

Columnar throughout (millions of keys flow through here): keys come out of the native decoder as
an Arrow column, `digest_words` hashes the whole column in C (`_native/compact.c`; hashlib.md5 is
the twin used without the extension), and a digest is two uint64 words (its bytes big-endian, so
word order is byte order). The map is three numpy columns sorted by digest; building keeps the
max offset per digest (lexsort), lookups are `searchsorted`. No Python object per key.

Two ways to get a map:
- `build_offset_map(segments, ...)`: single process, Kafka's buildOffsetMap including its
  per-segment fast-forward of latest_offset and the optional size bound (map "full").
- from outside (Spark): each executor task calls `task_offset_map(...)` on its share of the dirty
  batches (already reduced to the max offset per digest), and the driver merges the tasks' maps
  with `OffsetMap.merge(maps, latest_offset=first_uncleanable_offset - 1)` (an unbounded map
  never fills, so it always covers the whole dirty range).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .arrow import decode_record_batches
from .batch import RecordBatch, iter_batches
from .errors import CorruptRecordError
from .leader_epochs import EpochHistory
from .leader_reads import valid_only
from .log_summary import SegmentData, check_sorted
from .txn_metadata import AbortedIndex, AbortedTxn, as_aborted_index

try:
    if os.environ.get("TOPICLAKE_NO_EXTENSIONS"):
        raise ImportError("native extensions disabled by TOPICLAKE_NO_EXTENSIONS")
    from ._native import _compact
except ImportError:
    _compact = None  # type: ignore[assignment]  # None: no native kernel, checked before use

HAS_NATIVE = _compact is not None
DIGEST_SIZE = 16  # MD5
DIGEST_TYPE = pa.binary(DIGEST_SIZE)
ENTRIES_SCHEMA = pa.schema([pa.field("digest", DIGEST_TYPE, nullable=False),
                            pa.field("offset", pa.int64(), nullable=False)])
# Kafka's log.cleaner.io.buffer.load.factor: the map is "full" at 90% of its slots.
DEFAULT_LOAD_FACTOR = 0.9
NO_OFFSET = -1
# Batch bytes decoded at a time while building a map: bounds the decoded keys held in memory.
WINDOW_BYTES = 16 << 20
_WORDS = np.dtype(">u8")  # a digest's bytes as two big-endian words


def key_digest(key: bytes | bytearray | memoryview) -> bytes:
    return hashlib.md5(key, usedforsecurity=False).digest()


# ------------------------------------------------------------------------------------ digests

def to_numpy(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A column as numpy without pandas (ChunkedArray.to_numpy imports it: seconds per process)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return column.to_numpy(zero_copy_only=False)


def _binary_chunks(keys: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    chunks = keys.chunks if isinstance(keys, pa.ChunkedArray) else [keys]
    # the kernel reads int32 offsets: binary and string share that layout
    return [c if c.type in (pa.binary(), pa.string()) else c.cast(pa.binary()) for c in chunks]


def digest_bytes_native(keys: pa.Array | pa.ChunkedArray) -> bytes:
    """MD5 of every key, 16 bytes per row (zeros for a null key), computed in C."""
    if _compact is None:
        raise RuntimeError("the native cleaner kernels are not available (not built, or TOPICLAKE_NO_EXTENSIONS set)")
    return b"".join(_compact.md5_digests((*c.buffers()[:3], c.offset), len(c)) for c in _binary_chunks(keys))


def digest_bytes_reference(keys: pa.Array | pa.ChunkedArray) -> bytes:
    """The twin of `digest_bytes_native`, with hashlib."""
    zero = bytes(DIGEST_SIZE)
    return b"".join(zero if k is None else key_digest(k) for c in _binary_chunks(keys) for k in c.to_pylist())


digest_bytes = digest_bytes_native if HAS_NATIVE else digest_bytes_reference


def digest_words(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """(n, 2) uint64: each key's MD5 as two big-endian words (zeros for a null key)."""
    return _bytes_to_words(digest_bytes(keys))


def _bytes_to_words(raw: bytes | np.ndarray) -> np.ndarray:
    return np.frombuffer(raw, dtype=_WORDS).reshape(-1, 2).astype(np.uint64)


def _words_to_bytes(words: np.ndarray) -> bytes:
    return np.ascontiguousarray(words, dtype=np.uint64).astype(_WORDS).tobytes()


def key_digests(keys: pa.Array | pa.ChunkedArray) -> pa.Array:
    """MD5 digests of a binary column as fixed_size_binary(16) (null keys stay null)."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    validity = keys.is_valid().buffers()[1] if keys.null_count else None
    return pa.Array.from_buffers(DIGEST_TYPE, len(keys), [validity, pa.py_buffer(digest_bytes(keys))],
                                 null_count=keys.null_count)


def _as_words(digests) -> np.ndarray:
    """Digests in any accepted form -> (n, 2) uint64 words."""
    if isinstance(digests, np.ndarray) and digests.ndim == 2 and digests.shape[1] == 2 and digests.dtype.kind == "u":
        return digests.astype(np.uint64, copy=False)
    if isinstance(digests, (pa.Array, pa.ChunkedArray)):
        if digests.null_count:
            raise ValueError("offset map digests must not be null")
        arr = digests.combine_chunks() if isinstance(digests, pa.ChunkedArray) else digests
        if arr.type != DIGEST_TYPE:
            lengths = to_numpy(pc.binary_length(arr))
            if len(lengths) and (lengths != DIGEST_SIZE).any():
                raise ValueError(f"offset map digests must be {DIGEST_SIZE} bytes")
            arr = arr.cast(DIGEST_TYPE)
        data = arr.buffers()[1]
        start = arr.offset * DIGEST_SIZE
        return _bytes_to_words(memoryview(data)[start:start + len(arr) * DIGEST_SIZE])
    if isinstance(digests, np.ndarray) and digests.ndim == 2 and digests.shape[1] == DIGEST_SIZE:
        return _bytes_to_words(np.ascontiguousarray(digests, dtype=np.uint8).tobytes())
    digest_list = [bytes(d) for d in digests]
    bad = next((d for d in digest_list if len(d) != DIGEST_SIZE), None)
    if bad is not None:
        raise ValueError(f"offset map digest must be {DIGEST_SIZE} bytes, got {bad!r}")
    return _bytes_to_words(b"".join(digest_list))


def _as_offsets(offsets) -> np.ndarray:
    if isinstance(offsets, (pa.Array, pa.ChunkedArray)):
        if offsets.null_count:
            raise ValueError("offset map offsets must not be null")
        offsets = to_numpy(offsets)
    return np.asarray(offsets, dtype=np.int64)


# ---------------------------------------------------------------------------------------- map

@dataclass(frozen=True, slots=True, eq=False)
class OffsetMap:
    """Immutable digest -> latest offset map plus the last offset it covers: numpy columns
    `words` ((n, 2) uint64, sorted, unique) and `offsets` (int64)."""

    words: np.ndarray
    offsets: np.ndarray
    latest_offset: int = NO_OFFSET

    @classmethod
    def empty(cls, latest_offset: int = NO_OFFSET) -> "OffsetMap":
        return cls(np.empty((0, 2), np.uint64), np.empty(0, np.int64), latest_offset)

    def __len__(self) -> int:
        return len(self.offsets)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OffsetMap):
            return NotImplemented
        return (self.latest_offset == other.latest_offset and np.array_equal(self.words, other.words)
                and np.array_equal(self.offsets, other.offsets))

    def __repr__(self) -> str:
        return f"OffsetMap({len(self)} keys, latest_offset={self.latest_offset})"

    @property
    def end_offset(self) -> int:
        """The first offset not covered: the new cleaner checkpoint after this round."""
        return self.latest_offset + 1

    def lookup(self, words: np.ndarray) -> np.ndarray:
        """The latest offset of each digest ((n, 2) words), -1 where the map has none."""
        words = np.asarray(words, dtype=np.uint64).reshape(-1, 2)
        out = np.full(len(words), NO_OFFSET, np.int64)
        if not len(self) or not len(words):
            return out
        hi, lo = self.words[:, 0], self.words[:, 1]
        i = _search_sorted(np.ascontiguousarray(hi), np.ascontiguousarray(words[:, 0]))
        at = np.minimum(i, len(hi) - 1)
        same_hi = (i < len(hi)) & (hi[at] == words[:, 0])
        hit = same_hi & (lo[at] == words[:, 1])
        out[hit] = self.offsets[at[hit]]
        # Digests sharing their first 64 bits with another key (about never): search the run.
        for k in np.flatnonzero(same_hi & ~hit):
            end = np.searchsorted(hi, words[k, 0], side="right")
            j = i[k] + np.searchsorted(lo[i[k]:end], words[k, 1])
            if j < end and lo[j] == words[k, 1]:
                out[k] = self.offsets[j]
        return out

    def get(self, key: bytes | bytearray | memoryview) -> int:
        """The latest offset of `key` in the dirty range, or -1 (SkimpyOffsetMap.get)."""
        return self.get_digest(key_digest(key))

    def get_digest(self, digest: bytes) -> int:
        return int(self.lookup(_as_words([digest]))[0])

    @classmethod
    def from_words(cls, words: np.ndarray, offsets: np.ndarray, *, latest_offset: int) -> "OffsetMap":
        """From (n, 2) uint64 digest words and int64 offsets; duplicates keep the largest offset."""
        if len(words) != len(offsets):
            raise ValueError(f"{len(words)} digests but {len(offsets)} offsets")
        if not len(offsets):
            return cls.empty(latest_offset)
        # Digests are uniform: sorting by the first word alone orders them (a tenth of a 3-key
        # lexsort's time), unless two digests share it (about never), which the lexsort handles.
        order = np.argsort(np.ascontiguousarray(words[:, 0]))
        w = words[order]
        same_hi = w[1:, 0] == w[:-1, 0]
        if (same_hi & (w[1:, 1] != w[:-1, 1])).any():
            return cls._from_words_lexsorted(words, offsets, latest_offset)
        first = np.flatnonzero(np.concatenate(([True], ~same_hi)))
        # each run of one digest keeps its largest offset (the run's rows are in no set order)
        return cls(np.ascontiguousarray(w[first]), np.maximum.reduceat(offsets[order], first), latest_offset)

    @classmethod
    def _from_words_lexsorted(cls, words: np.ndarray, offsets: np.ndarray, latest_offset: int) -> "OffsetMap":
        order = np.lexsort((offsets, words[:, 1], words[:, 0]))
        w, o = words[order], offsets[order]
        # the last row of each run of equal digests holds its largest offset
        last = np.ones(len(o), bool)
        last[:-1] = (w[1:, 0] != w[:-1, 0]) | (w[1:, 1] != w[:-1, 1])
        return cls(np.ascontiguousarray(w[last]), np.ascontiguousarray(o[last]), latest_offset)

    @classmethod
    def from_arrays(cls, digests, offsets, *, latest_offset: int) -> "OffsetMap":
        """From columns: digests as pyarrow fixed_size_binary(16) / binary, numpy (n, 16) uint8,
        (n, 2) uint64 words or a list of 16-byte values; int64 offsets. Duplicate digests keep
        the largest offset."""
        return cls.from_words(_as_words(digests), _as_offsets(offsets), latest_offset=latest_offset)

    @classmethod
    def from_table(cls, table: pa.Table, *, latest_offset: int) -> "OffsetMap":
        """From a table with ENTRIES_SCHEMA columns (digest, offset)."""
        return cls.from_arrays(table.column("digest"), table.column("offset"), latest_offset=latest_offset)

    @classmethod
    def merge(cls, maps: Iterable["OffsetMap"], *, latest_offset: int) -> "OffsetMap":
        """One map from partial ones (Spark tasks' shares): the max offset per digest."""
        maps = list(maps)
        if not maps:
            return cls.empty(latest_offset)
        return cls.from_words(np.concatenate([m.words for m in maps]), np.concatenate([m.offsets for m in maps]),
                              latest_offset=latest_offset)

    def to_table(self) -> pa.Table:
        digests = pa.Array.from_buffers(DIGEST_TYPE, len(self), [None, pa.py_buffer(_words_to_bytes(self.words))])
        return pa.table({"digest": digests, "offset": pa.array(self.offsets, type=pa.int64())}, schema=ENTRIES_SCHEMA)


def _search_sorted(sorted_keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """np.searchsorted(sorted_keys, queries) for many random queries: searched in sorted order,
    so consecutive searches walk nearby memory (3-6 times faster on a map of a million digests)."""
    if len(queries) < 1024:
        return np.searchsorted(sorted_keys, queries)
    order = np.argsort(queries)
    out = np.empty(len(queries), np.intp)
    out[order] = np.searchsorted(sorted_keys, queries[order])
    return out


class _Accumulator:
    """Digest/offset chunks in log order, folded into one sorted map now and then: the folding
    is amortised (a fold when the pending rows outgrow the map), so memory stays near the map's
    size plus one window instead of one row per record of the dirty range."""

    def __init__(self) -> None:
        self._map = OffsetMap.empty()
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._pending_rows = 0

    def add(self, words: np.ndarray, offsets: np.ndarray) -> None:
        if len(offsets):
            self._pending.append((words, offsets))
            self._pending_rows += len(offsets)
            if self._pending_rows > max(len(self._map), 1 << 20):
                self.fold()

    def fold(self) -> OffsetMap:
        if self._pending:
            self._map = OffsetMap.merge([self._map] + [OffsetMap(w, o) for w, o in self._pending],
                                        latest_offset=NO_OFFSET)
            self._pending, self._pending_rows = [], 0
        return self._map

    def result(self, latest_offset: int) -> OffsetMap:
        m = self.fold()
        return OffsetMap(m.words, m.offsets, latest_offset)


# ----------------------------------------------------------------------------------- building

def _mappable(batch: RecordBatch, aborted: AbortedIndex) -> bool:
    # Control batches and aborted transactional data never enter the map (Cleaner.buildOffsetMapForSegment).
    return not batch.is_control and not aborted.is_aborted(batch.header)


def batch_windows(batches: Iterable[RecordBatch]) -> Iterator[list[RecordBatch]]:
    """Consecutive batches in groups of about WINDOW_BYTES: one columnar decode per group keeps
    memory bounded without paying per-batch call overhead."""
    window: list[RecordBatch] = []
    size = 0
    for batch in batches:
        window.append(batch)
        size += batch.size
        if size >= WINDOW_BYTES:
            yield window
            window, size = [], 0
    if window:
        yield window


@dataclass(frozen=True, slots=True)
class _Keyed:
    """The keyed records of one window in log order: digest words, offsets, and the index in
    the window of each one's batch."""

    words: np.ndarray
    offsets: np.ndarray
    batch: np.ndarray


def _keyed_records(window: Sequence[RecordBatch], start: int, end: int | None, aborted: AbortedIndex) -> _Keyed:
    """Keyed records with start <= offset (< end) of the window's mappable batches."""
    chosen = [i for i, b in enumerate(window)
              if b.last_offset >= start and (end is None or b.base_offset < end) and _mappable(b, aborted)]
    table = decode_record_batches([window[i] for i in chosen])
    offsets = to_numpy(table.column("offset"))
    keys = table.column("key")
    keep = to_numpy(keys.is_valid()) & (offsets >= start)
    if end is not None:
        keep &= offsets < end
    # decoded rows follow the batches, records_count rows each (the decoder checks the count)
    batch = np.repeat(np.asarray(chosen, np.int64), [window[i].header.records_count for i in chosen])
    return _Keyed(digest_words(keys)[keep], offsets[keep], batch[keep])


def task_offset_map(batches: Iterable[RecordBatch], *, start: int, end: int,
                    aborted: AbortedIndex | Iterable[AbortedTxn]) -> OffsetMap:
    """The max offset per digest over the keyed records in [start, end) of committed /
    non-transactional data batches: one Spark task's share of the dirty range, pre-aggregated
    so only one row per distinct key leaves the task. Merge the shares with `OffsetMap.merge`."""
    index = as_aborted_index(aborted)
    acc = _Accumulator()
    for window in batch_windows(_until(batches, end)):
        keyed = _keyed_records(window, start, end, index)
        acc.add(keyed.words, keyed.offsets)
    return acc.result(NO_OFFSET)


def _until(batches: Iterable[RecordBatch], end: int) -> Iterator[RecordBatch]:
    for batch in batches:
        if batch.base_offset >= end:
            return
        yield batch


def offset_map_entries(batches: Iterable[RecordBatch], *, start: int, end: int,
                       aborted: AbortedIndex | Iterable[AbortedTxn]) -> pa.Table:
    """`task_offset_map` as a table of ENTRIES_SCHEMA rows (digest, offset)."""
    return task_offset_map(batches, start=start, end=end, aborted=aborted).to_table()


def build_offset_map(segments: Sequence[SegmentData], *, start: int, end: int,
                     aborted: AbortedIndex | Iterable[AbortedTxn], max_entries: int | None = None,
                     topic: str = "", partition: int = -1, epochs: EpochHistory | None = None) -> OffsetMap:
    """Kafka's buildOffsetMap over the segments that hold [start, end) (`segments` may be the
    whole log; the ones outside the range are skipped as Kafka's logSegments(start, end) does).

    latest_offset follows Kafka: every batch ending at or after `start` moves it to its last
    offset, and a fully read segment fast-forwards it to the next segment's base - 1 (offset gaps
    left by earlier cleanings). With `max_entries` (Kafka: slots * load factor) the map stops when
    full, part-way through a segment; the round then cleans only up to latest_offset. `epochs`
    (cluster mode): a batch a fenced leader wrote is not part of the log and adds nothing."""
    check_sorted(topic, partition, segments)
    index = as_aborted_index(aborted)
    acc = _Accumulator()
    latest = NO_OFFSET
    dirty = _dirty_segments(segments, start, end)
    for i, segment in enumerate(dirty):
        next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
        source = f"{topic}-{partition} segment {segment.base_offset}"
        try:
            for window in batch_windows(valid_only(iter_batches(segment.data, source=source), epochs)):
                keyed = _keyed_records(window, start, None, index)
                if max_entries is not None:
                    stop = _first_refused_put(acc.fold(), keyed.words, max_entries)
                    if stop is not None:
                        acc.add(keyed.words[:stop], keyed.offsets[:stop])
                        return acc.result(_latest_at_stop(window, keyed, stop, start, latest))
                acc.add(keyed.words, keyed.offsets)
                latest = _latest_after(window, len(window), start, latest)
        except CorruptRecordError as exc:
            raise exc.at(source=source) from None
        latest = next_start - 1
    return acc.result(latest)


def _latest_after(window: Sequence[RecordBatch], count: int, start: int, latest: int) -> int:
    """latest_offset after the first `count` batches of the window: each batch ending at or after
    `start` moves it to its last offset (its puts' offsets are all below that)."""
    for batch in window[:count]:
        if batch.last_offset >= start:
            latest = batch.last_offset
    return latest


def _latest_at_stop(window: Sequence[RecordBatch], keyed: _Keyed, stop: int, start: int, latest: int) -> int:
    """latest_offset when put number `stop` of the window is refused: the offset of the put
    before it if that was in the same batch, else where the batches before it left it."""
    batch = int(keyed.batch[stop])
    if stop > 0 and keyed.batch[stop - 1] == batch:
        return int(keyed.offsets[stop - 1])
    return _latest_after(window, batch, start, latest)


def _first_refused_put(current: OffsetMap, words: np.ndarray, max_entries: int) -> int | None:
    """The first put SkimpyOffsetMap refuses: it refuses every put, even of a known key, once it
    holds max_entries digests. None if all are accepted."""
    if len(current) >= max_entries:
        return 0 if len(words) else None
    if not len(words):
        return None
    order = np.lexsort((np.arange(len(words)), words[:, 1], words[:, 0]))
    w = words[order]
    first_sorted = np.ones(len(w), bool)
    first_sorted[1:] = (w[1:, 0] != w[:-1, 0]) | (w[1:, 1] != w[:-1, 1])
    first = np.empty(len(w), bool)
    first[order] = first_sorted
    new = first & (current.lookup(words) == NO_OFFSET)
    before = len(current) + np.cumsum(new) - new  # digests held before each put
    stop = int(np.searchsorted(before, max_entries, side="left"))
    return stop if stop < len(words) else None


def _dirty_segments(segments: Sequence[SegmentData], start: int, end: int) -> list[SegmentData]:
    """logSegments(start, end): the segment containing `start`, up to those with base < end."""
    if start >= end:
        return []
    first = 0
    for i, s in enumerate(segments):
        if s.base_offset <= start:
            first = i
    return [s for s in segments[first:] if s.base_offset < end]
