"""Walking the batches of a segment file (Kafka's FileRecords / FileLogInputStream).

A .log may end in a partial batch while it is being appended to or after a crash: the walk stops
there silently, as Kafka's FileLogInputStream does, except over bytes known to be whole batches
(`whole`: the broker's own segment up to the size it wrote), where a partial batch is damage. A
length field too small for any batch, or a magic other than 2, raises CorruptRecordError naming
the file and byte position. CRCs are not checked here; the caller decides (recovery checks every
batch, reads check none).
"""

from __future__ import annotations

import os
import struct
from typing import Iterator

from .batch import HEADER, HEADER_SIZE, LOG_OVERHEAD, MAGIC_OFFSET, BatchHeader, RecordBatch, read_header
from .errors import CorruptRecordError

_LENGTH = struct.Struct(">i")
MIN_LENGTH = 14  # Kafka: smaller than the smallest legacy message header is corrupt
DEFAULT_CHUNK = 4 * 1024 * 1024


def _check_length(length: int, source: str | None, position: int) -> int:
    if length < MIN_LENGTH:
        raise CorruptRecordError(f"record size {length} is smaller than the minimum record overhead "
                                 f"({MIN_LENGTH})", source=source, position=position)
    return length + LOG_OVERHEAD


def iter_file_headers(fd: int, start: int, end: int, *, source: str | None = None,
                      whole: bool = False) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each whole batch in [start, end), reading only the 61-byte headers.
    `whole`: [start, end) is known to hold whole batches only (the broker's own segment, up to
    the size it wrote), so a batch running past `end` is damage (CorruptRecordError), never a
    partial tail to stop at silently."""
    pos = start
    while end - pos >= (1 if whole else LOG_OVERHEAD):
        head = os.pread(fd, HEADER_SIZE, pos)
        if len(head) < LOG_OVERHEAD or end - pos < LOG_OVERHEAD:
            if whole:
                raise CorruptRecordError(f"{min(len(head), end - pos)} bytes where a batch should start "
                                         f"(the segment holds {end} bytes)", source=source, position=pos)
            return
        size = _check_length(_LENGTH.unpack_from(head, 8)[0], source, pos)
        if pos + size > end:
            if whole:
                raise CorruptRecordError(f"batch length {size - LOG_OVERHEAD} runs past the end of the segment's "
                                         f"{end} bytes", source=source, position=pos)
            return
        if len(head) < HEADER_SIZE:
            raise CorruptRecordError(f"batch of {size} bytes is shorter than a v2 header", source=source, position=pos)
        try:
            header = read_header(head)
        except CorruptRecordError as exc:
            raise exc.at(source=source, position=pos) from None
        yield pos, header
        pos += size


def iter_file_batches(fd: int, start: int, end: int, *, source: str | None = None,
                      chunk_size: int = DEFAULT_CHUNK) -> Iterator[RecordBatch]:
    """Each whole batch in [start, end) as a RecordBatch over its bytes (CRC not checked).
    Reads the file in chunks of about `chunk_size`, so a large segment is never all in memory."""
    pos = start
    buf = b""
    buf_start = start
    while end - pos >= LOG_OVERHEAD:
        rel = pos - buf_start
        if len(buf) - rel < LOG_OVERHEAD:
            buf, buf_start, rel = os.pread(fd, min(chunk_size, end - pos), pos), pos, 0
            if len(buf) < LOG_OVERHEAD:
                return
        size = _check_length(_LENGTH.unpack_from(buf, rel + 8)[0], source, pos)
        if pos + size > end:
            return
        if len(buf) - rel < size:
            buf, buf_start, rel = os.pread(fd, max(chunk_size, size), pos), pos, 0
            if len(buf) < size:
                return  # the file shrank under us: treat as a partial tail
        if size < HEADER_SIZE or buf[rel + MAGIC_OFFSET] != 2:
            magic = buf[rel + MAGIC_OFFSET] if size > MAGIC_OFFSET else None
            raise CorruptRecordError(f"unsupported batch (magic {magic}, {size} bytes); only v2 is written",
                                     source=source, position=pos)
        view = memoryview(buf)[rel : rel + size]
        yield RecordBatch(BatchHeader(*HEADER.unpack_from(view)), view, pos, source)
        pos += size
