"""A corrupt log seen through a real broker and a real client (issue 31): a consumer fetching at
the damage gets Kafka's CORRUPT_MESSAGE (code 2), never silence and never a silent skip to the
next segment; `topiclake repair-log` refuses while the broker owns the root, and after the repair
(the broker stopped) the broker serves the log up to the damage and appends continue there."""

from __future__ import annotations

import struct
import time

import pytest
from typer.testing import CliRunner

from topiclake.cli import app

from tests.support.broker_process import BrokerProcess
from tests.support.topics import create_topic

pytestmark = pytest.mark.slow

TOPIC = "t"
RECORDS = 3000


def produce(bootstrap: str, partitions: int, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "batch.num.messages": 50})
    for i in range(count):
        for p in range(partitions):
            producer.produce(TOPIC, f"{p}:{i:05d}".encode(), partition=p)
        if i % 100 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def batches(path) -> list[tuple[int, int]]:
    """(position, base offset) of every batch of a segment file."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos + 12 <= len(data):
        out.append((pos, struct.unpack_from(">q", data, pos)[0]))
        pos += struct.unpack_from(">i", data, pos + 8)[0] + 12
    return out


def consume(bootstrap: str, partitions: int, *, until_errors: int = 0, timeout: float = 30.0):
    """({partition: offsets read}, {partition: (error code, offset named)}) from offset 0 on."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    read: dict[int, list[int]] = {p: [] for p in range(partitions)}
    errors: dict[int, tuple[int, str]] = {}
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                if not until_errors and sum(map(len, read.values())) and time.monotonic() > deadline - timeout + 10:
                    break
                continue
            if msg.error() is not None:
                errors.setdefault(msg.partition(), (msg.error().code(), msg.error().str()))
                if len(errors) >= until_errors > 0:
                    break
                continue
            read[msg.partition()].append(msg.offset())
    finally:
        consumer.close()
    return read, errors


def test_a_consumer_at_the_damage_gets_corrupt_message_and_the_repair_waits_for_the_broker(tmp_path):
    from confluent_kafka import KafkaError

    broker = BrokerProcess(tmp_path / "data").start()
    try:
        create_topic(broker.bootstrap, 2, TOPIC, segment_bytes="20000")
        produce(broker.bootstrap, 2, RECORDS)
        p0, p1 = (sorted((tmp_path / "data" / "log" / f"{TOPIC}-{p}").glob("*.log")) for p in (0, 1))
        assert len(p0) >= 3 and len(p1) >= 3
        # p0: a middle segment cut short inside a batch, the later segments whole
        cut_file = p0[1]
        cut_position, cut_offset = batches(cut_file)[len(batches(cut_file)) // 2]
        with open(cut_file, "r+b") as f:
            f.truncate(cut_position + 30)
        # p1: a damaged length in the active segment, the batches after it whole
        bad_file = p1[-1]
        bad_position, bad_offset = batches(bad_file)[len(batches(bad_file)) // 2]
        with open(bad_file, "r+b") as f:
            f.seek(bad_position + 8)
            f.write(struct.pack(">i", 100_000))

        read, errors = consume(broker.bootstrap, 2, until_errors=2)
        assert read == {0: list(range(cut_offset)), 1: list(range(bad_offset))}  # nothing skipped past it
        assert {p: code for p, (code, _text) in errors.items()} == {0: KafkaError.INVALID_MSG, 1: KafkaError.INVALID_MSG}
        assert f"at offset {cut_offset}" in errors[0][1] and f"at offset {bad_offset}" in errors[1][1]
        assert f"fetch from {TOPIC}-1 at offset {bad_offset}: corrupt log: {bad_file}, position {bad_position}" \
            in broker.log()

        runner = CliRunner()
        repair = ["repair-log", "--topic", TOPIC, "--data", str(tmp_path / "data")]
        refused = runner.invoke(app, [*repair, "--partition", "1"])
        assert refused.exit_code == 1 and "is in use by broker 0" in refused.output, refused.output
        assert bad_file.stat().st_size > bad_position + 100  # nothing changed
    finally:
        broker.stop()

    for partition, offset in ((0, cut_offset), (1, bad_offset)):
        done = runner.invoke(app, [*repair, "--partition", str(partition)])
        assert done.exit_code == 0, done.output
        assert f"truncated {TOPIC}-{partition} at offset {offset}: " in done.output
        assert done.output.strip().endswith(f"the log now ends at {offset}")
    assert not any(p.exists() for p in p0[2:])  # Kafka's recovery: the segments after the cut are gone

    broker = BrokerProcess(tmp_path / "data").start()
    try:
        read, errors = consume(broker.bootstrap, 2)
        assert errors == {} and read == {0: list(range(cut_offset)), 1: list(range(bad_offset))}
        produce(broker.bootstrap, 2, 10)  # appends continue at the offsets the repair freed
        read, errors = consume(broker.bootstrap, 2)
        assert errors == {} and read == {0: list(range(cut_offset + 10)), 1: list(range(bad_offset + 10))}
    finally:
        broker.stop()
