"""Records a client held back while its previous request waited for the flush tick (librdkafka's
idempotent producer keeps one request per partition in flight) are stored once they are
`flush_ms` old, not a whole tick after they arrive; at most one such early tick between two
regular ones, and none for records older than two ticks (tick_schedule.TickSchedule). Raw produce requests
with chosen batch timestamps, on a broker that flushes every 5 s and never seals meanwhile (a
seal flushes what is there)."""

from __future__ import annotations

import dataclasses
import datetime
import os
import time

from kio.schema.errors import ErrorCode

from topiclake.client.conn import BrokerConnection
from topiclake.segments.batch import Record, build_batch

from tests.support.bucket_broker import BucketBrokers, create_topic
from tests.support.cluster_clients import produce_request

FLUSH_S = 5.0


def acknowledged_after(client: BrokerConnection, value: bytes, created_s: float) -> float:
    """Seconds until an acks=all produce of one record created at `created_s` (the wall clock) is answered."""
    batch = build_batch([Record(0, int(created_s * 1000), None, value, ())], base_offset=0)
    sent = time.monotonic()
    request = dataclasses.replace(produce_request("aged", 0, batch), timeout=datetime.timedelta(seconds=30))
    answer = client.request(request).responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.none, answer
    return time.monotonic() - sent


def test_old_records_are_stored_when_a_tick_old_and_early_ticks_are_rationed(tmp_path, s3_root, monkeypatch):
    for key, value in s3_root.env.items():
        monkeypatch.setitem(os.environ, key, value)
    brokers = BucketBrokers(tmp_path, s3_root.root, storage=f"flush_ms = {int(FLUSH_S * 1000)}\nseal_ms = 600000")
    try:
        broker = brokers.start("aged")
        create_topic(broker.bootstrap, "aged")
        _check_ticks(broker.bootstrap)
    finally:
        brokers.kill_all()


def _check_ticks(bootstrap: str) -> None:
    with BrokerConnection(bootstrap, timeout=60) as client:
        acknowledged_after(client, b"first", time.time())  # the log is open: later waits are the tick's alone
        # created 4.5 s ago (held by its client): stored when 5 s old, not after a tick of 5 s more
        first = acknowledged_after(client, b"held", time.time() - FLUSH_S + 0.5)
        assert first < 2.5, f"a record {FLUSH_S - 0.5} s old waited {first:.1f} s more"
        # just as old, right after: the early tick since the regular one was had, so it waits for the next
        second = acknowledged_after(client, b"held too", time.time() - FLUSH_S + 0.5)
        assert second > 2.5, f"a second early tick within flush_ms ({second:.1f} s): PUTs unbounded"
        # a record from the future (a producer clock ahead) brings nothing forward either
        ahead = acknowledged_after(client, b"ahead", time.time() + 60)
        assert ahead > 2.5, f"a record stamped in the future was stored after {ahead:.1f} s"
        # nor does a replayed record a day old: it was not held back for a tick
        replayed = acknowledged_after(client, b"replayed", time.time() - 86400)
        assert replayed > 2.5, f"a replayed record a day old was stored after {replayed:.1f} s"
