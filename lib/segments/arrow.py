"""Kafka record batches -> pyarrow.Table, one row per record.

One public name, two implementations (aiokafka's pattern for its record kernel):

- native: the kernel walks the headers of runs of uncompressed v2 batches (`_native/batch_walk.c`:
  Python's per-header cost was a sixth of the decode); Python walks every other unit (compressed,
  legacy, anything unusual, with its own error text) and decompresses; then ONE call of the C
  kernel (`_native/decode.c`) checks the CRCs of uncompressed batches (SSE4.2, or AVX-512
  VPCLMULQDQ folding where the CPU has it; each just before its records are decoded, its bytes
  prefetched while the batch before it was decoded) and decodes the record sections of many
  batches straight into Arrow buffers, which become arrays without a copy. No per-record Python
  object. A compressed batch's CRC is checked (crc32c package) before it is
  inflated, and so is every batch's on a CPU without the crc32 instruction.
- reference: the same table built from batch.py's `Record` objects, slow and obviously right;
  the tests hold the native path to it.

`decode_to_arrow` is the native one unless the extension is missing or TOPICLAKE_NO_EXTENSIONS is
set. Legacy v0/v1 message sets (old data) always take the reference path; a file may switch
formats between batches, so the format is chosen per batch by its magic byte.

Cluster mode (`epochs`: the partition's leader-epoch history, as a task carries it): both twins
drop every batch that is not valid (`EpochHistory.is_valid` on its base offset, partition leader
epoch and last offset: a fenced leader's late write) while Python walks the headers, before its
CRC check, decompression or the kernel see it; the kernel only ever decodes valid batches, so the
per-record path stays columnar and untouched. Without `epochs` nothing is checked (today's path).
"""

from __future__ import annotations

import functools
import os
from array import array
from typing import Iterator, Sequence

import pyarrow as pa

from .batch import (ATTRIBUTES_OFFSET, COMPRESSION_MASK, CURRENT_MAGIC, HEADER_SIZE, MAGIC_OFFSET, NO_PRODUCER_EPOCH,
                    NO_PRODUCER_ID, Record, RecordBatch, TimestampType, iter_batches, read_header)
from .compression import Compression, decompress_into
from .errors import CorruptRecordError
from .leader_epochs import EpochHistory
from .legacy import LegacyEntry, iter_entries

try:
    if os.environ.get("TOPICLAKE_NO_EXTENSIONS"):
        raise ImportError("native extensions disabled by TOPICLAKE_NO_EXTENSIONS")
    from ._native import _decode
except ImportError:
    _decode = None  # type: ignore[assignment]  # None: no native kernel, checked before use

__all__ = ["RECORD_SCHEMA", "HAS_NATIVE", "decode_to_arrow", "decode_to_arrow_native", "decode_to_arrow_reference",
           "decode_record_batches"]

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
RECORD_SCHEMA = pa.schema([
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
    pa.field("timestamp_type", pa.int8()),  # 0 CreateTime, 1 LogAppendTime
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", pa.list_(HEADER_TYPE)),
    pa.field("producer_id", pa.int64()),
    pa.field("producer_epoch", pa.int16()),
    pa.field("is_transactional", pa.bool_()),
    pa.field("is_control", pa.bool_()),
])

HAS_NATIVE = _decode is not None
_KERNEL_CRC = HAS_NATIVE and _decode.HARDWARE_CRC32C  # the kernel checks uncompressed batches' CRCs
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_LEGACY_MAGICS = (0, 1)
_NO_PRODUCER = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)  # legacy messages have none
# Record-section bytes per native call: bounds the kernel's upper-bound allocations (and keeps
# Arrow's int32 offsets far from overflowing); a chunk becomes one pyarrow.RecordBatch.
_CHUNK_BYTES = 32 << 20
# lz4 and zstd sections are inflated into one reused buffer of _CHUNK_BYTES (no new bytes object
# and no fresh pages per batch), decoded each time it fills. A few are pooled between calls.
_INFLATE_POOL: list[bytearray] = []  # list.pop/append: atomic under the GIL, safe across threads
_INFLATE_POOLED = 2
# The kernel's output buffers come from Arrow's memory pool, which recycles pages between calls.
_allocate = functools.partial(pa.allocate_buffer, resizable=True)

