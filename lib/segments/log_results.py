"""What `Log` hands back: an append's offsets (`AppendResult`), a read's bounds in a segment file
(`ReadResult`, for sendfile), a segment's summary (`SegmentInfo`)."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from .errors import CorruptRecordError


class AppendResult(NamedTuple):  # a named tuple: one per produced batch, 4x cheaper to make than a dataclass
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1 unless message.timestamp.type=LogAppendTime
    position: int  # where the first batch starts in the segment
    segment_base_offset: int
    record_count: int
    size: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Whole batches [position, position + size) of `file` (an open .log, for sendfile) holding
    offsets [first_offset, next_offset). size == 0 means nothing to read (offset == LEO).

    The bytes are not read: `read` only finds their bounds. Holding the result keeps `file` open,
    so the bytes stay readable (and sendfile-able) even after a maintenance swap replaced the
    segment: the open descriptor keeps the old inode alive until the result is dropped."""

    file: io.FileIO | None
    path: Path | None
    position: int
    size: int
    first_offset: int
    next_offset: int
    high_watermark: int
    log_start_offset: int

    def to_bytes(self) -> bytes:
        if self.size == 0:
            return b""
        data = os.pread(self.file.fileno(), self.size, self.position)
        if len(data) != self.size:  # the log only grows under a reader; a short read is a bug or damage
            raise CorruptRecordError(f"short read: {len(data)} of {self.size} bytes", source=str(self.path),
                                     position=self.position)
        return data


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    base_offset: int
    next_offset: int
    size: int
    largest_timestamp: int
    path: Path
