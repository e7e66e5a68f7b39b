"""Kafka's aborted-transaction index (`<base>.txnindex`, TransactionIndex / AbortedTxn).

34-byte big-endian entries: int16 version = 0, int64 producerId, int64 firstOffset, int64
lastOffset (the ABORT marker), int64 lastStableOffset (the LSO once that transaction ended).
One entry per ABORT marker, in the index of the segment that holds the marker, in marker order.
The file exists only for segments with an aborted transaction.

A partition opening reads these instead of walking every batch for markers. Kafka appends in
place; topiclake rewrites the (small: aborts are rare) file atomically, so a crash never leaves
a torn entry. Reading checks what Kafka's iterator and sanityCheck do: whole entries, version 0,
and no marker below the segment's base offset (CorruptRecordError otherwise).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from .atomic import atomic_write, read_small
from .errors import CorruptRecordError
from .txn_metadata import AbortedTxn

VERSION = 0
ENTRY = struct.Struct(">hqqqq")


@dataclass(frozen=True, slots=True)
class TxnIndexEntry:
    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int

    @property
    def aborted(self) -> AbortedTxn:
        return AbortedTxn(self.first_offset, self.producer_id, self.last_offset)


def encode_txn_index(entries: list[TxnIndexEntry]) -> bytes:
    return b"".join(ENTRY.pack(VERSION, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)
                    for e in entries)


def decode_txn_index(data: bytes, *, base_offset: int | None = None, source: str = "txnindex") -> list[TxnIndexEntry]:
    if len(data) % ENTRY.size:
        raise CorruptRecordError(f"truncated transaction index: {len(data)} bytes is not a multiple of "
                                 f"{ENTRY.size}", source=source, position=len(data) - len(data) % ENTRY.size)
    entries = []
    for n, (version, producer_id, first, last, lso) in enumerate(ENTRY.iter_unpack(data)):
        if version != VERSION:
            raise CorruptRecordError(f"unknown aborted transaction version {version}", source=source,
                                     position=n * ENTRY.size)
        if base_offset is not None and last < base_offset:
            raise CorruptRecordError(f"aborted transaction marker offset {last} is below the segment's base "
                                     f"offset {base_offset}", source=source, position=n * ENTRY.size)
        entries.append(TxnIndexEntry(producer_id, first, last, lso))
    return entries


def read_txn_index(path: str | Path, base_offset: int | None = None) -> list[TxnIndexEntry]:
    """The entries of a .txnindex file; [] when the segment has none (no file)."""
    try:
        data = read_small(path)
    except FileNotFoundError:
        return []
    return decode_txn_index(data, base_offset=base_offset, source=str(path))


def write_txn_index(path: str | Path, entries: list[TxnIndexEntry]) -> None:
    """Replace the file atomically; no entries removes it (Kafka creates it with the first one)."""
    if entries:
        atomic_write(path, encode_txn_index(entries))
    else:
        Path(path).unlink(missing_ok=True)


def append_txn_index(path: str | Path, entry: TxnIndexEntry) -> None:
    """Add one entry after those already in the file."""
    write_txn_index(path, read_txn_index(path) + [entry])
