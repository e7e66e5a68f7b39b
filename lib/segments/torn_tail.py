"""The end of the active segment: an append in progress (or torn by a crash), or damage?

A reader of the active segment may meet a batch that runs past the end of the file. Kafka's
FileLogInputStream stops there silently: the batch may be an append still being written (or cut
by a crash, which the broker's recovery truncates). But a damaged length field (0x7fffffff) or a
file cut short in its middle looks the same, and stopping silently there hides every batch after
it: a job commits up to it and then finds "nothing new" forever.

So the stop is judged (`judge_tail`). An append in progress (or torn by a crash) is always the
last bytes of the file, written by a broker that is running (or crashed). It is damage when
- the batch claims more bytes than any segment can hold (positions in a segment are int32), or
- the partition holds the clean-shutdown marker: no broker is appending, and a clean shutdown
  (or the recovery at the start before it) leaves no partial batch, or
- a whole batch with a valid CRC starts after it in the file (appends are sequential: nothing is
  written after a batch still being written), or
- the broker indexed a batch at or after its position (an offset index entry is written after its
  batch's bytes: bytes there were once whole) and the file still does not hold the batch now
  (a batch that was merely being appended when the file was mapped is whole by now).
Otherwise it is a torn tail and the walk ends there, as before.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Iterator

import numpy as np

from .batch import CRC_OFFSET, LOG_OVERHEAD, MAGIC_OFFSET, MIN_LENGTH_FIELD, RecordBatch, compute_crc, iter_batches
from .errors import CorruptRecordError
from .filenames import CLEAN_SHUTDOWN_FILE, INDEX_SUFFIX, LOG_SUFFIX

MAX_SEGMENT_BYTES = 2**31 - 1  # a segment's positions are int32 (Kafka's segment.bytes is an int)
_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")


def batches_judging_tail(buf, *, start: int = 0, end: int | None = None, source: str | None = None,
                         validate: bool = False) -> Iterator[RecordBatch]:
    """`iter_batches` over the active segment's bytes, a partial tail tolerated only when
    `judge_tail` finds it is one (CorruptRecordError otherwise)."""
    end = len(buf) if end is None else end
    pos = start
    for batch in iter_batches(buf, start=start, end=end, source=source, allow_partial_tail=True, validate=validate):
        pos = (pos if batch.position is None else batch.position) + batch.size
        yield batch
    judge_tail(buf, pos, end, source)


def judge_tail(buf, pos: int, end: int, source: str | None) -> None:
    """The walk of the active segment stopped at `pos`, before `end`: raise CorruptRecordError
    unless the bytes there are a torn (or in-progress) append."""
    if pos >= end:
        return
    declared = _LENGTH.unpack_from(buf, pos + 8)[0] + LOG_OVERHEAD if end - pos >= LOG_OVERHEAD else None
    if declared is not None and pos + declared > MAX_SEGMENT_BYTES:
        raise CorruptRecordError(f"batch length {declared - LOG_OVERHEAD} runs past the end of any segment "
                                 f"({MAX_SEGMENT_BYTES} bytes)", source=source, position=pos)
    if source is not None and (Path(source).parent / CLEAN_SHUTDOWN_FILE).exists():
        raise CorruptRecordError(f"{_what(declared, end - pos)} runs past the end of the file ({end} bytes) of a "
                                 "partition shut down cleanly (no append can be in progress)",
                                 source=source, position=pos)
    following = next_valid_batch(buf, pos + 1, end)
    if following is not None:
        raise CorruptRecordError(f"{_what(declared, end - pos)} runs past the end of the file ({end} bytes), yet a "
                                 f"whole batch follows at position {following}: the bytes here are damaged",
                                 source=source, position=pos)
    if source is None:
        return
    indexed = last_indexed_position(source)
    if indexed is None or indexed < pos:
        return
    if declared is not None and _file_size(source) >= pos + declared:
        return  # an append in progress when the file was mapped: it is whole now
    raise CorruptRecordError(f"{_what(declared, end - pos)} runs past the end of the file ({end} bytes), yet the "
                             f"offset index holds a batch at position {indexed}: the bytes from here on are damaged "
                             "or cut short",
                             source=source, position=pos)


def _what(declared: int | None, left: int) -> str:
    return f"a batch of {declared} bytes" if declared is not None else f"{left} trailing bytes"


def next_valid_batch(buf, start: int, end: int | None = None) -> int | None:
    """The first position at or after `start` where a whole v2 batch with a valid CRC-32C starts
    and ends before `end` (found by its magic byte; run only where a walk stopped early), or None."""
    end = len(buf) if end is None else end
    pos = start + MAGIC_OFFSET
    while True:
        pos = buf.find(b"\x02", pos, end)
        if pos < 0:
            return None
        candidate = pos - MAGIC_OFFSET
        length = _LENGTH.unpack_from(buf, candidate + 8)[0]
        stop = candidate + LOG_OVERHEAD + length
        if length >= MIN_LENGTH_FIELD and stop <= end and \
                _CRC.unpack_from(buf, candidate + CRC_OFFSET)[0] == compute_crc(buf[candidate:stop]):
            return candidate
        pos += 1


def last_indexed_position(log_path: str | os.PathLike) -> int | None:
    """The largest batch position in the segment's offset index (None: no index, or no entry).
    The index is preallocated with zeros; its entries increase strictly."""
    path = str(log_path)
    if not path.endswith(LOG_SUFFIX):
        return None
    try:
        with open(path[: -len(LOG_SUFFIX)] + INDEX_SUFFIX, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    entries = np.frombuffer(data[: len(data) // 8 * 8], dtype=">i4").reshape(-1, 2)
    if len(entries) == 0:
        return None
    relative = entries[:, 0].astype(np.int64)
    steps = np.diff(relative) > 0
    valid = len(relative) if steps.all() else int(np.argmin(steps)) + 1
    positions = entries[:valid, 1]
    if valid == 1 and relative[0] == 0 and positions[0] == 0:
        return None  # one zero entry: an empty preallocated index (or the first batch at 0)
    return int(positions.max())


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
