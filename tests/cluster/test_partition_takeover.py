"""A partition led in cluster mode (PartitionManager.take_over, Partition.confirm): what a leader
acknowledges once a newer leader claimed the partition in storage. Real logs in a temporary
root; the newer leader is a second PartitionManager, as a second broker on the same root."""

from __future__ import annotations

import asyncio

import pytest

from topiclake.broker.handlers.produce import _append
from topiclake.broker.partitions import PartitionManager
from topiclake.broker.producer_state import Duplicate
from topiclake.segments.batch import Record, build_batch, read_header
from topiclake.segments.leader_fence import FencedLeaderError
from topiclake.segments.storage import StorageLayout


def idempotent_batch(sequence: int, value: bytes) -> bytes:
    return build_batch([Record(0, 1_700_000_000_000, None, value, ())], base_offset=0, producer_id=7,
                       producer_epoch=0, base_sequence=sequence)


def test_a_fenced_append_is_never_acknowledged_not_even_when_retried(tmp_path):
    async def scenario() -> None:
        old, new = PartitionManager(StorageLayout(tmp_path)), PartitionManager(StorageLayout(tmp_path))
        old.create_topic("t", 1)
        try:
            part = await old.take_over("t", 0, 0)
            first = idempotent_batch(0, b"acknowledged")
            assert (await old.run_io(_append, part, first, read_header(first))).first_offset == 0
            assert part.high_watermark == 1

            await new.take_over("t", 0, 1)  # a newer leader: epoch 1 claimed, the log recovered
            late = idempotent_batch(1, b"written after the takeover")
            with pytest.raises(FencedLeaderError):
                await old.run_io(_append, part, late, read_header(late))
            assert part.high_watermark == 1
            # The producer retries the same batch: its sequence is in the old leader's producer
            # state (it was appended before the check failed), but it must not be acknowledged.
            assert isinstance(part.producers.check(read_header(late)), Duplicate)
            with pytest.raises(FencedLeaderError):
                await old.run_io(_append, part, late, read_header(late))
            # An earlier, confirmed batch retried is still answered with its offsets.
            assert (await old.run_io(_append, part, first, read_header(first))).first_offset == 0
        finally:
            await old.close()
            await new.close()

    asyncio.run(scenario())


def test_takeovers_of_many_partitions_overlap(tmp_path):
    """They run on their own pool, not one after another on the writer thread."""
    async def scenario() -> list[str]:
        manager = PartitionManager(StorageLayout(tmp_path))
        manager.create_topic("many", 24)
        threads = set()
        original = manager.topic

        def recording(name, *, fresh=False):
            import threading
            threads.add(threading.current_thread().name)
            return original(name, fresh=fresh)

        manager.topic = recording
        try:
            parts = await asyncio.gather(*(manager.take_over("many", p, 0) for p in range(24)))
            assert [p.leader_epoch for p in parts] == [0] * 24
        finally:
            await manager.close()
        return sorted(threads)

    threads = asyncio.run(scenario())
    assert len(threads) > 1 and all(name.startswith("topiclake-open") for name in threads)


def test_offset_for_leader_epoch_answers_from_the_roots_epoch_history(tmp_path):
    """A cluster leader answers OffsetForLeaderEpoch (`Partition.epoch_end_offset`) from the epochs
    the takeovers recorded in the shared root, by Kafka's LeaderEpochFileCache rules."""
    async def scenario() -> None:
        old, new = PartitionManager(StorageLayout(tmp_path)), PartitionManager(StorageLayout(tmp_path))
        old.create_topic("t", 1)
        try:
            part = await old.take_over("t", 0, 1)
            for sequence in range(3):
                batch = idempotent_batch(sequence, b"x")
                await old.run_io(_append, part, batch, read_header(batch))
            led = await new.take_over("t", 0, 3)
            batch = idempotent_batch(3, b"y")
            await new.run_io(_append, led, batch, read_header(batch))
            assert led.epoch_end_offset(1) == (1, 3)  # epoch 1 ended where epoch 3 started
            assert led.epoch_end_offset(2) == (1, 3)  # never a leader: the epoch before it
            assert led.epoch_end_offset(3) == (3, 4)  # the leader's own: the log end
            assert led.epoch_end_offset(0) == (0, 0)  # below every epoch
            assert led.epoch_end_offset(4) == (-1, -1)  # above every epoch
        finally:
            await old.close()
            await new.close()

    asyncio.run(scenario())
