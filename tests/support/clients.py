"""Real clients reading a topic back, and the offsets a group committed (kafka-python, confluent-
kafka)."""

from __future__ import annotations

import time

from kio.schema.offset_fetch.v6 import request as fetch_req

from topiclake.client.conn import BrokerConnection


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 30.0):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < expected and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        out.append((msg.offset(), msg.value()))
    consumer.close()
    return out


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str, expected: int,
             timeout: float = 20.0) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  "isolation.level": isolation})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    settle = None
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            out.append(m.value())
        if len(out) >= expected:  # keep reading briefly: more than expected would be a bug
            settle = settle or time.monotonic() + 0.5
            if time.monotonic() > settle:
                break
    c.close()
    return out


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    """The group's materialised offsets (OffsetFetch without require_stable: pending ones are not shown)."""
    with BrokerConnection(bootstrap) as client:
        resp = client.request(fetch_req.OffsetFetchRequest(group_id=group, topics=(
            fetch_req.OffsetFetchRequestTopic(name=topic, partition_indexes=tuple(range(partitions))),)))
    return [p.committed_offset for t in resp.topics for p in sorted(t.partitions, key=lambda p: p.partition_index)]


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, start: int = 0) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for i in range(start, start + per_partition):
        for p in range(partitions):
            producer.send(topic, f"{p}:{i}".encode(), partition=p)
    producer.flush()
    producer.close()


def commit_offsets(consumer, offsets: list, timeout: float = 60.0) -> None:
    """A synchronous commit of `offsets` (confluent-kafka TopicPartitions), again while the broker
    answers a retriable error: right after a start, or after `__consumer_offsets` was created by
    this first use, its coordinator may still be loading (COORDINATOR_LOAD_IN_PROGRESS), which
    librdkafka retries only briefly; on a loaded machine the load takes longer."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout
    while True:
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
