"""Batches as a leader writes them (offsets assigned, its epoch stamped), for the objectlog tests."""

from __future__ import annotations

from topiclake.segments.batch import Record, build_batch


def batches(first_offset: int, count: int, *, epoch: int, per_batch: int = 2, tag: str = "v") -> bytes:
    """`count` batches of `per_batch` records from `first_offset`, stamped with `epoch`; values
    `<tag>-<offset>` so a reader can tell whose bytes it got."""
    out = bytearray()
    offset = first_offset
    for _ in range(count):
        records = [Record(offset + i, 1_700_000_000_000 + offset + i, b"k", f"{tag}-{offset + i}".encode())
                   for i in range(per_batch)]
        out += build_batch(records, base_offset=offset, partition_leader_epoch=epoch)
        offset += per_batch
    return bytes(out)


def values(read_batches) -> list[tuple[int, bytes]]:
    return [(record.offset, record.value) for batch in read_batches for record in batch.records()]
