"""Batches as a leader writes them (offsets assigned, its epoch stamped), for the objectlog tests."""

from __future__ import annotations

from typing import Sequence

from topiclake.segments.batch import Record, build_batch


def batches(first_offset: int, count: int, *, epoch: int, per_batch: int = 2, tag: str = "v") -> bytes:
    """`count` batches of `per_batch` records from `first_offset`, stamped with `epoch`; values
    `<tag>-<offset>` so a reader can tell whose bytes it got."""
    offsets = range(first_offset, first_offset + count * per_batch)
    return keyed_batches(first_offset, [(b"k", f"{tag}-{o}".encode()) for o in offsets], epoch=epoch,
                         per_batch=per_batch)


def keyed_batches(first_offset: int, changes: Sequence[tuple[bytes | None, bytes | None]], *, epoch: int,
                  per_batch: int = 2) -> bytes:
    """`changes` (key, value; a None value is a tombstone) as batches of up to `per_batch` records
    from `first_offset`, stamped with `epoch`; timestamps 1_700_000_000_000 + offset."""
    out = bytearray()
    for start in range(0, len(changes), per_batch):
        offset = first_offset + start
        records = [Record(offset + i, 1_700_000_000_000 + offset + i, key, value)
                   for i, (key, value) in enumerate(changes[start:start + per_batch])]
        out += build_batch(records, base_offset=offset, partition_leader_epoch=epoch)
    return bytes(out)


def values(read_batches) -> list[tuple[int, bytes]]:
    return [(record.offset, record.value) for batch in read_batches for record in batch.records()]
