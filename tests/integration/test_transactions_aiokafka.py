"""aiokafka 0.14's exactly-once consume-transform-produce against a real broker process.

aiokafka sends TxnOffsetCommit v0, which carries no member id or generation: Kafka accepts such a
transactional commit for a group that has members (its offset-commit validation checks the member
only when the request names one), for classic and KIP-848 groups alike. Here the broker once
answered UNKNOWN_MEMBER_ID, and `send_offsets_to_transaction` failed."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.topics import create_topic
from tests.support.clients import committed_offsets, read_all

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def aiokafka_broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("aiokafka-txn")
    config = tmp / "broker.toml"
    config.write_text("[groups]\ninitial_rebalance_delay_ms = 0\nmin_session_timeout_ms = 1000\n")
    b = BrokerProcess(tmp / "data", config=config).start()
    yield b
    b.stop()


def produce_inputs(bootstrap: str, topic: str, count: int) -> list[bytes]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    inputs = [b"in-%03d" % i for i in range(count)]
    for i, value in enumerate(inputs):
        producer.produce(topic, value=value, partition=i % 2)
    assert producer.flush(20) == 0
    return inputs


async def transform(bootstrap: str, consumer, topic_out: str, group: str, expected: int) -> None:
    """Consume, produce value + b":out" and commit the input offsets in the same transaction
    (aiokafka's send_offsets_to_transaction) until `expected` inputs are done. The first
    transaction is aborted and its inputs read again."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{group}-xform")
    await producer.start()
    done, aborted_once = 0, False
    try:
        while done < expected:
            batches = {tp: rs for tp, rs in (await consumer.getmany(timeout_ms=1000, max_records=10)).items() if rs}
            if not batches:
                continue
            await producer.begin_transaction()
            for records in batches.values():
                for r in records:
                    await producer.send(topic_out, r.value + b":out", partition=r.partition)
            await producer.send_offsets_to_transaction({tp: rs[-1].offset + 1 for tp, rs in batches.items()}, group)
            if not aborted_once:
                aborted_once = True
                await producer.abort_transaction()
                for tp, records in batches.items():
                    consumer.seek(tp, records[0].offset)
                continue
            await producer.commit_transaction()
            done += sum(len(rs) for rs in batches.values())
    finally:
        await producer.stop()


def test_aiokafka_send_offsets_to_transaction_in_a_stable_classic_group(aiokafka_broker):
    from aiokafka import AIOKafkaConsumer

    topic_in, topic_out = create_topic(aiokafka_broker.bootstrap, partitions=2), create_topic(aiokafka_broker.bootstrap, partitions=2)
    inputs = produce_inputs(aiokafka_broker.bootstrap, topic_in, 40)

    async def run():
        consumer = AIOKafkaConsumer(topic_in, bootstrap_servers=aiokafka_broker.bootstrap, group_id="aio-xform",
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    isolation_level="read_committed")
        await consumer.start()
        try:
            await transform(aiokafka_broker.bootstrap, consumer, topic_out, "aio-xform", len(inputs))
        finally:
            await consumer.stop()

    asyncio.run(asyncio.wait_for(run(), 90))
    got = read_all(aiokafka_broker.bootstrap, topic_out, 2, "read_committed", len(inputs))
    assert sorted(got) == sorted(v + b":out" for v in inputs)  # each exactly once: the aborted one is gone
    assert committed_offsets(aiokafka_broker.bootstrap, "aio-xform", topic_in, 2) == [20, 20]


def test_aiokafka_send_offsets_to_transaction_for_a_kip848_group(aiokafka_broker):
    """The group is a KIP-848 group, Stable with a confluent-kafka member (group.protocol=consumer);
    aiokafka's transactional producer commits its offsets with TxnOffsetCommit v0."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition
    from confluent_kafka import Consumer

    topic_in, topic_out = create_topic(aiokafka_broker.bootstrap, partitions=2), create_topic(aiokafka_broker.bootstrap, partitions=2)
    inputs = produce_inputs(aiokafka_broker.bootstrap, topic_in, 10)
    member = Consumer({"bootstrap.servers": aiokafka_broker.bootstrap, "group.id": "kip848-xform", "group.protocol": "consumer",
                       "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    member.subscribe([topic_in])
    try:
        seen = []
        deadline = time.monotonic() + 30
        while len(seen) < len(inputs) and time.monotonic() < deadline:
            m = member.poll(0.5)
            if m is not None and m.error() is None:
                seen.append(m)
        assert len(seen) == len(inputs), "the KIP-848 member did not get its assignment"

        async def commit():
            producer = AIOKafkaProducer(bootstrap_servers=aiokafka_broker.bootstrap, transactional_id="kip848-xform-tx")
            await producer.start()
            try:
                async with producer.transaction():
                    for m in seen:
                        await producer.send(topic_out, m.value() + b":out", partition=m.partition())
                    await producer.send_offsets_to_transaction({TopicPartition(topic_in, p): 5 for p in (0, 1)},
                                                               "kip848-xform")
            finally:
                await producer.stop()

        asyncio.run(asyncio.wait_for(commit(), 60))
        assert committed_offsets(aiokafka_broker.bootstrap, "kip848-xform", topic_in, 2) == [5, 5]
        assert sorted(read_all(aiokafka_broker.bootstrap, topic_out, 2, "read_committed", len(inputs))) == \
            sorted(v + b":out" for v in inputs)
    finally:
        member.close()
