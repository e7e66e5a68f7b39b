"""Kafka's producer-state snapshot (`<offset>.snapshot`, ProducerStateManager.writeSnapshot).

    int16  version = 1
    uint32 crc       CRC-32C of everything after this field
    int32  count
    count x (int64 producerId, int16 epoch, int32 lastSequence, int64 lastOffset,
             int32 offsetDelta, int64 timestamp, int32 coordinatorEpoch, int64 currentTxnFirstOffset)

The file name is the offset the snapshot is valid up to (exclusive: the log end offset when it
was taken), so a partition opening can load it and replay only the batches from that offset on
instead of the whole log. An entry describes the producer's LAST batch only (lastOffset = -1
when its only entry is a marker); currentTxnFirstOffset (-1 if none) brings back the
transactions open at the snapshot point, which hold the last stable offset.

Kafka deletes a snapshot that fails to parse and falls back to an older one (or the log); so
does the broker here: every problem raises CorruptRecordError, never a partial list.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import crc32c

from . import filenames
from .atomic import atomic_write, read_small
from .errors import CorruptRecordError

VERSION = 1
NO_OFFSET = -1
_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_CRC_END = 6  # version + crc: the CRC covers what follows
ENTRY = struct.Struct(">qhiqiqiq")


@dataclass(frozen=True, slots=True)
class ProducerSnapshotEntry:
    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int  # offset of the producer's last data record, -1 if none
    offset_delta: int  # last_offset - first offset of that last batch
    timestamp: int
    coordinator_epoch: int = -1
    current_txn_first_offset: int = NO_OFFSET  # first offset of its open transaction, -1 if none

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta

    @property
    def first_sequence(self) -> int:
        """Kafka's decrementSequence(lastSequence, offsetDelta): sequences wrap at 2^31."""
        if self.last_sequence < 0:
            return self.last_sequence
        return (self.last_sequence - self.offset_delta) % (1 << 31)


def encode_snapshot(entries: list[ProducerSnapshotEntry]) -> bytes:
    body = struct.pack(">i", len(entries)) + b"".join(
        ENTRY.pack(e.producer_id, e.epoch, e.last_sequence, e.last_offset, e.offset_delta, e.timestamp,
                   e.coordinator_epoch, e.current_txn_first_offset) for e in entries)
    return struct.pack(">hI", VERSION, crc32c.crc32c(body)) + body


def decode_snapshot(data: bytes, *, source: str = "producer snapshot") -> list[ProducerSnapshotEntry]:
    """The entries of a snapshot file's bytes; CorruptRecordError on a wrong version or CRC, a
    truncated file or trailing bytes."""
    if len(data) < _HEAD.size:
        raise CorruptRecordError(f"truncated producer snapshot: {len(data)} bytes, the header needs {_HEAD.size}",
                                 source=source, position=0)
    version, crc, count = _HEAD.unpack_from(data)
    if version != VERSION:
        raise CorruptRecordError(f"unknown producer snapshot version {version} (expected {VERSION})",
                                 source=source, position=0)
    computed = crc32c.crc32c(memoryview(data)[_CRC_END:])
    if crc != computed:
        raise CorruptRecordError(f"producer snapshot CRC mismatch: stored {crc:#010x}, computed {computed:#010x}",
                                 source=source, position=2)
    expected = _HEAD.size + max(count, 0) * ENTRY.size
    if count < 0 or len(data) != expected:
        raise CorruptRecordError(f"producer snapshot declares {count} entries ({expected} bytes) but has "
                                 f"{len(data)} bytes", source=source, position=_HEAD.size)
    return [ProducerSnapshotEntry(*fields) for fields in ENTRY.iter_unpack(memoryview(data)[_HEAD.size:])]


def read_snapshot(path: str | Path) -> list[ProducerSnapshotEntry]:
    return decode_snapshot(read_small(path), source=str(path))


def write_snapshot(directory: str | Path, offset: int, entries: list[ProducerSnapshotEntry], *,
                   sync_dir: bool = True) -> Path:
    """Write `<offset>.snapshot` atomically (temp + fsync + rename); returns its path.
    `sync_dir=False`: the caller fsyncs the directory later (atomic_write)."""
    path = filenames.snapshot_file(Path(directory), offset)
    atomic_write(path, encode_snapshot(entries), sync_dir=sync_dir)
    return path


def list_snapshots(directory: str | Path, names: Iterable[str] | None = None) -> dict[int, Path]:
    """offset -> path of every regular `.snapshot` file, sorted by offset (among `names`, the
    directory's listing if the caller has it)."""
    found = {}
    for name in os.listdir(directory) if names is None else names:  # names: most files are no snapshot
        if name.endswith(filenames.SNAPSHOT_SUFFIX):
            parsed = filenames.parse_name(name)
            if parsed is not None and parsed.kind == filenames.SNAPSHOT_SUFFIX and not parsed.transient:
                found[parsed.base_offset] = filenames.child(directory, name)
    return dict(sorted(found.items()))


def delete_snapshots(directory: str | Path, *, above: int | None = None, below: int | None = None,
                     keep_newest: int | None = None, names: Iterable[str] | None = None) -> list[int]:
    """Remove snapshots with offset > `above` (a truncated log: they describe offsets that are
    gone), offset < `below` (retention: their batches are gone) and all but the `keep_newest`
    newest ones. Returns the offsets removed. `names`: the directory's listing, if the caller has it."""
    snapshots = list_snapshots(directory, names)
    offsets = list(snapshots)
    doomed = {o for o in offsets if (above is not None and o > above) or (below is not None and o < below)}
    if keep_newest is not None:
        doomed.update(offsets[: max(len(offsets) - keep_newest, 0)])
    for offset in sorted(doomed):
        snapshots[offset].unlink(missing_ok=True)
    return sorted(doomed)
