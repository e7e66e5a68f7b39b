"""Consumers that open KIP-227 fetch sessions read a topic of many partitions through them: Kafka's
Java consumer (kafka-console-consumer) and kafka-python; confluent-kafka (librdkafka, sessionless:
epoch -1 every time) still reads it all. The broker is in this process so its session counters
show the sessions were used, not merely allowed; small fetch budgets make each consumer take many
fetches, the later ones incremental."""

from __future__ import annotations

import uuid

import pytest

from topiclake.broker.group.config import GroupsConfig
from topiclake.broker.security.config import SecurityConfig
from tests.support.in_process_broker import InProcessBroker

pytestmark = pytest.mark.slow

PARTITIONS = 400
PER_PARTITION = 3
FETCH_BYTES = {"fetch_max_bytes": 64 * 1024, "max_partition_fetch_bytes": 4 * 1024}


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """A broker with one topic of PARTITIONS partitions, PER_PARTITION 1 kB records on each."""
    from confluent_kafka import Producer

    # The ACL authorizer on (everyone a super user, as the peer suites run): its Fetch policy sits
    # between a session's fetches and the handler.
    b = InProcessBroker(tmp_path_factory.mktemp("sessions") / "data",
                        groups=GroupsConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=1000),
                        security=SecurityConfig(authorizer="acl", super_users=("User:ANONYMOUS",))).start()
    b.create_topic("wide", partitions=PARTITIONS)
    producer = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20})
    for i in range(PER_PARTITION):
        for p in range(PARTITIONS):
            producer.produce("wide", value=b"%d-%d-" % (p, i) + b"x" * 1000, partition=p)
    assert producer.flush(60) == 0
    yield b
    b.stop()


def expected() -> set[bytes]:
    return {b"%d-%d" % (p, i) for p in range(PARTITIONS) for i in range(PER_PARTITION)}


def test_java_consumer_reads_many_partitions_through_a_session(kafka_tools, wide):
    before = dict(wide.context.metrics)
    total = PARTITIONS * PER_PARTITION
    read = kafka_tools("kafka-console-consumer", "--bootstrap-server", wide.bootstrap, "--topic", "wide",
                       "--group", f"java-{uuid.uuid4().hex[:6]}", "--from-beginning", "--max-messages", str(total),
                       "--timeout-ms", "60000",
                       "--command-property", f"fetch.max.bytes={FETCH_BYTES['fetch_max_bytes']}",
                       "--command-property", f"max.partition.fetch.bytes={FETCH_BYTES['max_partition_fetch_bytes']}",
                       timeout=120)
    values = [line.rsplit("-", 1)[0].encode() for line in read.splitlines() if line]
    assert len(values) == total and set(values) == expected()
    after = wide.context.metrics
    created = after["fetch.sessions.created"] - before.get("fetch.sessions.created", 0)
    assert 1 <= created <= 2, created  # one session kept (a second: the consumer's first connection's), not one a fetch
    # 1.2 MB in 64 kB fetches: most of them incremental
    assert after["fetch.sessions.incremental"] - before.get("fetch.sessions.incremental", 0) >= 10


def test_kafka_python_consumer_reads_many_partitions_through_a_session(wide):
    from kafka import KafkaConsumer, TopicPartition

    before = dict(wide.context.metrics)
    consumer = KafkaConsumer(bootstrap_servers=wide.bootstrap, enable_auto_commit=False, **FETCH_BYTES)
    consumer.assign([TopicPartition("wide", p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()
    values = []
    while len(values) < PARTITIONS * PER_PARTITION:
        polled = consumer.poll(timeout_ms=10_000)
        assert polled, f"no records after {len(values)}"
        values += [m.value.rsplit(b"-", 1)[0] for batch in polled.values() for m in batch]
    # Caught up: its fetches now name no partition at all (nothing moved) and keep the session.
    for _ in range(3):
        assert consumer.poll(timeout_ms=1000) == {}
    consumer.close()
    assert len(values) == PARTITIONS * PER_PARTITION and set(values) == expected()
    after = wide.context.metrics
    assert after["fetch.sessions.incremental"] - before.get("fetch.sessions.incremental", 0) >= 10
    assert after["fetch.sessions.created"] - before.get("fetch.sessions.created", 0) <= 2


def test_confluent_kafka_consumer_reads_many_partitions_sessionless(wide):
    from confluent_kafka import Consumer, TopicPartition

    before = dict(wide.context.metrics)
    consumer = Consumer({"bootstrap.servers": wide.bootstrap, "group.id": "unused", "enable.auto.commit": False,
                         "fetch.max.bytes": FETCH_BYTES["fetch_max_bytes"], "message.max.bytes": 16 * 1024,
                         "max.partition.fetch.bytes": FETCH_BYTES["max_partition_fetch_bytes"]})
    consumer.assign([TopicPartition("wide", p, 0) for p in range(PARTITIONS)])
    values = []
    while len(values) < PARTITIONS * PER_PARTITION:
        polled = consumer.consume(1000, timeout=10)
        assert polled, f"no records after {len(values)}"
        for message in polled:
            assert message.error() is None, message.error()
            values.append(message.value().rsplit(b"-", 1)[0])
    consumer.close()
    assert len(values) == PARTITIONS * PER_PARTITION and set(values) == expected()
    assert wide.context.metrics.get("fetch.sessions.created", 0) == before.get("fetch.sessions.created", 0)
