"""The records of `__transaction_state`, in Kafka's exact byte layouts
(transaction-coordinator TransactionLogKey.json / TransactionLogValue.json).

Key:   int16 version (0) | TransactionalId STRING
Value: int16 version | struct, or null (a tombstone: the id expired, compaction forgets it)

    v0  ProducerId i64 | ProducerEpoch i16 | TransactionTimeoutMs i32 | TransactionStatus i8 |
        TransactionPartitions nullable ARRAY of (Topic STRING | PartitionIds ARRAY of i32) |
        TransactionLastUpdateTimestampMs i64 | TransactionStartTimestampMs i64
    v1  the same fields in flexible form (compact strings/arrays, a tag buffer after each
        partition entry) ending in tagged fields: 0 PreviousProducerId i64 (default -1),
        1 NextProducerId i64 (default -1), 2 ClientTransactionVersion i16 (default 0)

Kafka writes v0 until transaction.version 2 is enabled; so do we (`VALUE_VERSION`). Partitions
are null in the Empty state and an array otherwise (empty in Complete*), as Kafka writes them.
STRING = int16 length + UTF-8; ARRAY = int32 count (-1 null); compact forms use an unsigned
varint of length + 1 (0 null). Malformed input raises CorruptRecordError naming the field.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from topiclake.segments.batch import NO_PRODUCER_ID
from topiclake.segments.errors import CorruptRecordError
from topiclake.segments.varint import encode_unsigned_varint

from .state import TxnMetadata, TxnState

KEY_VERSION = 0
VALUE_VERSION = 0
HIGHEST_VALUE_VERSION = 1

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_TAG_PREV_PID, _TAG_NEXT_PID, _TAG_CLIENT_VERSION = 0, 1, 2


@dataclass(frozen=True, slots=True)
class TxnLogRecord:
    """One record of `__transaction_state`: the id's metadata, or None for a tombstone."""

    transactional_id: str
    metadata: TxnMetadata | None

    def key_bytes(self) -> bytes:
        return encode_key(self.transactional_id)

    def value_bytes(self) -> bytes | None:
        return encode_value(self.metadata)


# ----------------------------------------------------------------------------------- writing

class _Out:
    def __init__(self, flexible: bool):
        self.buf = bytearray()
        self.flexible = flexible

    def fixed(self, s: struct.Struct, v: int) -> None:
        self.buf += s.pack(v)

    def length(self, n: int, classic: struct.Struct) -> None:
        self.buf += encode_unsigned_varint(n + 1) if self.flexible else classic.pack(n)

    def string(self, v: str) -> None:
        raw = v.encode("utf-8")
        if len(raw) > 0x7FFF:
            raise ValueError(f"string of {len(raw)} bytes exceeds Kafka's int16 length")
        self.length(len(raw), _I16)
        self.buf += raw


def encode_key(transactional_id: str) -> bytes:
    out = _Out(False)
    out.fixed(_I16, KEY_VERSION)
    out.string(transactional_id)
    return bytes(out.buf)


def encode_value(m: TxnMetadata | None, version: int | None = None) -> bytes | None:
    """`version` None: v1 (flexible) when a tagged field is set (a rotated or rotating producer
    id, a transactions-v2 client), v0 otherwise, as Kafka picks by what it must keep."""
    if m is None:
        return None
    if version is None:
        tagged = (m.prev_producer_id != NO_PRODUCER_ID or m.next_producer_id != NO_PRODUCER_ID
                  or m.client_txn_version != 0)
        version = HIGHEST_VALUE_VERSION if tagged else VALUE_VERSION
    if version not in (0, 1):
        raise ValueError(f"TransactionLogValue version {version} does not exist (0 or 1)")
    if m.state is TxnState.EMPTY and m.partitions:
        raise ValueError(f"{m.describe()}: an Empty transaction cannot have partitions")
    out = _Out(flexible=version >= 1)
    out.fixed(_I16, version)
    out.fixed(_I64, m.producer_id)
    out.fixed(_I16, m.producer_epoch)
    out.fixed(_I32, m.timeout_ms)
    out.fixed(_I8, int(m.state))
    if m.state is TxnState.EMPTY:
        out.length(-1, _I32)
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(m.partitions):
            by_topic.setdefault(topic, []).append(partition)
        out.length(len(by_topic), _I32)
        for topic, ids in by_topic.items():
            out.string(topic)
            out.length(len(ids), _I32)
            for p in ids:
                out.fixed(_I32, p)
            if out.flexible:
                out.buf.append(0)  # the entry's (empty) tag buffer
    out.fixed(_I64, m.update_ms)
    out.fixed(_I64, m.start_ms)
    if out.flexible:
        tags = []
        if m.prev_producer_id != NO_PRODUCER_ID:
            tags.append((_TAG_PREV_PID, _I64.pack(m.prev_producer_id)))
        if m.next_producer_id != NO_PRODUCER_ID:
            tags.append((_TAG_NEXT_PID, _I64.pack(m.next_producer_id)))
        if m.client_txn_version != 0:
            tags.append((_TAG_CLIENT_VERSION, _I16.pack(m.client_txn_version)))
        out.buf += encode_unsigned_varint(len(tags))
        for tag, data in tags:
            out.buf += encode_unsigned_varint(tag) + encode_unsigned_varint(len(data)) + data
    return bytes(out.buf)


