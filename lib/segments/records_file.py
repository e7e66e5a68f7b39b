"""Walk a log's bytes whatever their message format (v2 batches and legacy v0/v1 messages mix in
old topics: Kafka never rewrites old data on upgrade)."""

from __future__ import annotations

from typing import Iterator

from . import legacy
from .batch import CURRENT_MAGIC, LOG_OVERHEAD, MAGIC_OFFSET, RecordBatch, iter_batches
from .errors import CorruptRecordError

_LENGTH_END = LOG_OVERHEAD


def iter_entries(buf, *, start: int = 0, end: int | None = None, source: str | None = None,
                 allow_partial_tail: bool = False,
                 validate: bool = True) -> Iterator[RecordBatch | legacy.LegacyEntry]:
    """Yield each v2 RecordBatch or legacy top-level message in order.

    Legacy messages are always CRC-checked (their CRC covers what is decoded); `validate` controls
    the v2 CRC check, so a caller can still list batches with a bad CRC (dump-log's isValid).
    """
    view = memoryview(buf)
    end = len(view) if end is None else end
    pos = start
    while pos < end:
        if end - pos <= MAGIC_OFFSET:
            if allow_partial_tail:
                return
            raise CorruptRecordError(f"truncated entry: {end - pos} trailing bytes", source=source, position=pos)
        magic = view[pos + MAGIC_OFFSET]
        if magic == CURRENT_MAGIC:
            batch = next(iter_batches(view, start=pos, end=end, source=source,
                                      allow_partial_tail=allow_partial_tail, validate=validate), None)
            if batch is None:
                return
            yield batch
            pos += batch.size
        elif magic in (0, 1):
            entry = next(legacy.iter_entries(view, start=pos, end=end, source=source,
                                             allow_partial_tail=allow_partial_tail), None)
            if entry is None:
                return
            yield entry
            pos += entry.size
        else:
            raise CorruptRecordError(f"unknown magic {magic}", source=source, position=pos)
