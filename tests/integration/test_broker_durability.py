"""A real broker process: kill -9 during an acks=all produce loop loses no acknowledged record;
the segment files are Kafka's format (kafka-python's reader and `topiclake dump-log` agree);
SIGTERM is a clean shutdown."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time

import pytest

from tests.support.paths import REPO
from tests.support.broker_process import BrokerProcess
from tests.support.topics import create_topic
from tests.support.clients import consume_all

pytestmark = pytest.mark.slow


def test_kill_9_keeps_every_acknowledged_record(tmp_path):
    from confluent_kafka import Producer

    broker = BrokerProcess(tmp_path / "data").start()
    topic = create_topic(broker.bootstrap, partitions=1, **{"flush_messages": "1"})
    acked: dict[bytes, int] = {}
    failed = []

    def on_delivery(err, msg):
        if err is None:
            acked[msg.value()] = msg.offset()
        else:
            failed.append((msg.value(), err))

    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 1, "message.timeout.ms": 60000, "reconnect.backoff.ms": 50,
                         "reconnect.backoff.max.ms": 200})
    stop = threading.Event()
    sent = []

    def loop():
        i = 0
        while not stop.is_set():
            value = f"m{i:06d}".encode()
            producer.produce(topic, value=value, on_delivery=on_delivery)
            sent.append(value)
            producer.poll(0)
            i += 1
            time.sleep(0.001)

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while len(acked) < 300 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(acked) >= 300, broker.log()
        broker.kill()  # SIGKILL mid-loop
        acked_before_crash = dict(acked)
        time.sleep(0.3)
        broker.start()
        deadline = time.monotonic() + 20
        while len(acked) < len(acked_before_crash) + 300 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join()
    assert producer.flush(60) == 0
    assert not failed, failed[:5]

    records = consume_all(broker.bootstrap, topic, len(sent))
    offsets = [o for o, _ in records]
    assert offsets == list(range(len(records))), "offsets continue with no gap"
    values = [v for _, v in records]
    assert len(set(values)) == len(values), "no duplicates after the producer's retries"
    by_value = dict((v, o) for o, v in records)
    for value, offset in acked_before_crash.items():
        assert by_value.get(value) == offset, f"acknowledged {value!r} at {offset} is missing"
    assert values == sent, "every record, in the order it was produced"
    assert broker.stop() == 0


def test_segments_are_kafka_format_and_clean_shutdown(tmp_path):
    from confluent_kafka import Producer
    from kafka.record import MemoryRecords

    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    topic = create_topic(broker.bootstrap, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "lz4", "linger.ms": 5})
    expected = [(f"k{i % 5}".encode() if i % 4 else None, f"v{i}".encode(), [("h", str(i).encode())])
                for i in range(200)]
    for key, value, headers in expected:
        producer.produce(topic, key=key, value=value, headers=headers)
    assert producer.flush(20) == 0
    assert broker.stop() == 0, broker.log()  # SIGTERM: clean shutdown, exit 0

    log_dir = data / "log" / f"{topic}-0"
    assert (log_dir / ".kafka_cleanshutdown").exists()
    assert not (data / "cluster" / "brokers" / "0.json").exists(), "registration removed on clean shutdown"
    segment = log_dir / "00000000000000000000.log"

    decoded = []
    records = MemoryRecords(segment.read_bytes())
    while records.has_next():
        batch = records.next_batch()
        for r in batch:
            decoded.append((r.offset, r.key, r.value, [(k, v) for k, v in r.headers]))
    assert [d[0] for d in decoded] == list(range(200))
    assert [d[1:] for d in decoded] == [(k, v, h) for k, v, h in expected]

    out = subprocess.run([sys.executable, "-m", "topiclake.cli", "dump-log", "--json", str(segment)],
                         capture_output=True, text=True, cwd=REPO, check=True).stdout
    dumped = [r for line in out.splitlines() if line.startswith("{") for r in json.loads(line)["records"]]
    assert [(r["offset"], base64.b64decode(r["value"])) for r in dumped] == [(d[0], d[2]) for d in decoded]