# ----------------------------------------------------------------------------------- reading

class _In:
    def __init__(self, data: bytes, what: str):
        self.buf = memoryview(data)
        self.pos = 0
        self.what = what
        self.flexible = False

    def fail(self, reason: str) -> CorruptRecordError:
        return CorruptRecordError(f"{self.what}: {reason}", position=self.pos)

    def take(self, n: int, field: str) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise self.fail(f"{field} needs {n} bytes, {len(self.buf) - self.pos} left")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def fixed(self, s: struct.Struct, field: str) -> int:
        return s.unpack(self.take(s.size, field))[0]

    def uvarint(self, field: str) -> int:
        result = shift = 0
        for _ in range(5):
            b = self.take(1, field)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
        raise self.fail(f"{field}: unsigned varint longer than 5 bytes")

    def length(self, classic: struct.Struct, field: str) -> int:
        return self.uvarint(field) - 1 if self.flexible else self.fixed(classic, field)

    def string(self, field: str) -> str:
        n = self.length(_I16, field)
        if n < 0:
            raise self.fail(f"{field}: null string")
        try:
            return str(self.take(n, field), "utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"{field}: invalid UTF-8 ({exc.reason})") from None

    def count(self, field: str, min_element: int) -> int:
        n = self.length(_I32, field)
        if n > (len(self.buf) - self.pos) // min_element:
            raise self.fail(f"{field}: {n} elements cannot fit in {len(self.buf) - self.pos} bytes")
        return n

    def tags(self, field: str) -> dict[int, memoryview]:
        out = {}
        for _ in range(self.uvarint(f"{field} count")):
            tag = self.uvarint(f"{field} tag")
            out[tag] = self.take(self.uvarint(f"{field} size"), f"{field} {tag}")
        return out

    def end(self) -> None:
        if self.pos != len(self.buf):
            raise self.fail(f"{len(self.buf) - self.pos} unexpected trailing bytes")


def decode_key(data: bytes | None) -> str:
    if data is None:
        raise CorruptRecordError("__transaction_state record without a key")
    r = _In(data, "__transaction_state key")
    version = r.fixed(_I16, "key version")
    if version != KEY_VERSION:
        raise r.fail(f"unknown TransactionLogKey version {version}")
    txn_id = r.string("transactional id")
    r.end()
    return txn_id


def decode_value(transactional_id: str, data: bytes | None) -> TxnMetadata | None:
    if data is None:
        return None
    r = _In(data, f"__transaction_state value of {transactional_id!r}")
    version = r.fixed(_I16, "value version")
    if version < 0 or version > HIGHEST_VALUE_VERSION:
        raise r.fail(f"unknown TransactionLogValue version {version}")
    r.flexible = version >= 1
    producer_id = r.fixed(_I64, "producer id")
    epoch = r.fixed(_I16, "producer epoch")
    timeout = r.fixed(_I32, "transaction timeout")
    raw_state = r.fixed(_I8, "transaction status")
    try:
        state = TxnState(raw_state)
    except ValueError:
        raise r.fail(f"unknown transaction status {raw_state}") from None
    partitions: set[tuple[str, int]] = set()
    n_topics = r.count("transaction partitions", 3 if r.flexible else 6)
    for _ in range(max(n_topics, 0)):
        topic = r.string("topic")
        for _ in range(r.count(f"partition ids of {topic}", 4)):
            partitions.add((topic, r.fixed(_I32, f"partition id of {topic}")))
        if r.flexible:
            r.tags(f"tagged fields of {topic}")
    update_ms = r.fixed(_I64, "last update timestamp")
    start_ms = r.fixed(_I64, "start timestamp")
    extra = {}
    if r.flexible:
        tags = r.tags("tagged fields")
        for tag, name, s in ((_TAG_PREV_PID, "prev_producer_id", _I64), (_TAG_NEXT_PID, "next_producer_id", _I64),
                             (_TAG_CLIENT_VERSION, "client_txn_version", _I16)):
            if tag in tags:
                if len(tags[tag]) != s.size:
                    raise r.fail(f"tagged field {tag} ({name}) has {len(tags[tag])} bytes, expected {s.size}")
                extra[name] = s.unpack(tags[tag])[0]
    r.end()
    return TxnMetadata(transactional_id, producer_id, epoch, timeout, state, frozenset(partitions), start_ms,
                       update_ms, **extra)


def decode_record(key: bytes | None, value: bytes | None) -> TxnLogRecord:
    txn_id = decode_key(key)
    return TxnLogRecord(txn_id, decode_value(txn_id, value))
