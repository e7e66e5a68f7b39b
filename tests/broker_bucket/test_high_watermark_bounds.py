"""A consumer sees nothing past the high watermark (read_committed: the last stable offset), as
Kafka serves one: Fetch returns no record at or past it, ListOffsets "latest" is it, never the log
end (Partition.fetchOffsetForTimestamp), and a lookup by time or MAX_TIMESTAMP whose record is at or
past it finds nothing. On a bucket root the records past the high watermark are not in an object
yet: a new leader would give their offsets to other records, which a consumer that read the
first ones, or was placed past them, would never see."""

from __future__ import annotations

import time

from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from topiclake.client.conn import BrokerConnection
from topiclake.segments.batch import iter_batches

from tests.support.bucket_broker import create_topic, open_transaction, transactions
from tests.support.cluster_clients import raw_fetch
from tests.support.waits import wait_for

HOUR_MS = 3_600_000


def list_offset(bootstrap: str, topic: str, spec: OffsetSpec, level=IsolationLevel.READ_UNCOMMITTED):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, 0)
    return admin.list_offsets({tp: spec}, isolation_level=level)[tp].result(30)


def test_fetch_and_latest_stop_at_the_high_watermark_not_the_unflushed_log_end(slow_flush_brokers):
    broker = slow_flush_brokers.start("slow")
    topic = "unflushed"
    create_topic(broker.bootstrap, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 0, "linger.ms": 0})
    for n in range(3):
        producer.produce(topic, b"not yet stored %d" % n, partition=0)
    assert producer.flush(10) == 0
    time.sleep(0.3)  # appended to the cache; the next flush is up to 5 s away
    latest = list_offset(broker.bootstrap, topic, OffsetSpec.latest()).offset
    with BrokerConnection(broker.bootstrap) as client:
        fetched = raw_fetch(client, topic, 0, 0)
    high_watermark = fetched.high_watermark
    read = [b.last_offset for b in iter_batches(fetched.records or b"", source="fetch")]
    assert all(last < high_watermark for last in read), f"read up to {max(read)}, high watermark {high_watermark}"
    assert latest <= high_watermark, f"latest {latest} is past the high watermark {high_watermark}"
    wait_for(lambda: list_offset(broker.bootstrap, topic, OffsetSpec.latest()).offset == 3, 15,
             what="latest at the log end once it was flushed")


def test_time_lookups_read_committed_stop_at_the_last_stable_offset(bucket_brokers):
    broker = bucket_brokers.start("txn")
    topic = "lookups"
    create_topic(broker.bootstrap, topic)
    old = int(time.time() * 1000) - HOUR_MS
    committed, _ = transactions(broker.bootstrap, topic, (True,), timestamp=old)  # its marker: stamped now
    time.sleep(0.05)
    recent = int(time.time() * 1000)  # after the marker, before the open transaction's records
    time.sleep(0.05)
    producer, open_offsets = open_transaction(broker.bootstrap, topic, "still-open")

    uncommitted = list_offset(broker.bootstrap, topic, OffsetSpec.max_timestamp())
    assert uncommitted.offset in open_offsets and uncommitted.timestamp > old
    for spec in (OffsetSpec.max_timestamp(), OffsetSpec.for_timestamp(recent)):
        assert list_offset(broker.bootstrap, topic, spec, IsolationLevel.READ_COMMITTED).offset == -1
    assert list_offset(broker.bootstrap, topic, OffsetSpec.for_timestamp(recent)).offset == min(open_offsets)
    assert list_offset(broker.bootstrap, topic, OffsetSpec.for_timestamp(old),
                       IsolationLevel.READ_COMMITTED).offset == min(committed)
    assert list_offset(broker.bootstrap, topic, OffsetSpec.latest(),
                       IsolationLevel.READ_COMMITTED).offset == min(open_offsets)

    producer.commit_transaction(30)
    found = list_offset(broker.bootstrap, topic, OffsetSpec.max_timestamp(), IsolationLevel.READ_COMMITTED)
    assert found.offset == max(open_offsets) + 1  # its commit marker, stamped last (as Kafka's is)
