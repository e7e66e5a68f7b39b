"""Kafka's offset index (`.index`): 8-byte entries of int32 relative offset + int32 position.

Sparse: an entry (offset, position) says the batch whose last offset is `offset` starts at byte
`position` of the .log. A lookup returns the largest entry <= the target, from where a short
forward scan of batch headers finds the batch that holds the target.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from dataclasses import dataclass
from typing import Iterator

from .index import Index, IndexFullError, InvalidIndexOffsetError, dump_entries
from .errors import CorruptRecordError


@dataclass(frozen=True, slots=True)
class OffsetPosition:
    offset: int
    position: int


def dump_offset_index(path, base_offset: int) -> Iterator[OffsetPosition]:
    """The entries of an .index file up to the first empty slot (index.dump_entries), checked:
    offsets and positions grow from entry to entry, and none is below the base offset / 0."""
    def problem(entry: OffsetPosition, previous: OffsetPosition | None) -> str | None:
        if entry.offset < base_offset:
            return f"offset {entry.offset} is below the base offset {base_offset}"
        if entry.position < 0:
            return f"position {entry.position} is negative"
        if previous is not None and entry.offset <= previous.offset:
            return f"offset {entry.offset} does not increase (the previous entry has {previous.offset})"
        if previous is not None and entry.position <= previous.position:
            return f"position {entry.position} does not increase (the previous entry has {previous.position})"
        return None

    return dump_entries(path, OffsetIndex.ENTRY, relative_offset=lambda e: e[0],
                        parse=lambda e: OffsetPosition(base_offset + e[0], e[1]), problem=problem)


class OffsetIndex(Index):
    ENTRY = struct.Struct(">ii")  # relative offset, physical position

    @property
    def last_offset(self) -> int:
        """The last indexed offset, or the base offset when empty."""
        return self.base_offset + self._keys[-1] if self.entries else self.base_offset

    def entry(self, n: int) -> OffsetPosition:
        return OffsetPosition(self.base_offset + self._keys[n], self._values[n])

    def append(self, offset: int, position: int) -> None:
        keys = self._keys
        if len(keys) >= self.max_index_size // 8:
            raise IndexFullError(f"{self.path}: attempt to append offset {offset} to a full index "
                                 f"({self.entries} entries)")
        relative = offset - self.base_offset
        if keys and relative <= keys[-1]:
            raise InvalidIndexOffsetError(
                f"{self.path}: attempt to append offset {offset} at entry {self.entries}, not larger than "
                f"the last offset appended ({self.last_offset})")
        self._append(self._relative(offset), position)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """Largest entry with offset <= target, or (base offset, 0) if there is none."""
        slot = self._slot_at_or_below(target_offset - self.base_offset)
        return OffsetPosition(self.base_offset, 0) if slot < 0 else self.entry(slot)

    def entry_at_or_below_position(self, position: int) -> OffsetPosition | None:
        """The entry with the largest position <= `position` (positions grow with offsets), or
        None: where a read that must end by `position` can start scanning batch headers."""
        values = self._values
        slot = bisect_right(values, position) - 1
        return None if slot < 0 else self.entry(slot)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry for offsets >= `offset` (Kafka's truncateTo)."""
        self.truncate_to_entries(self._slot_at_or_below(offset - self.base_offset - 1) + 1)

    def sanity_check(self) -> None:
        if self._file_size % self.ENTRY.size:
            raise CorruptRecordError(f"index file size {self._file_size} is not a multiple of "
                                     f"{self.ENTRY.size}", source=str(self.path))
        if self.entries and self.last_offset < self.base_offset:
            raise CorruptRecordError(f"last offset {self.last_offset} is below the base offset "
                                     f"{self.base_offset}", source=str(self.path))