Unit = RecordBatch | LegacyEntry


def decode_to_arrow_reference(buf, *, start: int = 0, end: int | None = None, source: str | None = None,
                              validate: bool = True, allow_partial_tail: bool = False,
                              min_offset: int | None = None, max_offset: int | None = None,
                              epochs: EpochHistory | None = None) -> pa.Table:
    """The reference twin of `decode_to_arrow`: the same table, from `Record` objects."""
    rows = _Rows(min_offset, max_offset, source)
    for unit in _iter_units(buf, start, end, source, allow_partial_tail, validate, epochs):
        rows.add(unit)
    return pa.Table.from_batches(rows.flush(), schema=RECORD_SCHEMA)


def decode_to_arrow_native(buf, *, start: int = 0, end: int | None = None, source: str | None = None,
                           validate: bool = True, allow_partial_tail: bool = False,
                           min_offset: int | None = None, max_offset: int | None = None,
                           epochs: EpochHistory | None = None) -> pa.Table:
    """Decode every record of the batches in `buf[start:end]` with the C kernel.

    Records whose offset is outside [min_offset, max_offset] are dropped (a task may start or end
    mid-batch), and with `epochs` the batches that are not valid (module docstring). Bad bytes
    raise CorruptRecordError naming `source` and the batch's position.
    """
    if _decode is None:
        raise RuntimeError("the native decoder is not available (not built, or TOPICLAKE_NO_EXTENSIONS set)")
    sections = _Sections(min_offset, max_offset, source, validate=validate)
    legacy = _Rows(min_offset, max_offset, source)
    out: list[pa.RecordBatch] = []
    view = memoryview(buf).cast("B")
    end = len(view) if end is None else min(end, len(view))
    # runs of plain batches are walked by the kernel; any other unit (and every unit when batches
    # are judged by epoch, or CRCs cannot be checked by the kernel) by Python's walkers, one at a time
    plain_runs = epochs is None and (_KERNEL_CRC or not validate)
    pos = start
    try:  # CRCs are checked by `sections`, not by the walk
        while pos < end:
            if plain_runs and (run_end := sections.add_plain_run(view, pos, end)) != pos:
                out += legacy.flush()  # before the run's rows: `sections` reach `out` only when flushed
                pos = run_end
            for unit in _iter_units(view, pos, end, source, allow_partial_tail, False, epochs):
                pos = unit.position + unit.size
                if isinstance(unit, LegacyEntry):
                    out += sections.flush()  # keep stream order across a format switch
                    legacy.add(unit)
                else:
                    out += legacy.flush()
                    sections.add(unit)
                if plain_runs and _looks_plain(view, pos, end):
                    break  # back to the kernel's walk
            else:
                break  # the walk reached `end`, or stopped at a partial tail
    except CorruptRecordError:
        sections.flush()  # a batch before the bad bytes fails first, as if checked before the walk went on
        raise
    out += sections.flush()
    out += legacy.flush()
    return pa.Table.from_batches(out, schema=RECORD_SCHEMA)


decode_to_arrow = decode_to_arrow_native if HAS_NATIVE else decode_to_arrow_reference


def decode_record_batches(batches: Sequence[RecordBatch], *, native: bool | None = None) -> pa.Table:
    """Every record of v2 batches already walked (and CRC-checked) by `batch.iter_batches`, in
    order, as `decode_to_arrow` would give them. The log cleaner reads each header once to judge
    the batch and then decodes only the batches whose records it must look at. Errors name each
    batch's own source and position. `native=None`: the kernel when it is available."""
    if native or (native is None and HAS_NATIVE):
        if _decode is None:
            raise RuntimeError("the native decoder is not available (not built, or TOPICLAKE_NO_EXTENSIONS set)")
        collector: _Sections | _Rows = _Sections(None, None, None, validate=False)  # checked by the walk
    else:
        collector = _Rows(None, None, None)
    for batch in batches:
        collector.add(batch)
    return pa.Table.from_batches(collector.flush(), schema=RECORD_SCHEMA)


