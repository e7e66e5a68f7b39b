"""A Fetch response encoded straight from the handler's slots, versions 4 to 18 (issue 33).

A consumer of 2,000 partitions names every one in every fetch (librdkafka sends no KIP-227
session; fetch_sessions.py serves the clients that do), and the answer names every one back:
built as kio objects and written by kio's writer, that was ~20 us a partition, ~40 ms a fetch,
most of a round trip. Here each partition is one
struct.pack and its records; the bytes are the ones kio writes (tests/broker/test_fetch_response.py
holds them equal for every version). The layout, per Kafka's FetchResponse.json:

    throttle_time_ms i32 | error_code i16, session_id i32 (v7+) | [topic]
    topic: name (v4-12) or topic_id (v13+) | [partition]
    partition: index i32, error_code i16, high_watermark i64, last_stable_offset i64,
               log_start_offset i64 (v5+), [aborted: producer_id i64, first_offset i64] (nullable),
               preferred_read_replica i32 (v11+), records (nullable bytes)

From v12 on (flexible) arrays, strings and bytes carry unsigned-varint lengths plus one, and every
struct ends in a tagged-field buffer (empty here: no diverging epoch, leader or snapshot to tell).
"""

from __future__ import annotations

import datetime
import struct
from typing import Any

from topiclake.segments.varint import encode_unsigned_varint as _uvarint

from .encoded import PreEncoded
from .wire import FileRegion

_I16_I32 = struct.Struct(">hi")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_PARTITION = struct.Struct(">ihqq")  # index, error_code, high_watermark, last_stable_offset
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")
NO_PREFERRED_READ_REPLICA = -1


class _Body:
    """Bytes in a bytearray, cut where a FileRegion goes (sent with sendfile, not copied)."""

    def __init__(self) -> None:
        self.chunks: list[bytes | FileRegion] = []
        self.buf = bytearray()

    def records(self, data: Any) -> None:
        if type(data) is FileRegion:
            self.chunks.append(bytes(self.buf))
            self.chunks.append(data)
            self.buf = bytearray()
        else:
            self.buf += data

    def finish(self) -> tuple:
        self.chunks.append(bytes(self.buf))
        return tuple(chunk for chunk in self.chunks if len(chunk))


def fetch_response(version: int, topics: dict[Any, list], throttle_ms: int, *, error: int = 0,
                   session_id: int = 0) -> PreEncoded:
    """`topics`: topic key (name, or UUID from v13) -> its partitions in order, each a tuple
    (index, error_code, high_watermark, last_stable_offset, log_start_offset, aborted, records):
    `aborted` None (read_uncommitted: a null array) or (producer_id, first_offset) pairs.
    `error`, `session_id` (v7+): the top-level error (a KIP-227 session's) and the session's id."""
    flexible = version >= 12
    body = _Body()
    buf = body.buf
    errors: dict[int, int] = {int(error): 1} if version >= 7 else {}  # the top-level error_code
    if version >= 7:
        buf += _I16_I32.pack(error, session_id)
    buf += _uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics))
    for key, parts in topics.items():
        buf = body.buf
        if version >= 13:
            buf += key.bytes
        else:
            name = key.encode()
            buf += _uvarint(len(name) + 1) if flexible else _I16.pack(len(name))
            buf += name
        buf += _uvarint(len(parts) + 1) if flexible else _I32.pack(len(parts))
        for index, error, high_watermark, stable, log_start, aborted, records in parts:
            errors[error] = errors.get(error, 0) + 1
            buf = body.buf
            buf += _PARTITION.pack(index, error, high_watermark, stable)
            if version >= 5:
                buf += _I64.pack(log_start)
            if aborted is None:
                buf += b"\x00" if flexible else b"\xff\xff\xff\xff"
            else:
                buf += _uvarint(len(aborted) + 1) if flexible else _I32.pack(len(aborted))
                for producer_id, first_offset in aborted:
                    buf += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        buf += b"\x00"
            if version >= 11:
                buf += _I32.pack(NO_PREFERRED_READ_REPLICA)
            buf += _uvarint(len(records) + 1) if flexible else _I32.pack(len(records))
            if records:
                body.records(records)
            if flexible:
                body.buf += b"\x00"  # the partition's tagged fields
        if flexible:
            body.buf += b"\x00"  # the topic's
    if flexible:
        body.buf += b"\x00"  # the response's (no node_endpoints: this broker is the leader)
    return PreEncoded(datetime.timedelta(milliseconds=throttle_ms), flexible, body.finish(), errors)
