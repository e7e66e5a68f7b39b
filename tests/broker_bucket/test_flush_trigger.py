"""The flush tick's two triggers: `flush_ms`, and at once when a partition holds `flush_bytes`
unflushed (a produce request waiting on it wakes the tick)."""

from __future__ import annotations

import os
import time

from tests.support.bucket_broker import AckedProducer, BucketBrokers


def _acknowledged_within(tmp_path, s3_root, monkeypatch, storage: str, name: str) -> float:
    for key, value in s3_root.env.items():
        monkeypatch.setitem(os.environ, key, value)
    (tmp_path / name).mkdir()
    brokers = BucketBrokers(tmp_path / name, s3_root.root, storage=storage)
    try:
        broker = brokers.start(name)
        producer = AckedProducer(broker.bootstrap, f"trigger-{name}", "v", **{"batch.size": 200}).start()
        started = time.monotonic()
        producer.wait_acked(20, timeout=90)
        producer.stop()
        return time.monotonic() - started
    finally:
        brokers.kill_all()


def test_a_partition_at_flush_bytes_flushes_without_waiting_for_the_tick(tmp_path, s3_root, monkeypatch):
    # flush_ms of a minute: only the byte trigger can acknowledge 20 records in seconds
    took = _acknowledged_within(tmp_path, s3_root, monkeypatch, "flush_ms = 60000\nflush_bytes = 1", "bytes")
    assert took < 20, f"{took:.1f} s: the byte trigger did not wake the tick"


def test_partitions_taken_over_while_the_tick_runs_all_flush(tmp_path, s3_root, monkeypatch):
    """A takeover's tail joins the tick only once the partition is served: a tick between the two
    (here one a millisecond, beside 24 takeovers) used to drop the tail as "not served", and every
    produce to that partition timed out until its leader changed."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    for key, value in s3_root.env.items():
        monkeypatch.setitem(os.environ, key, value)
    (tmp_path / "busy-tick").mkdir()
    brokers = BucketBrokers(tmp_path / "busy-tick", s3_root.root, storage="flush_ms = 1")
    try:
        for name in ("first", "second"):  # the second takes every partition over from the bucket
            broker = brokers.start(name)
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            if name == "first":
                admin.create_topics([NewTopic("many", 24, 1)])["many"].result(30)
            producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0,
                                 "message.timeout.ms": 30000})
            acked: set[int] = set()
            for partition in range(24):
                producer.produce("many", b"to %d" % partition, partition=partition,
                                 on_delivery=lambda err, msg: err or acked.add(msg.partition()))
            producer.flush(40)
            assert sorted(set(range(24)) - acked) == [], "partitions whose produce was never acknowledged"
            broker.proc.kill()
            broker.proc.wait(10)
    finally:
        brokers.kill_all()