def _iter_units(buf, start: int, end: int | None, source: str | None, allow_partial_tail: bool,
                validate: bool, epochs: EpochHistory | None = None) -> Iterator[Unit]:
    """Every v2 batch and legacy top-level message in order (with `epochs`, the valid ones only).
    batch.py and legacy.py each walk one format; this hands over between their walkers wherever
    the magic byte changes."""
    view = memoryview(buf).cast("B")
    end = len(view) if end is None else min(end, len(view))
    pos = start
    units: Iterator[Unit]
    while pos < end:
        legacy = _is_legacy(view, pos, end)
        if legacy:
            units = iter_entries(view, start=pos, end=end, source=source, allow_partial_tail=allow_partial_tail)
        else:  # with epochs, the CRC is checked below, once a batch is known to be valid
            units = iter_batches(view, start=pos, end=end, source=source, allow_partial_tail=allow_partial_tail,
                                 validate=validate and epochs is None)
        for unit in units:
            pos = unit.position + unit.size
            if epochs is None or _keep(unit, epochs, validate):
                yield unit
            if pos < end and _is_legacy(view, pos, end) != legacy:
                break
        else:
            return  # the walker reached `end` or stopped at a partial tail


def _keep(unit: Unit, epochs: EpochHistory, validate: bool) -> bool:
    """Whether a unit is part of the log (a legacy message has no epoch: valid only where no
    epoch owns its offsets); a kept v2 batch's CRC is checked when asked."""
    if isinstance(unit, LegacyEntry):
        return epochs.is_valid(unit.base_offset, None, unit.last_offset)
    h = unit.header
    if not epochs.is_valid(h.base_offset, h.partition_leader_epoch, h.last_offset):
        return False
    if validate:
        unit.ensure_valid()
    return True


def _is_legacy(view: memoryview, pos: int, end: int) -> bool:
    return end - pos > MAGIC_OFFSET and view[pos + MAGIC_OFFSET] in _LEGACY_MAGICS


def _looks_plain(view: memoryview, pos: int, end: int) -> bool:
    """Whether the unit at `pos` may start a plain run (v2, uncompressed: the codec bits in the low
    byte of the big-endian attributes); the kernel's walk decides."""
    return (end - pos >= HEADER_SIZE and view[pos + MAGIC_OFFSET] == CURRENT_MAGIC
            and not view[pos + ATTRIBUTES_OFFSET + 1] & COMPRESSION_MASK)


def _offset_bounds(min_offset: int | None, max_offset: int | None) -> tuple[int, int]:
    lo = _INT64_MIN if min_offset is None else max(min_offset, _INT64_MIN)
    hi = _INT64_MAX if max_offset is None else min(max_offset, _INT64_MAX)
    return lo, hi


class _Rows:
    """Column lists filled from `Record` objects: the reference path, and legacy data anywhere."""

    def __init__(self, min_offset: int | None, max_offset: int | None, source: str | None):
        self._lo, self._hi = _offset_bounds(min_offset, max_offset)
        self._source = source
        self._columns: dict[str, list] = {name: [] for name in RECORD_SCHEMA.names}

    def add(self, unit: Unit) -> None:
        if isinstance(unit, LegacyEntry):
            # v0 has no timestamp at all: null, not Kafka's -1 placeholder
            self._extend(unit.records(), unit.position, unit.timestamp_type, _NO_PRODUCER, False, False,
                         has_timestamp=unit.magic > 0)
        else:
            h = unit.header
            self._extend(unit.records(), unit.position, h.timestamp_type,
                         (h.producer_id, h.producer_epoch), h.is_transactional, h.is_control)

    def _extend(self, records: Sequence[Record], position: int, timestamp_type: TimestampType,
                producer: tuple[int, int], is_transactional: bool, is_control: bool, *,
                has_timestamp: bool = True) -> None:
        c = self._columns
        for r in records:
            # batch.py keeps Python's unbounded ints; the table (and the kernel) cannot
            if not (_INT64_MIN <= r.offset <= _INT64_MAX and _INT64_MIN <= r.timestamp <= _INT64_MAX):
                raise CorruptRecordError(f"record offset {r.offset} or timestamp {r.timestamp} does not fit "
                                         f"in 64 bits", source=self._source, position=position)
            if not self._lo <= r.offset <= self._hi:
                continue
            c["offset"].append(r.offset)
            c["timestamp"].append(r.timestamp if has_timestamp else None)
            c["timestamp_type"].append(int(timestamp_type))
            c["key"].append(r.key)
            c["value"].append(r.value)
            c["headers"].append([{"key": k, "value": v} for k, v in r.headers])
            c["producer_id"].append(producer[0])
            c["producer_epoch"].append(producer[1])
            c["is_transactional"].append(is_transactional)
            c["is_control"].append(is_control)

    def flush(self) -> list[pa.RecordBatch]:
        if not self._columns["offset"]:
            return []
        batch = pa.RecordBatch.from_pydict(self._columns, schema=RECORD_SCHEMA)
        self._columns = {name: [] for name in RECORD_SCHEMA.names}
        return [batch]


