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
