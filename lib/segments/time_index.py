"""Kafka's time index (`.timeindex`): 12-byte entries of int64 timestamp + int32 relative offset.

An entry (T, O) means every record with a timestamp > T comes after offset O. Timestamps and
offsets never go backwards; an entry is added only when the timestamp grows. The last slot is
kept free (`is_full` = entries >= max_entries - 1) for the entry that roll/close appends with the
segment's largest timestamp, which is why a closed segment's last entry is its max timestamp.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator

from .batch import NO_TIMESTAMP
from .errors import CorruptRecordError
from .index import Index, IndexFullError, InvalidIndexOffsetError, dump_entries


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    timestamp: int
    offset: int


def dump_time_index(path, base_offset: int) -> Iterator[TimestampOffset]:
    """The entries of a .timeindex file up to the first empty slot (index.dump_entries), checked:
    timestamps grow (Kafka's tool calls one that does not "out of order"), offsets never go back
    and none is below the base offset."""
    def problem(entry: TimestampOffset, previous: TimestampOffset | None) -> str | None:
        if entry.offset < base_offset:
            return f"offset {entry.offset} is below the base offset {base_offset}"
        if previous is not None and entry.timestamp <= previous.timestamp:
            return f"timestamp {entry.timestamp} does not increase (the previous entry has {previous.timestamp})"
        if previous is not None and entry.offset < previous.offset:
            return f"offset {entry.offset} goes back (the previous entry has {previous.offset})"
        return None

    return dump_entries(path, TimeIndex.ENTRY, relative_offset=lambda e: e[1],
                        parse=lambda e: TimestampOffset(e[0], base_offset + e[1]), problem=problem)


class TimeIndex(Index):
    ENTRY = struct.Struct(">qi")  # timestamp, relative offset

    def is_full(self) -> bool:  # (entries >= max_entries - 1, without the properties: asked on every append)
        return len(self._keys) >= self.max_index_size // self.ENTRY.size - 1

    def entry(self, n: int) -> TimestampOffset:
        return TimestampOffset(self._keys[n], self.base_offset + self._values[n])

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or (NO_TIMESTAMP, base offset) when empty (Kafka's lastEntry)."""
        return self.entry(self.entries - 1) if self.entries else TimestampOffset(NO_TIMESTAMP, self.base_offset)

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> bool:
        """Add (timestamp, offset) if the timestamp is larger than the last one; True if added."""
        keys = self._keys
        if not skip_full_check and len(keys) >= self.max_index_size // 12 - 1:
            raise IndexFullError(f"{self.path}: attempt to append to a full time index ({self.entries} entries)")
        if keys:
            last_timestamp, last_relative = keys[-1], self._values[-1]
            if offset - self.base_offset < last_relative:
                raise InvalidIndexOffsetError(
                    f"{self.path}: attempt to append offset {offset} to the time index, smaller than the last "
                    f"offset {self.base_offset + last_relative}")
            if timestamp < last_timestamp:
                raise InvalidIndexOffsetError(
                    f"{self.path}: attempt to append timestamp {timestamp} to the time index, smaller than the "
                    f"last timestamp {last_timestamp}")
            if timestamp == last_timestamp:
                return False
        elif timestamp <= NO_TIMESTAMP:
            return False
        self._append(timestamp, self._relative(offset))
        return True

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """Largest entry with timestamp <= target, or (NO_TIMESTAMP, base offset)."""
        slot = self._slot_at_or_below(target_timestamp)
        return TimestampOffset(NO_TIMESTAMP, self.base_offset) if slot < 0 else self.entry(slot)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry for offsets >= `offset` (offsets grow with entries, so a scan from
        the end is enough)."""
        count = self.entries
        while count and self.base_offset + self._values[count - 1] >= offset:
            count -= 1
        self.truncate_to_entries(count)

    def sanity_check(self) -> None:
        if self._file_size % self.ENTRY.size:
            raise CorruptRecordError(f"time index file size {self._file_size} is not a multiple of "
                                     f"{self.ENTRY.size}", source=str(self.path))
