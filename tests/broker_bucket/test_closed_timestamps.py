"""Time lookups on a bucket partition see the whole log, not only the cache (issue 29): with the
sealed segments deleted from the cache at once (`dropping_brokers`), ListOffsets MAX_TIMESTAMP
(KIP-734) finds the record with the largest timestamp in a closed segment, the first of equals, and
a share group's `share.auto.offset.reset = by_duration:...` starts at the first closed record at
most that old."""

from __future__ import annotations

import dataclasses
import time

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from tests.support.bucket_broker import cached_logs, share_consume, wait_sealed
from tests.support.topics import create_topic
from tests.support.waits import wait_for
from topiclake.broker.bucket.closed import ClosedSegments
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import load_newest
from topiclake.segments.time_index import TimestampOffset
from topiclake.store.objects import ObjectStore

HOUR_MS = 3_600_000


def produce(bootstrap: str, topic: str, timestamps: list[int], tag: str) -> dict[int, int]:
    """One acknowledged record per timestamp, in order: offset -> its timestamp."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "enable.idempotence": True})
    acked: dict[int, int] = {}

    def delivered(error, message):
        assert error is None, error
        acked[message.offset()] = message.timestamp()[1]

    for n, timestamp in enumerate(timestamps):
        producer.produce(topic, b"%s-%04d" % (tag.encode(), n), partition=0, timestamp=timestamp, on_delivery=delivered)
    assert producer.flush(30) == 0
    assert len(acked) == len(timestamps)
    return acked


def seal_and_drop(dropping_brokers, name: str, topic: str, end: int) -> None:
    """Wait until offsets below `end` are sealed in the bucket and gone from the broker's cache."""
    store, keys = ObjectStore(dropping_brokers.root), PartitionKeys(topic, 0)
    sealed = wait_sealed(store, keys, end).end_offset
    cache = dropping_brokers.directory / f"{name}-cache"
    wait_for(lambda: min(cached_logs(cache, topic, 0)) >= sealed, timeout=30,
             what="the sealed segments to leave the cache", detail=lambda: cached_logs(cache, topic, 0))


def list_offset(bootstrap: str, topic: str, spec: OffsetSpec):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, 0)
    return admin.list_offsets({tp: spec})[tp].result(30)


def test_max_timestamp_and_times_are_found_in_closed_segments(dropping_brokers):
    broker = dropping_brokers.start("first")
    topic = create_topic(broker.bootstrap, name="max-ts")
    now = int(time.time() * 1000)
    largest = now - 60_000
    # the largest timestamp in the middle of the first records, again (a tie) in later ones
    first = [now - HOUR_MS + n for n in range(50)]
    first[20] = largest
    log = produce(broker.bootstrap, topic, first, "first")
    seal_and_drop(dropping_brokers, "first", topic, max(log) + 1)
    later = [now - HOUR_MS + 100 + n for n in range(50)]
    later[30] = largest
    log |= produce(broker.bootstrap, topic, later, "later")
    seal_and_drop(dropping_brokers, "first", topic, max(log) + 1)
    log |= produce(broker.bootstrap, topic, [now - HOUR_MS + 200 + n for n in range(5)], "tail")  # the cache's

    first_largest = min(offset for offset, timestamp in log.items() if timestamp == largest)
    found = list_offset(broker.bootstrap, topic, OffsetSpec.max_timestamp())
    assert (found.offset, found.timestamp) == (first_largest, largest)

    # a manifest's largest timestamp only bounds its segment's (a cleaned segment keeps the replaced
    # segments'): a segment whose bound is raised past the largest still yields the true first record
    manifest = load_newest(ObjectStore(dropping_brokers.root), PartitionKeys(topic, 0))
    raised = [entry if entry.base_offset <= first_largest < entry.end_offset else
              dataclasses.replace(entry, largest_timestamp=largest + 1000) for entry in manifest.segments]
    assert len(raised) > 1
    closed = ClosedSegments(ObjectStore(dropping_brokers.root), PartitionKeys(topic, 0),
                            dataclasses.replace(manifest, segments=tuple(raised)))
    assert closed.max_timestamp() == TimestampOffset(largest, first_largest)

    # by time: the first record at or after it, in a closed segment
    target = now - HOUR_MS + 10
    expected = min(offset for offset, timestamp in log.items() if timestamp >= target)
    found = list_offset(broker.bootstrap, topic, OffsetSpec.for_timestamp(target))
    assert (found.offset, found.timestamp) == (expected, target)


def test_a_share_group_by_duration_starts_in_the_closed_segments(dropping_brokers):
    broker = dropping_brokers.start("first")
    topic = create_topic(broker.bootstrap, name="share-duration")
    now = int(time.time() * 1000)
    old = produce(broker.bootstrap, topic, [now - 2 * HOUR_MS + n for n in range(20)], "old")
    recent = produce(broker.bootstrap, topic, [now - HOUR_MS // 2 + n for n in range(20)], "recent")
    seal_and_drop(dropping_brokers, "first", topic, max(recent) + 1)
    recent |= produce(broker.bootstrap, topic, [now + n for n in range(5)], "tail")

    got = [offset for _, offset in share_consume(broker.bootstrap, topic, "by_duration:PT1H", len(recent))]
    # every record at most an hour old, once; none older
    assert sorted(got) == sorted(recent) and min(got) == max(old) + 1
