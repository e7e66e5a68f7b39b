"""A real broker process holding 200 partitions (issue 33): a kill -9 in the middle of an acks=all
produce spread over all of them loses no acknowledged record, the restart recovers the logs that
had no clean-shutdown marker, and a SIGTERM afterwards marks every log clean, so the start after
it recovers none. Not timed: bench/stop_start.py measures."""

from __future__ import annotations

import re
import threading
import time

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.topics import create_topic
from tests.support.waits import wait_for

pytestmark = pytest.mark.slow

PARTITIONS = 200
# the broker's line once its start opened every log
OPENED = re.compile(r"opened (\d+) partitions in [\d.]+ s, (\d+) of them recovered \(no clean-shutdown marker\)")


def _read_everything(bootstrap: str, topic: str, expected: set, timeout: float = 60.0) -> dict:
    """(partition, offset) -> value of the topic's records, read until the `expected` keys are
    there (reading every partition, so every log is open)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    found = {}
    deadline = time.monotonic() + timeout
    while not expected <= found.keys() and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None:
            assert msg.error() is None, msg.error()
            found[(msg.partition(), msg.offset())] = msg.value()
    consumer.close()
    return found


def _recovered_since(broker: BrokerProcess, start: int) -> int:
    """How many logs the start logged at `start` in the broker's log recovered, once it opened them all."""
    found = wait_for(lambda: OPENED.search(broker.log_path.read_text(errors="replace")[start:]), timeout=60,
                     what="the start's line for opening every partition", detail=broker.log)
    return int(found.group(2))


def test_kill_9_mid_produce_over_200_partitions_then_a_clean_stop(tmp_path):
    broker = BrokerProcess(tmp_path / "data")
    try:
        _kill_9_then_clean_stop(broker, tmp_path / "data")
    finally:
        broker.kill()  # a failed assertion leaves no broker running (no-op after the clean stop)


def _kill_9_then_clean_stop(broker: BrokerProcess, data) -> None:
    from confluent_kafka import Producer

    broker.start()
    topic = create_topic(broker.bootstrap, partitions=PARTITIONS)
    acked: dict[tuple[int, int], bytes] = {}
    failed = []

    def on_delivery(err, msg):
        if err is None:
            acked[(msg.partition(), msg.offset())] = msg.value()
        else:
            failed.append((msg.value(), err))

    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 2, "message.timeout.ms": 120000, "reconnect.backoff.ms": 50,
                         "reconnect.backoff.max.ms": 200})
    stop = threading.Event()

    def loop():
        i = 0
        while not stop.is_set():
            try:
                producer.produce(topic, value=f"m{i:07d}".encode(), partition=i % PARTITIONS,
                                 on_delivery=on_delivery)
            except BufferError:  # the queue is full while the broker is down: wait, then the same record
                producer.poll(0.05)
                continue
            producer.poll(0)
            i += 1
            if i % PARTITIONS == 0:
                time.sleep(0.01)

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        deadline = time.monotonic() + 90
        while len({p for p, _offset in list(acked)}) < PARTITIONS and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len({p for p, _offset in list(acked)}) == PARTITIONS, broker.log()
        broker.kill()  # SIGKILL mid-loop, every partition holding acknowledged records
        acked_before_crash = dict(acked)
        restart_at = broker.log_path.stat().st_size
        broker.start()
        deadline = time.monotonic() + 90
        while len(acked) < len(acked_before_crash) + 5 * PARTITIONS and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join()
    assert producer.flush(120) == 0
    assert not failed, failed[:5]

    found = _read_everything(broker.bootstrap, topic, set(acked))  # every partition is open now
    recovered = _recovered_since(broker, restart_at)
    assert recovered >= PARTITIONS, f"only {recovered} logs recovered after kill -9: {broker.log()}"
    for where, value in acked_before_crash.items():
        assert found.get(where) == value, f"acknowledged {value!r} at {where} is missing after kill -9"
    assert found == acked, "every acknowledged record, where it was acknowledged, and nothing else"

    assert broker.stop(timeout=60) == 0, broker.log()  # SIGTERM: every log closed and marked clean
    unmarked = [p for p in range(PARTITIONS)
                if not (data / "log" / f"{topic}-{p}" / ".kafka_cleanshutdown").exists()]
    assert not unmarked, f"no clean-shutdown marker in partitions {unmarked[:10]}"
    clean_start_at = broker.log_path.stat().st_size
    broker.start()
    assert _read_everything(broker.bootstrap, topic, set(acked)) == found  # every partition opened again
    assert _recovered_since(broker, clean_start_at) == 0, "a log recovered after a clean stop"
    assert broker.stop(timeout=60) == 0


def test_logs_of_a_topic_never_opened_before_a_stop_are_not_counted_recovered(tmp_path):
    """A topic created just before a stop (as __consumer_offsets by a first group) has directories
    whose logs were never opened, so no clean-shutdown marker: the next start has nothing of
    theirs to recover, and says so."""
    broker = BrokerProcess(tmp_path / "data")
    try:
        broker.start()
        create_topic(broker.bootstrap, partitions=30)
        assert broker.stop(timeout=60) == 0, broker.log()
        restart_at = broker.log_path.stat().st_size
        broker.start()
        found = wait_for(lambda: OPENED.search(broker.log_path.read_text(errors="replace")[restart_at:]), timeout=60,
                         what="the start's line for opening every partition", detail=broker.log)
        assert int(found.group(1)) >= 30 and int(found.group(2)) == 0, found.group(0)
    finally:
        broker.kill()
