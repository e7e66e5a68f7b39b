"""A Produce response encoded straight from the handler's per-partition answers, versions 3 to 13
(issue 33).

librdkafka sends one partition per Produce request, so a producer spread over 2,000 partitions
is thousands of small requests a second; kio's objects and writer cost ~25 us of each (more than
the append itself). Here the answer is a few struct.packs; the bytes are the ones kio writes
(tests/broker/test_produce_response.py holds them equal for every version). The layout, per
Kafka's ProduceResponse.json:

    [topic] | throttle_time_ms i32
    topic: name (v3-12) or topic_id (v13+) | [partition]
    partition: index i32, error_code i16, base_offset i64, log_append_time_ms i64,
               log_start_offset i64 (v5+), [record_errors: batch_index i32,
               message nullable string] (v8+), error_message nullable string (v8+)

From v9 on (flexible) arrays and strings carry unsigned-varint lengths plus one, and every struct
ends in a tagged-field buffer (empty: no current_leader or node_endpoints, this broker leads).
"""

from __future__ import annotations

import datetime
from struct import Struct
from typing import Any

from topiclake.segments.varint import encode_unsigned_varint as _uvarint

from .encoded import PreEncoded

_I16 = Struct(">h")
_I32 = Struct(">i")
_PARTITION = Struct(">ihqq")  # index, error_code, base_offset, log_append_time_ms
_I64 = Struct(">q")
_NULL_STRING = b"\xff\xff"
# a stored batch (v5+): index, error_code, base_offset, log_append_time_ms, log_start_offset
_STORED = Struct(">ihqqq")
# What follows a stored batch's fields from v8 on: no record errors, no error message (and, when
# flexible, the partition's empty tagged fields): the same bytes for every such partition.
_STORED_TAIL_FLEXIBLE = b"\x01\x00\x00"
_STORED_TAIL_V8 = b"\x00\x00\x00\x00" + _NULL_STRING


def _string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else _NULL_STRING
    data = value.encode()
    return (_uvarint(len(data) + 1) if flexible else _I16.pack(len(data))) + data


def _length(count: int, flexible: bool) -> bytes:
    return _uvarint(count + 1) if flexible else _I32.pack(count)


def produce_response(version: int, topics: list[tuple[Any, list[dict]]], throttle_ms: int) -> PreEncoded:
    """`topics`: per topic, its key (name, or UUID from v13) and its partitions' answers in order,
    each a dict of index, error_code, base_offset, log_append_time_ms (-1: none),
    log_start_offset, record_errors ((batch_index, message) pairs) and error_message."""
    flexible = version >= 9
    buf = bytearray(_length(len(topics), flexible))
    errors: dict[int, int] = {}
    for key, parts in topics:
        if version >= 13:
            buf += key.bytes
        else:
            buf += _string(key, flexible)
        buf += _length(len(parts), flexible)
        stored_tail = _STORED_TAIL_FLEXIBLE if flexible else _STORED_TAIL_V8 if version >= 8 else b""
        for p in parts:
            code = p["error_code"] + 0  # an IntEnum's hash is a Python-level call: a plain int
            errors[code] = errors.get(code, 0) + 1
            if code == 0 and version >= 5 and not p["record_errors"] and p["error_message"] is None:
                # the usual partition in one pack (many a request at 100 partitions and more)
                buf += _STORED.pack(p["index"], 0, p["base_offset"], p["log_append_time_ms"], p["log_start_offset"])
                buf += stored_tail
                continue
            buf += _PARTITION.pack(p["index"], code, p["base_offset"], p["log_append_time_ms"])
            if version >= 5:
                buf += _I64.pack(p["log_start_offset"])
            if version >= 8:
                record_errors = p["record_errors"]
                buf += _length(len(record_errors), flexible)
                for batch_index, message in record_errors:
                    buf += _I32.pack(batch_index) + _string(message, flexible)
                    if flexible:
                        buf += b"\x00"
                buf += _string(p["error_message"], flexible)
            if flexible:
                buf += b"\x00"  # the partition's tagged fields
        if flexible:
            buf += b"\x00"  # the topic's
    tail = b"\x00" if flexible else b""  # the response's tagged fields, after throttle_time_ms
    return PreEncoded(datetime.timedelta(milliseconds=throttle_ms), flexible, (tail,) if tail else (), errors,
                      before_throttle=(bytes(buf),))
