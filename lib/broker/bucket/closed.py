"""The closed segments below a bucket partition's local cache, read from the bucket
(docs/OBJECT-STORAGE.md, "Read path"): a takeover restores only the tail into the cache, so the
offsets [manifest log start, local log start) are served from here, KIP-405's shape with the
bucket as the remote tier.

- Fetch: the segment's `.index` object (fetched once, kept in a small bounded cache) gives the
  byte position at or below the offset; ranged GETs from there return whole batches, within the
  fetch's budget (at least one batch when asked, as the Log's read). A GET reads at least 4 MiB
  ahead, and the windows read are kept (256 MiB for the broker, least recently used out), so a
  consumer catching up pays a GET per few fetches, not one each.
- read_committed: the aborted transactions overlapping what was read, from the segments'
  `.txnindex` objects (objectlog.aborted: a segment sealed before those is scanned once), with
  Kafka's stop rule (an entry whose last stable offset reaches the bound completes the search).
- ListOffsets by time and MAX_TIMESTAMP: the manifest's largest timestamps pick the segment, its
  `.timeindex` and `.index` objects the position, one ranged GET the record.

The manifest is swapped whole (`adopt`, from the tail's adopt of a poll, retention, DeleteRecords,
a merge or compaction commit), so a reader thread sees one manifest per call. Methods run on the
partition manager's reader threads, never the event loop; a GET that fails is this partition's
retriable error (KAFKA_STORAGE_ERROR, or REQUEST_TIMED_OUT while the store is down).
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from typing import Any, Callable, TypeVar

import numpy as np
from kio.schema.errors import ErrorCode

from topiclake.objectlog.aborted import segment_aborted
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import Manifest, SegmentEntry
from topiclake.segments.batch import HEADER_SIZE, BatchHeader, RecordBatch, read_header
from topiclake.segments.errors import OffsetOutOfRangeError
from topiclake.segments.time_index import TimestampOffset
from topiclake.segments.txn_index import TxnIndexEntry
from topiclake.segments.txn_metadata import AbortedTxn
from topiclake.store.errors import ObjectStoreError, StoreUnavailable
from topiclake.store.objects import ObjectStore

from ..errors import BrokerError

INDEX_CACHE_BYTES = 32 * 1024 * 1024  # decoded .index/.timeindex objects kept per partition
ABORTED_CACHE_SEGMENTS = 4096  # segments whose aborted transactions are kept (a few entries each)
READ_SLACK = 64 * 1024  # read past the budget: the wanted batch is within an index interval of its entry
MAX_WINDOW = 8 * 1024 * 1024  # one ranged GET at most (a bigger budget takes more GETs)
READ_AHEAD = 4 * 1024 * 1024  # a fetch's GET reads at least this far: a consumer's next fetches find it
RANGE_CACHE_BYTES = 256 * 1024 * 1024  # the read-ahead windows kept, for all partitions of the broker
_T = TypeVar("_T")


class ClosedSegments:
    def __init__(self, store: ObjectStore, keys: PartitionKeys, manifest: Manifest):
        self.store = store
        self.keys = keys
        self.manifest = manifest
        self._lock = threading.Lock()  # the caches, shared by the reader threads
        self._indexes: OrderedDict[str, np.ndarray] = OrderedDict()
        self._index_bytes = 0
        self._aborted: OrderedDict[str, list[TxnIndexEntry]] = OrderedDict()
        # Object keys carry no topic id: a topic deleted and created again (or led elsewhere
        # meanwhile) reuses them for other bytes, so a takeover starts with no window of its own.
        WINDOWS.forget(store.root.uri(keys.prefix))

    def __repr__(self) -> str:
        return f"ClosedSegments({self.keys.prefix}, [{self.log_start_offset}, {self.end_offset}))"

    @property
    def log_start_offset(self) -> int:
        return self.manifest.log_start_offset

    @property
    def end_offset(self) -> int:
        return self.manifest.end_offset

    def adopt(self, manifest: Manifest) -> None:
        """A newer committed manifest: segments it dropped are no longer read (their cached
        indexes age out of the cache)."""
        if manifest.version > self.manifest.version:
            self.manifest = manifest

    # -- Fetch -------------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, min_one: bool, bound: int | None = None) -> tuple[bytes, int]:
        """Whole batches from the closed segment holding `offset` (the next one's if none is at or
        above it there), within `max_bytes` (at least one batch with `min_one`), none starting at
        or past `bound` (read_committed: the last stable offset). (bytes, the offset after them);
        (b"", the closed end) when no closed batch holds an offset at or above `offset`."""
        manifest = self.manifest
        if not manifest.log_start_offset <= offset < manifest.end_offset:
            raise OffsetOutOfRangeError(f"fetch offset {offset} of {self.keys.topic}-{self.keys.partition} is "
                                        f"outside the closed segments [{manifest.log_start_offset}, "
                                        f"{manifest.end_offset})")
        for entry in manifest.segments[_segment_index(manifest, offset):]:
            found = self._guard(self._read_segment, entry, max(offset, entry.base_offset), max_bytes, min_one, bound)
            if found is not None:
                return found
        return b"", manifest.end_offset

    def _read_segment(self, entry: SegmentEntry, offset: int, max_bytes: int, min_one: bool,
                      bound: int | None) -> tuple[bytes, int] | None:
        """None when the segment holds no batch at or above `offset`."""
        window = max(min(max(max_bytes, 0), MAX_WINDOW) + READ_SLACK, READ_AHEAD)
        reader = _RangeReader(self.store, entry, window, WINDOWS)
        cursor = self._position(entry, offset)
        start = end = None
        next_offset = offset
        while cursor < entry.size:
            header = read_header(reader.covering(cursor, HEADER_SIZE, contiguous=start is not None), 0)
            if header.last_offset < offset:
                cursor += header.size
                continue
            if bound is not None and header.base_offset >= bound:
                break
            if start is None:
                start = cursor
            if cursor + header.size - start > max_bytes and not (min_one and cursor == start):
                break
            cursor += header.size
            end, next_offset = cursor, header.next_offset
        if start is None:
            return None if cursor >= entry.size else (b"", offset)
        if end is None:
            return b"", offset
        data = reader.covering(start, end - start, contiguous=True)
        reader.keep()
        return data, next_offset

    def _position(self, entry: SegmentEntry, offset: int) -> int:
        """The byte position of the index entry at or below `offset` (0 without one)."""
        index = self._index(entry.index_key, entry.base_offset, 2)
        at = int(np.searchsorted(index[:, 0], offset - entry.base_offset, side="right")) - 1
        return int(index[at, 1]) if at >= 0 else 0

    def last_batch_headers(self, max_bytes: int) -> list[BatchHeader]:
        """The headers of the closed batches within about the last `max_bytes` of the closed log
        (a ranged GET per segment, from an index entry: a batch boundary), oldest first: a
        takeover's producer windows below the snapshot at the closed end
        (ProducerState.restore_windows)."""
        runs: list[list[BatchHeader]] = []
        for entry in reversed(self.manifest.segments):
            if max_bytes <= 0:
                break
            if entry.size == 0:  # a compaction's segment whose every batch was superseded
                continue
            positions = self._index(entry.index_key, entry.base_offset, 2)[:, 1]
            below = int(np.searchsorted(positions, entry.size - max_bytes, side="right")) - 1
            start = int(positions[below]) if entry.size > max_bytes and below >= 0 else 0
            data = self.store.get_range(entry.key, start, entry.size)
            headers, cursor = [], 0
            while cursor + HEADER_SIZE <= len(data):
                headers.append(header := read_header(data, cursor))
                cursor += header.size
            runs.append(headers)
            max_bytes -= entry.size - start
        return [header for headers in reversed(runs) for header in headers]

    # -- read_committed ------------------------------------------------------------------------------

    def aborted_between(self, start: int, upper: int) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions with a marker at or after `start` and data before `upper`
        (Kafka's collectAbortedTxns over the closed segments from `start`'s), and whether the
        search completed here (an entry's last stable offset reached `upper`): if not, the
        local log's aborts count too."""
        manifest = self.manifest
        found: list[AbortedTxn] = []
        for entry in manifest.segments[_segment_index(manifest, start):]:
            for txn in self._guard(self._segment_aborted, entry):
                if txn.last_offset >= start and txn.first_offset < upper:
                    found.append(txn.aborted)
                if txn.last_stable_offset >= upper:
                    return sorted(found), True
        return sorted(found), False

    def _segment_aborted(self, entry: SegmentEntry) -> list[TxnIndexEntry]:
        with self._lock:
            cached = self._aborted.get(entry.key)
        if cached is None:
            cached = segment_aborted(self.store, self.keys, entry)
            with self._lock:
                self._aborted[entry.key] = cached
                while len(self._aborted) > ABORTED_CACHE_SEGMENTS:
                    self._aborted.popitem(last=False)
        return cached

    # -- ListOffsets ---------------------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The first record at or after the log start with a timestamp >= `timestamp` in the
        closed segments (Kafka's fetchOffsetByTimestamp); None when none has one."""
        manifest = self.manifest
        start = manifest.log_start_offset
        for entry in manifest.segments[_segment_index(manifest, start):]:
            if entry.largest_timestamp < timestamp:
                continue
            found = self._guard(self._find_timestamp, entry, timestamp, max(start, entry.base_offset))
            if found is not None:
                return found
        return None

    def max_timestamp(self) -> TimestampOffset | None:
        """ListOffsets MAX_TIMESTAMP (KIP-734) over the closed segments: the first record holding
        their largest timestamp; None when none has one. A manifest entry's largest timestamp only
        bounds its records' (a cleaned segment keeps the replaced segments'; one without timestamps
        has its file's mtime), so segments are tried from the largest bound down, earlier first
        among equals, until none can beat the best found: usually one `.timeindex` GET and one
        ranged GET."""
        manifest = self.manifest
        live = manifest.segments[_segment_index(manifest, manifest.log_start_offset):]
        best: TimestampOffset | None = None
        for entry in sorted(live, key=lambda e: (-e.largest_timestamp, e.base_offset)):
            if best is not None and (entry.largest_timestamp, -entry.base_offset) <= _later_first(best):
                break  # none left can hold a larger timestamp, or an equal one earlier
            found = self._guard(self._segment_max_timestamp, entry)
            if found is not None and (best is None or _later_first(found) > _later_first(best)):
                best = found
        return best

    def _segment_max_timestamp(self, entry: SegmentEntry) -> TimestampOffset | None:
        """The segment's first record holding its largest timestamp: the `.timeindex` entry of that
        timestamp (a seal appends it, LogSegment.on_become_inactive) names the first batch reaching
        it, the `.index` a position at or below that batch (Segment.max_timestamp_record's way)."""
        times = self._index(entry.time_index_key, entry.base_offset, 3)
        if not len(times):
            return None
        at = int(np.argmax(times[:, 0]))  # the first of equals (unused zero slots never win)
        timestamp = int(times[at, 0])
        if timestamp < 0:
            return None
        reader = _RangeReader(self.store, entry, READ_SLACK)
        cursor = self._position(entry, entry.base_offset + int(times[at, 1]))
        while cursor < entry.size:
            header = read_header(reader.covering(cursor, HEADER_SIZE), 0)
            if header.max_timestamp == timestamp:
                batch = RecordBatch(header, reader.covering(cursor, header.size), cursor, entry.key)
                return next((TimestampOffset(record.timestamp, record.offset) for record in batch.records()
                             if record.timestamp == timestamp), None)
            cursor += header.size
        return None

    def _find_timestamp(self, entry: SegmentEntry, timestamp: int, start: int) -> TimestampOffset | None:
        times = self._index(entry.time_index_key, entry.base_offset, 3)
        at = int(np.searchsorted(times[:, 0], timestamp, side="left")) - 1  # the last entry below the target
        offset = max(start, entry.base_offset + int(times[at, 1]) if at >= 0 else start)
        reader = _RangeReader(self.store, entry, READ_SLACK)
        cursor = self._position(entry, offset)
        while cursor < entry.size:
            header = read_header(reader.covering(cursor, HEADER_SIZE), 0)
            if header.last_offset >= start and header.max_timestamp >= timestamp:
                batch = RecordBatch(header, reader.covering(cursor, header.size), cursor, entry.key)
                for record in batch.records():
                    if record.offset >= start and record.timestamp >= timestamp:
                        return TimestampOffset(record.timestamp, record.offset)
            cursor += header.size
        return None

    # -- the caches and errors -----------------------------------------------------------------------

    def _index(self, key: str, base_offset: int, columns: int) -> np.ndarray:
        """A `.index` object's (relative offset, position) or a `.timeindex` object's (timestamp,
        relative offset) entries as an int64 array of two columns, cached."""
        with self._lock:
            cached = self._indexes.get(key)
            if cached is not None:
                self._indexes.move_to_end(key)
                return cached
        raw = self.store.get(key)
        if columns == 2:  # .index: int32 relative offset, int32 position
            whole = raw[: len(raw) - len(raw) % 8]
            entries = np.frombuffer(whole, dtype=">i4").reshape(-1, 2).astype(np.int64)
            # Entries only ever grow; anything after the first that does not (unused slots) is cut.
            stop = np.flatnonzero((np.diff(entries[:, 0]) <= 0) | (np.diff(entries[:, 1]) <= 0))
            entries = entries[: stop[0] + 1] if len(stop) else entries
        else:  # .timeindex: int64 timestamp, int32 relative offset
            whole = raw[: len(raw) - len(raw) % 12]
            table = np.frombuffer(whole, dtype=np.dtype([("t", ">i8"), ("o", ">i4")]))
            entries = np.stack([table["t"].astype(np.int64), table["o"].astype(np.int64)], axis=1) if len(table) \
                else np.zeros((0, 2), dtype=np.int64)
        with self._lock:
            self._indexes[key] = entries
            self._index_bytes += entries.nbytes
            while self._index_bytes > INDEX_CACHE_BYTES and len(self._indexes) > 1:
                self._index_bytes -= self._indexes.popitem(last=False)[1].nbytes
        return entries

    def _guard(self, call: Callable[..., _T], *args: Any) -> _T:
        """A failed GET is this partition's retriable error, never the connection's."""
        try:
            return call(*args)
        except StoreUnavailable:
            raise
        except ObjectStoreError as exc:
            raise BrokerError(f"{self.keys.prefix}: a closed segment could not be read from the bucket: {exc}",
                              ErrorCode.kafka_storage_error) from exc


def _later_first(found: TimestampOffset) -> tuple[int, int]:
    """Orders MAX_TIMESTAMP candidates: the larger timestamp, then the earlier offset, is greater."""
    return found.timestamp, -found.offset


def _segment_index(manifest: Manifest, offset: int) -> int:
    """The position in manifest.segments of the first segment ending above `offset`."""
    return bisect.bisect_right([entry.end_offset for entry in manifest.segments], offset)


class _Windows:
    """Read-ahead windows of closed segment objects, bounded in bytes across the broker's partitions,
    least recently used out first. An object is never rewritten, but a topic deleted and created
    again reuses its keys: a takeover forgets its partition's windows (ClosedSegments)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._windows: OrderedDict[str, tuple[int, bytes]] = OrderedDict()
        self._bytes = 0

    def find(self, key: str, position: int) -> tuple[int, bytes] | None:
        """The window of object `key` holding `position`, if one is kept."""
        with self._lock:
            found = self._windows.get(key)
            if found is None or not found[0] <= position < found[0] + len(found[1]):
                return None
            self._windows.move_to_end(key)
            return found

    def forget(self, prefix: str) -> None:
        """Drop the windows of every object under `prefix` (a partition's)."""
        head = prefix.rstrip("/") + "/"
        with self._lock:
            for key in [key for key in self._windows if key.startswith(head)]:
                self._bytes -= len(self._windows.pop(key)[1])

    def keep(self, key: str, start: int, data: bytes) -> None:
        with self._lock:
            old = self._windows.pop(key, None)
            self._bytes -= len(old[1]) if old is not None else 0
            self._windows[key] = (start, data)
            self._bytes += len(data)
            while self._bytes > self.max_bytes and self._windows:
                self._bytes -= len(self._windows.popitem(last=False)[1][1])


WINDOWS = _Windows(RANGE_CACHE_BYTES)


class _RangeReader:
    """A closed segment's bytes through ranged GETs: a buffer over [start, start + len) that
    grows forward, or moves when a read lands past it (batches skipped unread), starting from a
    kept read-ahead window when one holds the position (`windows`)."""

    def __init__(self, store: ObjectStore, entry: SegmentEntry, window: int, windows: _Windows | None = None):
        self.store, self.entry, self.window, self.windows = store, entry, window, windows
        self.start = 0
        self.data = b""  # bytes: a kept window is used without a copy; an extension makes a new one
        self.fetched = False
        self._uri = store.root.uri(entry.key)  # windows are kept by object, whatever the root

    def covering(self, position: int, size: int, *, contiguous: bool = False) -> bytes:
        """The bytes [position, position + size) (fewer at the object's end)."""
        end = min(position + size, self.entry.size)
        buffered_end = self.start + len(self.data)
        if position < self.start or (position > buffered_end and not contiguous) or not self.data:
            kept = self.windows.find(self._uri, position) if self.windows is not None else None
            self.start, self.data = kept if kept is not None else (position, b"")
            buffered_end = self.start + len(self.data)
        if end > buffered_end:
            upto = min(self.entry.size, max(end, buffered_end + self.window))
            self.data = self.data + self.store.get_range(self.entry.key, buffered_end, upto)
            self.fetched = True
        return self.data[position - self.start:end - self.start]

    def keep(self) -> None:
        """Keep what this reader fetched (its last MAX_WINDOW bytes) for the next reads."""
        if self.windows is not None and self.fetched and self.data:
            tail = self.data[-MAX_WINDOW:]
            self.windows.keep(self._uri, self.start + len(self.data) - len(tail), tail)
