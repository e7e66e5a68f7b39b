"""Faults of a bucket-root broker, each by killing: the old owner paused past its lease (SIGSTOP)
while a new broker takes over, then resumed; and the object store killed -9 and restarted while
producers send."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

from tests.support.bucket_broker import AckedProducer, BucketBrokers, consume_all

TOPIC = "faults"


def _exactly_once(records, acked) -> None:
    values = Counter(value for value, _p, _o in records)
    assert not [v for v, n in values.items() if n > 1], "a record read twice"
    assert {value for value, _p, _o in acked} <= set(values), "an acknowledged record lost"
    assert all(n == 1 for n in Counter((p, o) for _v, p, o in records).values()), "an offset used twice"


def _open_every_partition(bootstrap: str, partitions: int = 2) -> None:
    """One record acknowledged in each partition: the broker took each over (a takeover paused
    between its lease check and its claim could still fence the next owner: OBJECT-STORAGE.md)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for partition in range(partitions):
        producer.produce(TOPIC, value=f"opened-{partition}".encode(), partition=partition)
    assert producer.flush(60) == 0


def test_a_paused_owner_resumed_after_a_takeover_stops_and_its_late_writes_stay_invisible(bucket_brokers):
    old = bucket_brokers.start("old")
    _open_every_partition(old.bootstrap)  # no takeover of its own is in flight when it is paused
    producer = AckedProducer(old.bootstrap, TOPIC, "old").start()
    producer.wait_acked(200)
    os.kill(old.proc.pid, signal.SIGSTOP)  # produce requests in flight stay in its sockets
    time.sleep(0.5)
    producer.stop()
    acked_before = list(producer.acked)

    new = bucket_brokers.start("new")  # takes the lease once it saw it unrenewed for lease_ms
    more = AckedProducer(new.bootstrap, TOPIC, "new").start()
    more.wait_acked(100)
    os.kill(old.proc.pid, signal.SIGCONT)  # the old owner appends what it had, flushes, checks the fence
    more.wait_acked(len(more.acked) + 100)
    more.stop(flush_s=30)
    assert old.proc.wait(30) != 0, "the fenced broker kept running"
    assert "no longer leads" in old.log()
    assert new.proc.poll() is None, f"the new owner was fenced: {new.log()[-600:]}"

    seen = consume_all(new.bootstrap, TOPIC, len(acked_before) + len(more.acked))
    _exactly_once(seen, [*producer.acked, *more.acked])
    new.stop()
    again = bucket_brokers.start("again")  # a third takeover reads the bucket alone
    reread = consume_all(again.bootstrap, TOPIC, len(seen))
    assert sorted(reread) == sorted(seen), "the old owner's late objects became visible"


def test_the_store_killed_and_restarted_mid_produce_then_the_broker_recovers_by_itself(tmp_path, own_store):
    server, root = own_store
    brokers = BucketBrokers(tmp_path, root)
    try:
        broker = brokers.start("only")
        producer = AckedProducer(broker.bootstrap, TOPIC, "v", **{"request.timeout.ms": 5000}).start()
        producer.wait_acked(200)
        server.kill9()
        stalled = len(producer.acked)
        time.sleep(8)  # longer than the produce requests' 5 s timeout
        assert len(producer.acked) <= stalled + 50, "acknowledged while the store was down"
        server.restart()
        producer.wait_acked(stalled + 300, timeout=90)
        producer.stop(flush_s=60)
        assert broker.proc.poll() is None, "the broker did not survive the store's restart"
        told = broker.log_path.read_text()
        assert "rejected: request_timed_out" in told, "producers were not told to retry while the store was down"
        broker.stop()
        reader = brokers.start("reader")
        _exactly_once(consume_all(reader.bootstrap, TOPIC, len(producer.acked)), producer.acked)
    finally:
        brokers.kill_all()


def test_a_stop_while_the_store_is_down_ends_within_a_grace_period_and_loses_nothing_acknowledged(tmp_path, own_store):
    """SIGTERM with the store killed: the flush under way times out once, then the waiting produces
    are answered NOT_LEADER_OR_FOLLOWER and the broker exits, well within Kubernetes' 30 s grace
    (it took 33 s: every tick, seal and the last flush each waited out flush_timeout_ms)."""
    server, root = own_store
    brokers = BucketBrokers(tmp_path, root)
    try:
        broker = brokers.start("only")
        producer = AckedProducer(broker.bootstrap, TOPIC, "v").start()
        producer.wait_acked(200)
        server.kill9()
        time.sleep(1)  # produces now wait for a flush that cannot land
        started = time.monotonic()
        assert broker.stop(timeout=20) == 0, broker.log()[-1500:]
        took = time.monotonic() - started
        producer.stop()
        assert took < 20, f"the stop took {took:.1f} s"
        assert "the object store is unavailable" in broker.log()
        server.restart()
        reader = brokers.start("reader")
        _exactly_once(consume_all(reader.bootstrap, TOPIC, len(producer.acked)), producer.acked)
    finally:
        brokers.kill_all()
