"""A single broker on a bucket tells clients the epoch its takeover claimed, and serves
OffsetForLeaderEpoch from the bucket's epoch history: after a kill -9 and a takeover by a new
broker (a new epoch), consumers that committed on the old broker (confluent-kafka's, the one still
running and a new one, and Kafka's own console consumer, whose Java client validates positions
with OffsetForLeaderEpoch) continue from their committed offsets and read every record once."""

from __future__ import annotations

import time
from collections import Counter

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker_process import free_port
from tests.support.bucket_broker import AckedProducer
from tests.support.cluster_clients import metadata
from tests.support.metrics import scrape_url
from tests.support.wire import offset_for_epoch
from topiclake.client.conn import BrokerConnection

TOPIC = "epochs"
PARTITIONS = 2


def _produce(bootstrap: str, tag: str, count: int) -> set[bytes]:
    producer = AckedProducer(bootstrap, TOPIC, tag).start()
    producer.wait_acked(count)
    producer.stop(flush_s=30)
    return {value for value, _p, _o in producer.acked}


def _consumer(bootstrap: str, group: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000,
                         "reconnect.backoff.max.ms": 500, "topic.metadata.refresh.interval.ms": 1000})
    consumer.subscribe([TOPIC])
    return consumer


def _read(consumer: Consumer, expected: set[bytes], timeout: float = 90.0) -> list[tuple[bytes, int]]:
    """(value, leader epoch) of every record read until `expected` all arrived and 2 s passed."""
    got: list[tuple[bytes, int]] = []
    deadline, quiet_since = time.monotonic() + timeout, time.monotonic()
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None or message.error():
            if expected <= {v for v, _e in got} and time.monotonic() - quiet_since > 2:
                break
            continue
        got.append((message.value(), message.leader_epoch()))
        quiet_since = time.monotonic()
    return got


def _read_once(consumer: Consumer, expected: set[bytes]) -> set[int]:
    """Reads exactly `expected`, each once; the leader epochs the records carried."""
    got = _read(consumer, expected)
    counts = Counter(v for v, _e in got)
    assert set(counts) == expected, f"{len(expected - set(counts))} missing, {len(set(counts) - expected)} extra"
    assert max(counts.values()) == 1, "a record read twice"
    return {e for _v, e in got}


def _console_consume(kafka_tools, bootstrap: str, count: int) -> Counter:
    """Kafka's console consumer in group "java": `count` values (it commits them on its way out)."""
    out = kafka_tools("kafka-console-consumer", "--bootstrap-server", bootstrap, "--topic", TOPIC,
                      "--group", "java", "--from-beginning", "--max-messages", str(count), "--timeout-ms", "60000")
    return Counter(line.encode() for line in out.splitlines())


def test_a_takeover_tells_its_epoch_and_consumers_continue_from_their_commits(bucket_brokers, kafka_tools):
    port = free_port()
    first = bucket_brokers.start("first", port=port)
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
    before = _produce(first.bootstrap, "a", 200)
    running, closed = _consumer(first.bootstrap, "running"), _consumer(first.bootstrap, "closed")
    first_epochs = _read_once(running, before) | _read_once(closed, before)
    running.commit(asynchronous=False)
    closed.commit(asynchronous=False)
    closed.close()
    assert _console_consume(kafka_tools, first.bootstrap, len(before)) == Counter(before)
    told = {p.epoch for p in metadata(first.bootstrap, TOPIC).partitions.values()}
    assert told == first_epochs, "Metadata's leader epoch is not the one stamped on the records"
    ends = {tp.partition: tp.offset for tp in running.committed(
        [TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)}

    first.kill()
    metrics_port = free_port()
    second = bucket_brokers.start("second", port=port,  # waits out the first broker's lease
                                  args=("--metrics-listen", f"127.0.0.1:{metrics_port}"))
    view = metadata(second.bootstrap, TOPIC)
    assert all(p.epoch > max(first_epochs) for p in view.partitions.values()), view
    with BrokerConnection(second.bootstrap, timeout=10) as client:
        for index, part in view.partitions.items():  # the first broker's epoch ended where it stopped
            found = offset_for_epoch(client, TOPIC, max(first_epochs), partition=index, current=part.epoch)
            assert (found.leader_epoch, found.end_offset) == (max(first_epochs), ends[index])

    after = _produce(second.bootstrap, "b", 200)
    assert _read_once(running, after) == {p.epoch for p in view.partitions.values()}
    running.close()
    assert _console_consume(kafka_tools, second.bootstrap, len(after)) == Counter(after)  # from its commits
    reopened = _consumer(second.bootstrap, "closed")
    try:
        _read_once(reopened, after)
    finally:
        reopened.close()
    samples = scrape_url(f"http://127.0.0.1:{metrics_port}/metrics")
    asked = sum(value for (name, labels), value in samples.items()
                if name == "kafka_network_requestmetrics_requests_total"
                and ("request", "OffsetForLeaderEpoch") in labels)
    assert asked > PARTITIONS, "the consumers did not validate their positions (KIP-320)"
