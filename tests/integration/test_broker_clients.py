"""Real clients (kafka-python, confluent-kafka/librdkafka, aiokafka) against a real broker process:
produce with every codec (keys, null keys, headers), consume back exactly what was sent, in order
per partition, with keyed records in the partition the client's partitioner chose."""

from __future__ import annotations

import asyncio
import zlib

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.topics import create_topic

pytestmark = pytest.mark.slow

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 3
COUNT = 90


@pytest.fixture(scope="module")
def process_broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("broker") / "data").start()
    yield proc
    assert proc.stop() == 0, proc.log()


def make_records():
    """(key, value, headers): keys, null keys, empty values, headers with and without values."""
    out = []
    for i in range(COUNT):
        key = None if i % 3 == 0 else f"key-{i % 11}".encode()
        value = b"" if i == 5 else f"value-{i}-".encode() * (1 + i % 4)
        headers = [("trace", f"t{i}".encode()), ("empty", b"")] if i % 2 else []
        out.append((key, value, headers))
    return out


def check(sent: dict[int, list], received: dict[int, list]) -> None:
    """Same records, same order, per partition; offsets dense from 0."""
    assert set(received) <= set(sent)
    for partition, records in sent.items():
        got = received.get(partition, [])
        assert [r[1:] for r in got] == records, f"partition {partition}"
        assert [r[0] for r in got] == list(range(len(records)))


# -- confluent-kafka (librdkafka) ------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka(process_broker, codec):
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = create_topic(process_broker.bootstrap, PARTITIONS)
    producer = Producer({"bootstrap.servers": process_broker.bootstrap, "compression.type": codec, "linger.ms": 2,
                         "enable.idempotence": True, "acks": "all"})
    sent: dict[int, list] = {}
    reports = []
    for key, value, headers in make_records():
        producer.produce(topic, key=key, value=value, headers=headers,
                         on_delivery=lambda err, msg, k=key, v=value, h=headers: reports.append((err, msg, k, v, h)))
    assert producer.flush(20) == 0
    for err, msg, key, value, headers in reports:
        assert err is None, err
        if key is not None:  # librdkafka's default partitioner: consistent_random = crc32 % n
            assert msg.partition() == zlib.crc32(key) % PARTITIONS
        sent.setdefault(msg.partition(), []).append((key, value, headers))

    consumer = Consumer({"bootstrap.servers": process_broker.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    received: dict[int, list] = {}
    total = 0
    while total < COUNT:
        msg = consumer.poll(10)
        assert msg is not None, f"timed out after {total} records"
        assert msg.error() is None, msg.error()
        headers = [(k, v) for k, v in (msg.headers() or [])]
        received.setdefault(msg.partition(), []).append((msg.offset(), msg.key(), msg.value(), headers))
        total += 1
    consumer.close()
    check(sent, received)


# -- kafka-python ----------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python(process_broker, codec):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.partitioner.default import murmur2

    topic = create_topic(process_broker.bootstrap, PARTITIONS)
    producer = KafkaProducer(bootstrap_servers=process_broker.bootstrap, compression_type=None if codec == "none" else codec,
                             linger_ms=2, acks="all")
    futures = [(producer.send(topic, key=key, value=value, headers=headers), key, value, headers)
               for key, value, headers in make_records()]
    producer.flush(20)
    sent: dict[int, list] = {}
    for future, key, value, headers in futures:
        meta = future.get(10)
        if key is not None:  # the Java client's murmur2 partitioner
            assert meta.partition == (murmur2(key) & 0x7FFFFFFF) % PARTITIONS
        sent.setdefault(meta.partition, []).append((key, value, headers))
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=process_broker.bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=10000)
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()
    received: dict[int, list] = {}
    total = 0
    for msg in consumer:
        received.setdefault(msg.partition, []).append((msg.offset, msg.key, msg.value, list(msg.headers)))
        total += 1
        if total == COUNT:
            break
    consumer.close()
    assert total == COUNT
    check(sent, received)


# -- aiokafka --------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka(process_broker, codec):
    asyncio.run(_aiokafka_round_trip(process_broker.bootstrap, codec))


async def _aiokafka_round_trip(bootstrap: str, codec: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.partitioner import DefaultPartitioner

    topic = create_topic(bootstrap, PARTITIONS)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec,
                                linger_ms=2, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        pending = [(await producer.send(topic, key=key, value=value, headers=headers), key, value, headers)
                   for key, value, headers in make_records()]
        sent: dict[int, list] = {}
        partitioner = DefaultPartitioner()
        for future, key, value, headers in pending:
            meta = await future
            if key is not None:
                assert meta.partition == partitioner(key, list(range(PARTITIONS)), list(range(PARTITIONS)))
            sent.setdefault(meta.partition, []).append((key, value, headers))
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        await consumer.seek_to_beginning()
        received: dict[int, list] = {}
        total = 0
        while total < COUNT:
            batches = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 15)
            for tp, messages in batches.items():
                for msg in messages:
                    received.setdefault(tp.partition, []).append(
                        (msg.offset, msg.key, msg.value, list(msg.headers)))
                    total += 1
    finally:
        await consumer.stop()
    check(sent, received)
