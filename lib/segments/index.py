"""What the offset index and the time index share (Kafka's AbstractIndex).

An index file is an array of fixed-size big-endian entries (key, value), sorted by key. While a
segment is active its index file is preallocated to roundDown(segment.index.bytes, entry size)
bytes of zeros; on roll/close `trim_to_valid_size()` cuts it to entries * entry size, which is
why a closed segment's index file has exactly that length (as Kafka leaves it).

The entries are also kept in memory as two int arrays: lookups bisect them without touching the
file. New entries reach the file lazily (on flush, trim, resize, truncate and close): an active
segment's index is rebuilt by recovery after a crash anyway, and it saves a syscall per entry on
the append path. Reader threads only ever see a prefix that the single writer has completed (the arrays
only grow, except in recovery/truncation which the owner does while no reads run).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import struct
from array import array
from bisect import bisect_right
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from .filenames import as_path

from .atomic import fsync
from .errors import CorruptRecordError, TopiclakeError

T = TypeVar("T")


class IndexFullError(TopiclakeError):
    """Appending to an index that has no free slot (the segment should have rolled)."""


class InvalidIndexOffsetError(TopiclakeError):
    """An append that would make the index go backwards (Kafka's InvalidOffsetException).
    Not a CorruptRecordError on purpose: recovery must never mistake it for bad log bytes."""


def dump_entries(path: str | os.PathLike, entry: struct.Struct, *, relative_offset: Callable[[tuple], int],
                 parse: Callable[[tuple], T], problem: Callable[[T, T | None], str | None]) -> Iterator[T]:
    """The entries of an index file as Kafka's DumpLogSegments reads them (tools: dump-log): every
    whole entry up to the first empty slot of a preallocated file, which is the first entry after
    entry 0 whose relative offset is 0 (Kafka's test: offset == base offset and i > 0).

    `problem(entry, previous entry)` says what is wrong with an entry, or None. The first bad
    entry, or bytes after the last whole entry (a torn write), is a CorruptRecordError naming the
    entry and its byte position, raised once the valid entries before it have been yielded."""
    data = Path(path).read_bytes()
    whole = len(data) - len(data) % entry.size
    previous = None
    for n, fields in enumerate(entry.iter_unpack(memoryview(data)[:whole])):
        if n > 0 and relative_offset(fields) == 0:
            return
        parsed = parse(fields)
        why = problem(parsed, previous)
        if why is not None:
            raise CorruptRecordError(f"entry {n}: {why}", source=str(path), position=n * entry.size)
        yield parsed
        previous = parsed
    if whole != len(data):
        raise CorruptRecordError(f"{len(data) - whole} bytes at the end are not a whole {entry.size}-byte entry",
                                 source=str(path), position=whole)


class _Retired(Exception):
    """The index's file was deleted or replaced under its name (see Index._handle)."""


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


_F = TypeVar("_F", bound=Callable[..., Any])


def _unless_retired(method: _F) -> _F:
    """A write, trim or fsync of an index whose file is gone does nothing (see Index._handle)."""
    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except _Retired:
            return None
    return guarded  # type: ignore[return-value]


class Index:
    """Base class: subclasses set ENTRY (a struct) and describe what key/value mean."""

    ENTRY: struct.Struct

    def __init__(self, path: str | os.PathLike, base_offset: int, max_index_size: int, *, writable: bool = True):
        """Open or create the index. A new file is preallocated to `max_index_size`; an existing
        one keeps its length and, like Kafka, has room for exactly the entries that length holds
        (a trimmed index is full until `resize` gives it room again)."""
        self.path = as_path(path)
        self.base_offset = base_offset
        self.writable = writable
        self._keys = array("q")
        self._values = array("q")
        self._pending = bytearray()  # entries not yet written to the file
        # The file is opened only for a write, a truncation or an fsync, and closed after it: the
        # entries live in memory, so an open log holds one descriptor (its .log), as Kafka's
        # memory-mapped indexes do, and 10,000 partitions fit a 20,000-descriptor limit.
        self._fd: int | None = None
        self._closed = False
        self._identity = (0, 0)  # the file's (device, inode): a file replaced by that name is not this index's
        self._handle_blksize = 4096  # the file's st_blksize, as `_handle` last saw it
        self._file_size = 0
        # Whether every change made through this object is on disk (fsynced). An index opened
        # from a file may hold what a killed process left in the page cache: not known synced.
        self._synced = False
        self.max_index_size = 0  # the room for entries now (a trimmed index has none to spare)
        self.configured_max_size = max_index_size  # the room begin_rebuild gives back (segment.index.bytes)
        try:
            if writable:
                if self._open_existing() is None:
                    self.resize(max_index_size)
                    return
            else:
                try:
                    self._fd = os.open(self.path, os.O_RDONLY)
                except FileNotFoundError:
                    self._closed = True  # a read-only view of a missing index is an empty index
                    return
            st = os.fstat(self._fd)
            self._identity = st.st_dev, st.st_ino
            self._load(self._fd, st.st_size)
        finally:
            if self._fd is not None:
                if self._identity == (0, 0):
                    self._identity = _identity(self._fd)
                os.close(self._fd)
                self._fd = None
        if not writable:
            self._closed = True  # nothing more to read: every entry is in memory

    def _open_existing(self) -> int | None:
        """Open the writable index's file into `_fd`: the existing one (the usual case: one
        system call), else a new one, created exclusively; None when it was created."""
        try:
            self._fd = os.open(self.path, os.O_RDWR)
            return self._fd
        except FileNotFoundError:
            pass
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:  # created meanwhile
            self._fd = os.open(self.path, os.O_RDWR)
            return self._fd
        return None

    def _load(self, fd: int, file_size: int) -> None:
        # Kafka: every whole entry of an existing file is assumed valid (position = roundDown(len)),
        # except the zeros a crash leaves after an active segment's entries: the file was
        # preallocated to segment.index.bytes, so they are free room, not ~1.3 M entries to parse
        # (seconds per partition when a broker restarts after kill -9).
        self._file_size = file_size
        usable = self._file_size - self._file_size % self.ENTRY.size
        in_use = self._slots_in_use(fd, usable // self.ENTRY.size) * self.ENTRY.size
        if in_use:
            for key, value in self.ENTRY.iter_unpack(os.pread(fd, in_use, 0)):
                self._keys.append(key)
                self._values.append(value)
        self.max_index_size = usable

    @contextlib.contextmanager
    def _handle(self) -> Iterator[int]:
        """The file, opened for the block if no enclosing block has it open; closed after.
        _Retired when the name no longer holds this index's file: a maintenance job outside the
        broker deleted or replaced the segment (a cleaned one at the same base offset) and the
        log has not refreshed yet. Its writes are dropped then, as they went to the unlinked file
        when the index held its descriptor; they must never reach the replacement."""
        if self._fd is not None:
            yield self._fd
            return
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            self._closed, self._pending = True, bytearray()
            raise _Retired(self.path) from None
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != self._identity:
            os.close(fd)
            self._closed, self._pending = True, bytearray()
            raise _Retired(self.path)
        self._handle_blksize = st.st_blksize
        self._fd = fd
        try:
            yield fd
        finally:
            os.close(fd)
            self._fd = None

    def _slots_in_use(self, fd: int, slots: int) -> int:
        """How many of the file's first `slots` slots hold entries. Keys strictly increase, so no
        entry but the first can be all zeros, and preallocated room is a run of zero slots at the
        end: a binary search finds where it starts, reading a few slots, not the whole file. An
        all-zero first slot followed by room counts as room: as an entry (relative offset 0 at
        position 0, or time 0) it says no more than an empty index does."""
        size = self.ENTRY.size
        zero = bytes(size)
        try:  # a preallocated file is a hole after its entries' blocks: all room from there on
            hole = os.lseek(fd, 0, os.SEEK_HOLE)
        except OSError:
            hole = slots * size
        if hole < slots * size:
            # The slots before the hole are read at once: a pread per probe into a 10 MB hole
            # zero-filled pages by readahead (22 probes an index, 4,000 indexes at a start).
            head = -(-hole // size)
            before_hole = os.pread(fd, head * size, 0) if head else b""

            def is_room(slot: int) -> bool:
                return slot >= head or before_hole[slot * size:(slot + 1) * size] == zero
        else:
            def is_room(slot: int) -> bool:
                return os.pread(fd, size, slot * size) == zero

        if slots == 0 or not is_room(slots - 1):
            return slots
        low, high = 1, slots - 1  # slot `high` is room: find the first room slot after slot 0
        while low < high:
            middle = (low + high) // 2
            if is_room(middle):
                high = middle
            else:
                low = middle + 1
        return 0 if low == 1 and is_room(0) else min(low, slots)

    # -- size bookkeeping
    @property
    def entry_size(self) -> int:
        return self.ENTRY.size

    @property
    def entries(self) -> int:
        return len(self._keys)

    @property
    def max_entries(self) -> int:
        return self.max_index_size // self.ENTRY.size

    def is_full(self) -> bool:
        return len(self._keys) >= self.max_index_size // self.ENTRY.size

    @property
    def size_in_bytes(self) -> int:
        return self.entries * self.ENTRY.size

    @property
    def file_size(self) -> int:
        return self._file_size

    def _require_writable(self) -> None:
        if self._closed or not self.writable:
            raise IndexFullError(f"{self.path}: index is read-only or closed")

    @_unless_retired
    def resize(self, new_size: int) -> None:
        """Set the file length (and the room for entries) to roundDown(new_size, entry size), never
        below the current entries: preallocation for the active segment, trimming on roll/close."""
        self._require_writable()
        rounded = max(new_size - new_size % self.ENTRY.size, self.size_in_bytes)
        if rounded == self._file_size and not self._pending:
            self.max_index_size = rounded
            return
        with self._handle() as fd:
            self._write_pending()
            if rounded != self._file_size:
                os.ftruncate(fd, rounded)
                self._file_size = rounded
                self._synced = False
        self.max_index_size = rounded

    def trim_to_valid_size(self) -> None:
        if self.writable and not self._closed:
            self.resize(self.size_in_bytes)

    # -- writing (single writer)
    def _append(self, key: int, value: int) -> None:
        if self._closed or not self.writable:
            self._require_writable()
        self._pending += self.ENTRY.pack(key, value)
        self._keys.append(key)
        self._values.append(value)

    @_unless_retired
    def _write_pending(self) -> None:
        if self._pending and not self._closed:
            start = self.size_in_bytes - len(self._pending)
            with self._handle() as fd:
                os.pwrite(fd, self._pending, start)
            self._file_size = max(self._file_size, self.size_in_bytes)
            self._pending = bytearray()
            self._synced = False

    @_unless_retired
    def truncate_to_entries(self, count: int) -> None:
        """Keep the first `count` entries; the freed tail of the file is zeroed (not left stale),
        so a reload after a crash never mistakes old entries for live ones beyond recovery."""
        count = max(0, min(count, self.entries))
        self._write_pending()
        del self._keys[count:]
        del self._values[count:]
        if self.writable and not self._closed:
            self._synced = False
            preallocated = self._file_size
            with self._handle() as fd:
                os.ftruncate(fd, self.size_in_bytes)
                if preallocated > self.size_in_bytes:
                    os.ftruncate(fd, preallocated)

    def begin_rebuild(self) -> None:
        """Recovery's reset (Kafka: truncate + resize): no entries and room for segment.index.bytes,
        in memory only; `finish_rebuild` writes the file. Cutting a preallocated index to zero
        bytes and back frees its blocks, a journal commit each (and a discard on a `discard`
        mount): that was half of an unclean start of 2,000 logs, whose rebuilt entries are
        mostly what the file already holds."""
        self._write_pending()
        self._rebuilt_over = self.size_in_bytes  # the entries the file holds (found at open, or written since)
        del self._keys[:]
        del self._values[:]
        if self.writable and not self._closed:
            self.max_index_size = self.configured_max_size - self.configured_max_size % self.ENTRY.size

    @_unless_retired
    def finish_rebuild(self, *, keep_room: bool = False) -> None:
        """Make the file hold exactly the rebuilt entries and zeros after them, writing only what
        differs; then trim it (Kafka's trimToValidSize after recovery), or with `keep_room` (the
        active segment) give it segment.index.bytes of room. Bytes the old entries left after
        the new ones (a recovery that cut the log) are cut off as reset did; so is any data
        the file holds past the blocks that held entries, which a file whose tail is one hole
        (a preallocated index) proves it has none of with one lseek(SEEK_DATA)."""
        if not self.writable or self._closed:
            return
        with self._handle() as fd:
            rebuilt = bytes(self._pending)
            self._pending = bytearray()
            block = max(self._handle_blksize, 1)
            seen = -(-max(len(rebuilt), self._rebuilt_over) // block) * block  # the blocks entries were in
            on_disk = os.pread(fd, seen, 0)
            if on_disk[:len(rebuilt)] != rebuilt:
                os.pwrite(fd, rebuilt, 0)
                self._synced = False
            self._file_size = max(self._file_size, len(rebuilt))
            if on_disk.count(0, len(rebuilt)) != max(len(on_disk) - len(rebuilt), 0) or _holds_data(fd, seen,
                                                                                                     self._file_size):
                self.truncate_to_entries(self.entries)
            if keep_room:
                self.resize(self.configured_max_size)
            else:
                self.trim_to_valid_size()

    @_unless_retired
    def flush(self, *, sync: bool = True) -> None:
        """Write the pending entries into the file (other processes read them), and fsync it
        unless nothing changed since the last fsync (a flush before close and the close's own
        flush cost one fsync, and an index nobody wrote to none)."""
        if self.writable and not self._closed:
            if sync and (self._pending or not self._synced):
                with self._handle() as fd:
                    self._write_pending()
                    fsync(fd)
                self._synced = True
            else:
                self._write_pending()

    def close(self) -> None:
        """Trim and release the file (Kafka's AbstractIndex.close)."""
        if not self._closed:
            self.trim_to_valid_size()
            self._closed = True

    def close_handler(self) -> None:
        """Release the file without trimming (the files are about to be renamed or deleted)."""
        self._closed = True

    def rename_to(self, path: Path) -> None:
        os.rename(self.path, path)
        self.path = Path(path)

    def delete(self) -> None:
        self.close_handler()
        self.path.unlink(missing_ok=True)

    # -- searching
    def _slot_at_or_below(self, key: int) -> int:
        """Index of the largest entry whose key <= `key`, or -1 (Kafka's largestLowerBoundSlotFor)."""
        return bisect_right(self._keys, key) - 1

    def _slot_at_or_above(self, key: int) -> int:
        """Index of the smallest entry whose key >= `key`, or -1 (smallestUpperBoundSlotFor)."""
        slot = self._slot_at_or_below(key)
        if slot >= 0 and self._keys[slot] == key:
            # equal keys are possible only in a time index with duplicate timestamps; take the first
            while slot > 0 and self._keys[slot - 1] == key:
                slot -= 1
            return slot
        slot += 1
        return slot if slot < self.entries else -1

    def _relative(self, offset: int) -> int:
        relative = offset - self.base_offset
        if not 0 <= relative <= 0x7FFFFFFF:
            raise InvalidIndexOffsetError(
                f"{self.path}: offset {offset} cannot be stored relative to base offset {self.base_offset}")
        return relative

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path}, entries={self.entries}, max_entries={self.max_entries})"


def _holds_data(fd: int, start: int, end: int) -> bool:
    """Whether [start, end) of the file may hold data (not only a hole); True when the file
    system cannot tell (no SEEK_DATA)."""
    if start >= end:
        return False
    try:
        return os.lseek(fd, start, os.SEEK_DATA) < end
    except OSError as exc:
        return exc.errno != errno.ENXIO  # ENXIO: no data at or after `start`
