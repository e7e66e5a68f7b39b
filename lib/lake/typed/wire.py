"""Confluent's wire format, columnar: magic byte 0, a 4-byte big-endian schema id, the payload
(Protobuf adds an array of message indexes, zig-zag varints, between the id and the payload).

`split(values)` reads the prefix of every value of a binary column with numpy, no per-record
Python object: the schema id per row, or why the row is not in the wire format.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

PREFIX = 5
MAGIC = 0

# Row states besides a schema id (>= 0).
NULL = -1  # a null value (a tombstone): typed columns are null, the row is kept
SHORT = -2  # fewer bytes than the prefix
BAD_MAGIC = -3  # a first byte other than 0


def buffers(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(int32 offsets[n + 1], uint8 data) of a binary array, its slice offset applied."""
    bufs = values.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32)[values.offset:values.offset + len(values) + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return offsets, data


def split(values: pa.Array) -> np.ndarray:
    """Per row: the schema id (>= 0), or NULL, SHORT or BAD_MAGIC."""
    values = values.cast(pa.binary()) if values.type != pa.binary() else values
    n = len(values)
    if n == 0:
        return np.zeros(0, np.int64)
    offsets, data = buffers(values)
    starts, lengths = offsets[:-1].astype(np.int64), np.diff(offsets)
    if len(data) == 0:
        data = np.zeros(1, np.uint8)
    # One gather of every value's first PREFIX bytes; a short value's may reach past the data:
    # clipped (the row is SHORT anyway).
    at = np.minimum(starts[:, None] + np.arange(PREFIX), len(data) - 1)
    prefix = data[at]
    ids = prefix[:, 1:].copy().view(">u4").ravel().astype(np.int64)
    out = np.where(lengths < PREFIX, SHORT, ids)
    out = np.where((lengths > 0) & (prefix[:, 0] != MAGIC), BAD_MAGIC, out)
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    return np.where(valid, out, NULL)


def strip(values: pa.Array, skip: int) -> pa.Array:
    """The values without their first `skip` bytes (every value has at least that many), in one
    vectorized copy."""
    if skip == 0:
        return values
    offsets, data = buffers(values)
    n = len(values)
    starts = offsets[:-1].astype(np.int64)
    keep = np.ones(len(data), dtype=bool)
    if n:
        drop = (starts[:, None] + np.arange(skip)[None, :]).ravel()
        keep[drop] = False
        keep[: offsets[0]] = False
        keep[offsets[-1]:] = False
    new_offsets = (offsets - offsets[0] - skip * np.arange(n + 1)).astype(np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(new_offsets.tobytes()),
                                                  pa.py_buffer(data[keep].tobytes())])


def first_bytes(values: pa.Array) -> np.ndarray:
    """The first byte of each value (0 for empty or null ones): for error messages."""
    offsets, data = buffers(values)
    padded = np.concatenate([data, np.zeros(1, np.uint8)])
    return padded[offsets[:-1]]


MALFORMED = -1  # message_indexes: not a valid index array
NESTED = -2  # message_indexes: a path of more than one index (see the returned dict)


def message_indexes(values: pa.Array) -> tuple[np.ndarray, dict[int, tuple[int, ...] | None], np.ndarray]:
    """Protobuf: per value, the message index after the schema id and where the payload starts.
    Returns (the top-level message index, or MALFORMED / NESTED; {row: path} for the NESTED and
    MALFORMED rows; the payload's start within each value). The one-byte forms ([0] as a single
    0, [i] as 2, 2i) are read with numpy; only other prefixes walk their varints."""
    offsets, data = buffers(values)
    padded = np.concatenate([data, np.zeros(2, np.uint8)])
    starts = offsets[:-1].astype(np.int64) + PREFIX
    ends = offsets[1:].astype(np.int64)
    b0, b1 = padded[starts].astype(np.int64), padded[starts + 1].astype(np.int64)
    index = np.full(len(values), MALFORMED, dtype=np.int64)
    payload = starts.copy()
    first = (b0 == 0) & (starts < ends)
    single = (b0 == 2) & (b1 < 0x80) & (b1 % 2 == 0) & (starts + 1 < ends) & ~first
    index[first], payload[first] = 0, starts[first] + 1
    index[single], payload[single] = b1[single] >> 1, starts[single] + 2
    other: dict[int, tuple[int, ...] | None] = {}
    for i in np.flatnonzero(~(first | single)):
        path, payload[i] = _walk(data, int(starts[i]), int(ends[i]))
        other[int(i)] = path
        if path is not None:
            index[i] = path[0] if len(path) == 1 else NESTED
    return index, other, payload - offsets[:-1]


def _walk(data: np.ndarray, at: int, end: int) -> tuple[tuple[int, ...] | None, int]:
    values = []
    count = None
    while count is None or len(values) < count:
        shift, raw = 0, 0
        while True:
            if at >= end or shift > 63:
                return None, at
            byte = int(data[at])
            at += 1
            raw |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        value = (raw >> 1) ^ -(raw & 1)
        if count is None:
            if value < 0 or value > 64:
                return None, at
            count = value
            if count == 0:
                return (0,), at
        else:
            if value < 0:
                return None, at
            values.append(value)
    return tuple(values), at
