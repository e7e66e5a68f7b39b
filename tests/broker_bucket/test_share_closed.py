"""A share group (KIP-932) on a bucket root after a takeover that restored only the tail: its
records below the cache's start are read from the closed segments in the bucket, not skipped (the
share-partition's start is the whole log's, the manifest's)."""

from __future__ import annotations

import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.bucket_broker import share_consume
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import load_newest
from topiclake.store.objects import ObjectStore

TOPIC = "shared-closed"


def produce(bootstrap: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "batch.size": 8192})
    for value in values:
        producer.produce(TOPIC, value, partition=0)
    assert producer.flush(30) == 0


def test_a_share_group_reads_closed_segments_after_a_takeover(rolling_brokers):
    brokers = rolling_brokers  # seals on a local roll only: the last segment stays the tail
    store, keys = ObjectStore(brokers.root), PartitionKeys(TOPIC, 0)
    first = brokers.start("first")
    try:
        admin = AdminClient({"bootstrap.servers": first.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1, config={"segment.bytes": "30000"})])[TOPIC].result(30)
        closed_values = [b"closed-%04d-" % i + b"x" * 200 for i in range(300)]
        produce(first.bootstrap, closed_values)
        deadline = time.monotonic() + 60
        while load_newest(store, keys).end_offset < 200:
            assert time.monotonic() < deadline, "nothing sealed"
            time.sleep(0.2)
        tail_values = [b"tail-%02d" % i for i in range(20)]
        produce(first.bootstrap, tail_values)
    finally:
        brokers.kill_all()  # kill -9
    sealed_end = load_newest(store, keys).end_offset
    assert 0 < sealed_end < 320

    second = brokers.start("second")
    cache = [p for p in (brokers.directory / "second-cache").rglob(f"{TOPIC}-0") if p.is_dir()]
    assert cache and int(sorted(cache[0].glob("*.log"))[0].name.split(".")[0]) == sealed_end  # the tail only

    got = share_consume(second.bootstrap, TOPIC, "earliest", len(closed_values) + len(tail_values))
    assert sorted(value for value, _ in got) == sorted(closed_values + tail_values)