class _Sections:
    """v2 record sections collected for one native call, and the call itself."""

    def __init__(self, min_offset: int | None, max_offset: int | None, source: str | None, *, validate: bool):
        self._lo, self._hi = _offset_bounds(min_offset, max_offset)
        self._source = source
        self._validate = validate
        self._sections: list = []
        self._batches: list[RecordBatch | int] = []  # for errors: each one, or a plain run's position
        self._meta = array("q")
        self._bytes = 0
        self._done: list[pa.RecordBatch] = []
        self._inflate_buffer: bytearray | None = None
        self._inflated = 0  # bytes of it holding sections not decoded yet

    def add(self, batch: RecordBatch) -> None:
        h = batch.header
        crc = -1  # -1: the kernel does not check it
        if h.compression is Compression.NONE:
            section, records_start = batch.data, HEADER_SIZE  # the whole batch, a view: no copy
            if self._validate and _KERNEL_CRC:
                crc = h.crc
            elif self._validate:
                batch.ensure_valid()
        else:
            if self._validate:
                batch.ensure_valid()
            section, records_start = self._inflate(batch), 0
        size = len(section) - records_start
        if self._sections and self._bytes + size > _CHUNK_BYTES and not self._is_inflated(section):
            self._done += self._decode()  # (an inflated section is bounded by its buffer)
        self._sections.append(section)
        self._batches.append(batch)
        self._meta.extend((h.records_count, h.base_offset, h.base_timestamp, h.max_timestamp, h.attributes,
                           h.producer_id, h.producer_epoch, records_start, crc))
        self._bytes += size

    def flush(self) -> list[pa.RecordBatch]:
        done = self._done + self._decode()
        self._done = []
        if self._inflate_buffer is not None:
            if len(_INFLATE_POOL) < _INFLATE_POOLED:
                _INFLATE_POOL.append(self._inflate_buffer)
            self._inflate_buffer = None
        return done

    def add_plain_run(self, view: memoryview, pos: int, end: int) -> int:
        """Add the plain (uncompressed v2) batches from `pos` that the kernel's walk takes (none
        before anything else: Python's walkers judge that); where they end."""
        take_one = not self._sections
        check_crc = self._validate  # callers ask for a run only when the kernel can check CRCs
        next_pos, meta, spans = _decode.walk_plain(view, pos, end, _CHUNK_BYTES - self._bytes, take_one, check_crc)
        if next_pos == pos and not take_one:  # the next batch does not fit in this chunk: decode it first
            self._done += self._decode()
            next_pos, meta, spans = _decode.walk_plain(view, pos, end, _CHUNK_BYTES, True, check_crc)
        positions = array("q", spans)
        for i in range(0, len(positions), 2):
            position, size = positions[i], positions[i + 1]
            self._sections.append(view[position : position + size])
            self._batches.append(position)
            self._bytes += size - HEADER_SIZE
        self._meta.frombytes(meta)
        return next_pos

    def _inflate(self, batch: RecordBatch):
        """The batch's records section inflated into the reused buffer (decoding the sections
        already there first when it is full), or as new bytes where only `decompress` will do."""
        if self._inflate_buffer is None:
            self._inflate_buffer = _inflate_buffer()
        payload, codec = memoryview(batch.data)[HEADER_SIZE:], int(batch.header.compression)
        room = memoryview(self._inflate_buffer)[self._inflated:]
        size = decompress_into(codec, payload, room) if len(room) else None
        if size is None and self._inflated:
            self._done += self._decode()
            room = memoryview(self._inflate_buffer)
            size = decompress_into(codec, payload, room)
        if size is None:
            return batch.records_bytes()
        self._inflated += size
        return room[:size]

    def _batch(self, index: int) -> RecordBatch:
        """The index-th batch of this chunk (a plain run's is built from its bytes, for its error)."""
        batch = self._batches[index]
        if isinstance(batch, int):
            section = self._sections[index]
            return RecordBatch(read_header(section), section, batch, self._source)
        return batch

    def _is_inflated(self, section) -> bool:
        return isinstance(section, memoryview) and section.obj is self._inflate_buffer

    def _decode(self) -> list[pa.RecordBatch]:
        if not self._sections:
            return []
        try:
            out = _decode.decode_batches(self._sections, self._meta, self._lo, self._hi, _allocate)
        except _decode.DecodeError as exc:
            index, record_position, reason = exc.args
            batch = self._batch(index)
            if record_position < 0:  # its CRC: batch.py's own error, word for word
                batch.ensure_valid()
            source, position = batch.source or self._source, batch.position
            del batch  # the traceback keeps this frame: no view of the caller's buffer (an mmap) in it
            raise CorruptRecordError(f"{reason} (record at byte {record_position} of the records section)",
                                     source=source, position=position) from None
        finally:
            self._sections, self._batches, self._meta, self._bytes, self._inflated = [], [], array("q"), 0, 0
        return [_assemble(out)] if out["rows"] else []


