"""Partitions opened through a real PartitionManager and given idempotent batches, for the tests of
stopping and starting a broker with many logs (tests/broker/test_clean_stop.py, test_start_opens.py)."""

from __future__ import annotations

from topiclake.broker.partitions import PartitionManager
from topiclake.segments.batch import Record, build_batch, read_header
from topiclake.segments.storage import StorageLayout


async def filled(layout: StorageLayout, topic: str, partitions: int, batches: int) -> tuple[PartitionManager, list]:
    """A manager with `partitions` open partitions of a new `topic`, `batches` one-record batches
    in each from an idempotent producer whose id is the partition's index."""
    manager = PartitionManager(layout)
    manager.create_topic(topic, partitions)
    await manager.open_many((topic, p) for p in range(partitions))
    parts = [await manager.get(topic, p) for p in range(partitions)]

    def append_all() -> None:
        for p, part in enumerate(parts):
            for seq in range(batches):
                data = build_batch([Record(0, 1000 + seq, None, f"{p}-{seq}".encode(), ())], base_offset=0,
                                   producer_id=p, producer_epoch=0, base_sequence=seq)
                part.append_batch(data, read_header(data))

    await manager.run_io(append_all)
    return manager, parts
