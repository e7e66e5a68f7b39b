"""The bucket readers' pool (partitions.PartitionManager.run_bucket_read, BUCKET_READ_THREADS):
reads below a bucket partition's cache hang on their GETs while the store is paused (SIGSTOP:
connections are accepted, nothing answers), and meanwhile the broker's event loop and its reads
from the cache go on; more such reads than the pool has threads queue, and all complete once the
store answers again."""

from __future__ import annotations

import os
import signal
import time

from confluent_kafka import Consumer, TopicPartition

from tests.support.bucket_broker import BucketBrokers, create_topic, produce_plain, wait_sealed
from tests.support.s3 import VersityGW
from topiclake.broker.partitions import BUCKET_READ_THREADS
from topiclake.objectlog.keys import PartitionKeys
from topiclake.store.objects import ObjectStore

COLD_RECORDS = 400  # about 400 KB: several closed segments of 100 KB
HOT_RECORDS = 50  # a few batches, well under a segment: they stay in the tail, restored into the cache
PAUSE_S = 5.0


def _consumer(bootstrap: str, topic: str, offset: int) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"pool-{topic}-{time.monotonic()}",
                         "enable.auto.commit": False, "auto.offset.reset": "error"})
    consumer.assign([TopicPartition(topic, 0, offset)])
    return consumer


def _poll_until(consumers: list[Consumer], got: list[dict[int, bytes]], wanted: int, seconds: float) -> None:
    """Poll each consumer in turn into its `got` (offset -> value) until each holds `wanted`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(len(g) < wanted for g in got):
        for consumer, found in zip(consumers, got):
            message = consumer.poll(0.1)
            if message is not None and not message.error():
                found[message.offset()] = message.value()


def test_closed_reads_held_up_by_the_store_queue_on_their_pool_and_block_nothing_else(tmp_path, own_store):
    server, root = own_store
    brokers = BucketBrokers(tmp_path, root, storage="seal_ms = 600000")  # seals on a local roll only
    try:
        first = brokers.start("first")
        create_topic(first.bootstrap, "cold", **{"segment.bytes": "100000"})
        create_topic(first.bootstrap, "hot")
        cold = produce_plain(first.bootstrap, "cold", 0, COLD_RECORDS)
        hot = produce_plain(first.bootstrap, "hot", 0, HOT_RECORDS)
        closed_end = wait_sealed(ObjectStore(root), PartitionKeys("cold", 0), COLD_RECORDS // 2).end_offset
        first.kill()
        second = brokers.start("second")  # its cache of "cold" starts where the closed segments end

        # Every consumer connected and at a cached offset before the pause (their metadata and
        # the takeovers done); then sent below the cache, or back to the cache's start.
        hot_reader = _consumer(second.bootstrap, "hot", 0)
        readers = [_consumer(second.bootstrap, "cold", COLD_RECORDS) for _ in range(BUCKET_READ_THREADS + 2)]
        try:
            _pause_and_read(server, hot_reader, readers, hot, cold, closed_end)
        finally:
            for consumer in (hot_reader, *readers):
                consumer.close()
        assert second.proc.poll() is None
    finally:
        brokers.kill_all()


def _pause_and_read(server: VersityGW, hot_reader: Consumer, readers: list[Consumer], hot: dict[bytes, int],
                    cold: dict[bytes, int], closed_end: int) -> None:
    hot_got: dict[int, bytes] = {}
    _poll_until([hot_reader], [hot_got], HOT_RECORDS, 60)
    assert sorted(hot_got.values()) == sorted(hot)
    _poll_until(readers, [{} for _ in readers], 1, 1.0)  # connected; nothing past the end to read

    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        cold_got: list[dict[int, bytes]] = [{} for _ in readers]
        for reader in readers:
            reader.seek(TopicPartition("cold", 0, 0))
        _poll_until(readers, cold_got, 1, 1.0)  # their fetches hang on the pool's threads, the rest queued
        hot_got.clear()
        hot_reader.seek(TopicPartition("hot", 0, 0))
        started = time.monotonic()
        _poll_until([hot_reader], [hot_got], HOT_RECORDS, PAUSE_S)
        served_in = time.monotonic() - started
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
    assert sorted(hot_got.values()) == sorted(hot), \
        f"the cache served {len(hot_got)} of {HOT_RECORDS} records while the bucket reads hung"
    assert served_in < PAUSE_S - 1, served_in
    assert not [o for got in cold_got for o in got if o < closed_end], "a closed read with the store paused"

    _poll_until(readers, cold_got, COLD_RECORDS, 90)
    by_offset = {offset: value for value, offset in cold.items()}
    for got in cold_got:  # all of them, more than the pool's threads, came through
        assert got == by_offset, f"{len(got)} of {COLD_RECORDS} records"