def _inflate_buffer() -> bytearray:
    """A pooled buffer of _CHUNK_BYTES, or a new one."""
    try:
        buffer = _INFLATE_POOL.pop()
    except IndexError:
        return bytearray(_CHUNK_BYTES)
    return buffer if len(buffer) == _CHUNK_BYTES else bytearray(_CHUNK_BYTES)


def _assemble(out: dict) -> pa.RecordBatch:
    """Arrow arrays over the kernel's buffers (zero copy), trimmed from upper bounds to their use."""
    n = out["rows"]
    buffers = out["buffers"]
    for name, size in out["sizes"].items():
        buffers[name].resize(size)

    def fixed(type_: pa.DataType, name: str) -> pa.Array:
        return pa.Array.from_buffers(type_, n, [None, buffers[name]])

    def binary(type_: pa.DataType, length: int, prefix: str, nulls: int = 0) -> pa.Array:
        validity = buffers[f"{prefix}_valid"] if nulls else None
        return pa.Array.from_buffers(type_, length, [validity, buffers[f"{prefix}_offsets"],
                                                     buffers[f"{prefix}_data"]], null_count=nulls)

    headers = pa.StructArray.from_arrays(
        [binary(pa.string(), out["headers"], "header_key"),
         binary(pa.binary(), out["headers"], "header_value", out["header_value_nulls"])],
        fields=list(HEADER_TYPE))
    columns = [
        fixed(pa.int64(), "offset"),
        fixed(RECORD_SCHEMA.field("timestamp").type, "timestamp"),
        fixed(pa.int8(), "timestamp_type"),
        binary(pa.binary(), n, "key", out["key_nulls"]),
        binary(pa.binary(), n, "value", out["value_nulls"]),
        pa.Array.from_buffers(RECORD_SCHEMA.field("headers").type, n,
                              [None, buffers["header_offsets"]], children=[headers]),
        fixed(pa.int64(), "producer_id"),
        fixed(pa.int16(), "producer_epoch"),
        fixed(pa.bool_(), "is_transactional"),
        fixed(pa.bool_(), "is_control"),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=RECORD_SCHEMA)
