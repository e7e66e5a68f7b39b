"""A broker on a bucket root keeps only caches locally (issue 29): a sealed tail's local segment is
deleted `cache_sealed_ms` after its seal, and the offsets it held are served from the bucket's
closed segments. The cache stays at the tail and the recent seals while the log grows; consumers
from the start, ListOffsets and DeleteRecords see the whole log; `_` topics stay whole (the group
coordinator reads `__consumer_offsets` from its start)."""

from __future__ import annotations

import time

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.bucket_broker import AckedProducer, cached_logs, consume_all, transactions, wait_sealed
from tests.support.topics import create_topic
from tests.support.waits import wait_for
from topiclake.objectlog.keys import PartitionKeys
from topiclake.store.objects import ObjectStore


def test_sealed_segments_leave_the_cache_and_are_read_from_the_bucket(dropping_brokers):
    broker = dropping_brokers.start("first")
    cache = dropping_brokers.directory / "first-cache"
    topic = create_topic(broker.bootstrap, name="bounded")
    store, keys = ObjectStore(dropping_brokers.root), PartitionKeys(topic, 0)

    producer = AckedProducer(broker.bootstrap, topic, "p", **{"partitioner": "murmur2"}).start()
    try:
        producer.wait_acked(400)
        first = cached_logs(cache, topic, 0)
        sealed = wait_sealed(store, keys, max(o for _, p, o in producer.acked if p == 0) + 1).end_offset
        # every local segment below a seal goes: the cache starts at or after that seal's end
        wait_for(lambda: min(cached_logs(cache, topic, 0)) >= sealed, timeout=30,
                 what="the sealed segments to leave the cache", detail=lambda: cached_logs(cache, topic, 0))
        producer.wait_acked(len(producer.acked) + 200)
    finally:
        producer.stop(flush_s=30)
    assert producer.failed == []
    assert min(cached_logs(cache, topic, 0)) > min(first)
    # a committed and an aborted transaction, sealed and gone from the cache too
    committed, aborted = transactions(broker.bootstrap, topic, (True, False))
    wait_sealed(store, keys, max(aborted) + 2)
    wait_for(lambda: min(cached_logs(cache, topic, 0)) > max(aborted), timeout=30,
             what="the transactions to leave the cache", detail=lambda: cached_logs(cache, topic, 0))

    # the whole log is still served: from the start (read_committed), each acknowledged record and
    # committed transaction's record once, at its offset, and no aborted one
    acked = sorted((p, o, v) for v, p, o in producer.acked)
    got = consume_all(broker.bootstrap, topic, len(acked) + len(committed), group="from-start", commit=True)
    assert sorted((p, o, v) for v, p, o in got if not v.startswith(b"r")) == acked
    assert sorted(o for v, p, o in got if v.startswith(b"r")) == sorted(committed)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    earliest = admin.list_offsets({TopicPartition(topic, 0): _spec("earliest")})[TopicPartition(topic, 0)].result(30)
    assert earliest.offset == 0

    # the group's commit lives in __consumer_offsets, kept whole: read back by the coordinator
    group = admin.list_consumer_group_offsets([_request("from-start", topic)])["from-start"].result(30)
    assert [tp.offset for tp in group.topic_partitions] == [max(aborted) + 2]  # past the ABORT marker
    offsets_cache = list((cache / "log").glob("__consumer_offsets-*"))
    assert offsets_cache and all(min(cached_logs(cache, "__consumer_offsets", int(d.name.rsplit("-", 1)[1])) or [0]) == 0
                                 for d in offsets_cache)


def _spec(name: str):
    from confluent_kafka.admin import OffsetSpec

    return getattr(OffsetSpec, name)()


def _request(group: str, topic: str):
    from confluent_kafka import ConsumerGroupTopicPartitions

    return ConsumerGroupTopicPartitions(group)
