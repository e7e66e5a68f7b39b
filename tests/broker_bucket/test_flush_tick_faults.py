"""The flush tick's error paths (lib/broker/bucket/service.py `_guarded` and `_tick_forever`), each
forced by a proxy in front of the real versitygw failing one kind of request
(tests/support/store_faults.py): a tick that fails does not stop the later ones, and the records
it held are acknowledged by a later tick (or answered with a retriable error and retried), each
exactly once at one offset, none lost."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tests.support.bucket_broker import AckedProducer, BucketBrokers, consume_all, create_topic
from tests.support.store_faults import LOSE_ANSWER
from tests.support.waits import wait_for

TOPIC = "tick-faults"
FLUSH_OBJECT = rf"/log/{TOPIC}-0/\d+\.e\d+\.log$"
FENCE_CHECK = rf"/log/{TOPIC}-0/leader-epochs/\d+\.claim$"  # the HEAD of epoch+1's claim after each flush
# The tick's flush gives up on the store after 2 s (its retries within one tick), not 10.
STORAGE = "flush_timeout_ms = 2000"


def _exactly_once(records, acked) -> None:
    values = Counter(value for value, _p, _o in records)
    assert not [v for v, n in values.items() if n > 1], "a record read twice"
    assert {value for value, _p, _o in acked} <= set(values), "an acknowledged record lost"
    assert sorted(o for _v, _p, o in records) == list(range(len(records))), "offsets not each used once"
    assert {(v, o) for v, _p, o in acked} <= {(v, o) for v, _p, o in records}, "acknowledged at another offset"


def _log(broker) -> str:
    return broker.log_path.read_text(errors="replace")


def _producing(brokers: BucketBrokers, **config):
    """(broker, producer): a broker on the root, its topic taken over, 100 records acknowledged
    and more being sent."""
    broker = brokers.start("only")
    create_topic(broker.bootstrap, TOPIC)
    producer = AckedProducer(broker.bootstrap, TOPIC, "v", **config).start()
    producer.wait_acked(100)
    return broker, producer


def _read_back_from_bucket(brokers: BucketBrokers, broker, producer) -> None:
    """Stop `broker`; a new one reads the bucket alone: every acknowledged record once, at its offset."""
    broker.stop()
    reader = brokers.start("reader")
    _exactly_once(consume_all(reader.bootstrap, TOPIC, len(producer.acked)), producer.acked)


@pytest.mark.parametrize("method, pattern, action, says", [
    # the flush object's PUT refused (503 past the client's retries) until the store is back
    ("PUT", FLUSH_OBJECT, 503, "not stored yet, retried at the next tick"),
    # the PUT landed, its fence check refused: the next tick finds its own bytes there, no second copy
    ("HEAD", FENCE_CHECK, 503, "not stored yet, retried at the next tick"),
    # the store refusing for good (403 is not retried by the client): logged, the next tick tries again
    ("PUT", FLUSH_OBJECT, 403, "flush or seal failed"),
], ids=["put-refused", "fence-check-refused", "put-denied"])
def test_a_tick_whose_flush_fails_leaves_its_records_to_a_later_tick(tmp_path, store_proxy, method, pattern,
                                                                      action, says):
    proxy, root, _direct = store_proxy
    brokers = BucketBrokers(tmp_path, root, storage=STORAGE)
    try:
        broker, producer = _producing(brokers, **{"request.timeout.ms": 5000})

        rule = proxy.fail(method, pattern, action=action, times=None)
        wait_for(lambda: _log(broker).count(says) >= 2, 20, 0.1, what=f"two ticks logging {says!r}",
                 detail=lambda: _log(broker)[-3000:])
        stalled = len(producer.acked)
        time.sleep(1)
        assert len(producer.acked) == stalled, "acknowledged while every flush failed"
        proxy.clear(rule)
        assert rule.hits >= 2, rule.seen

        producer.wait_acked(stalled + 300, timeout=60)  # later ticks flush what the failed ones held
        producer.stop(flush_s=60)
        assert not producer.failed, producer.failed[:3]
        assert broker.proc.poll() is None, "the broker stopped"
        assert "no longer leads" not in _log(broker)
        _read_back_from_bucket(brokers, broker, producer)
    finally:
        brokers.kill_all()


def test_a_flush_whose_answer_is_lost_is_acknowledged_once(tmp_path, store_proxy):
    """The store applies a flush object's create but the connection drops before its answer: the
    client's retry finds the key taken (412), the flush reads it back, finds its own bytes, and
    acknowledges them once."""
    proxy, root, _direct = store_proxy
    brokers = BucketBrokers(tmp_path, root, storage=STORAGE)
    try:
        broker, producer = _producing(brokers)
        rule = proxy.fail("PUT", FLUSH_OBJECT, action=LOSE_ANSWER, times=3)
        wait_for(lambda: rule.hits == 3, 20, 0.05, what="three flush answers lost")
        producer.wait_acked(len(producer.acked) + 200)
        producer.stop(flush_s=60)
        assert not producer.failed, producer.failed[:3]
        assert broker.proc.poll() is None and "no longer leads" not in _log(broker), _log(broker)[-2000:]
        _read_back_from_bucket(brokers, broker, producer)
    finally:
        brokers.kill_all()


def test_a_tick_that_raises_does_not_stop_the_later_ones(tmp_path, store_proxy):
    """The store refusing a new topic's metadata object (403: the client does not retry) makes
    each tick's metadata sync raise before it flushes anything: the tick loop logs it and ticks
    again; once the store takes the object, the records produced meanwhile are acknowledged."""
    from confluent_kafka.admin import AdminClient, NewTopic

    proxy, root, direct = store_proxy
    brokers = BucketBrokers(tmp_path, root, storage=STORAGE)
    try:
        broker, producer = _producing(brokers)

        rule = proxy.fail("PUT", r"/topics/refused\.json$", action=403, times=None)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        created = admin.create_topics([NewTopic("refused", 1, 1)])["refused"]  # its answer is not the point
        wait_for(lambda: _log(broker).count("flush tick failed") >= 2, 20, 0.1, what="two failed ticks",
                 detail=lambda: _log(broker)[-3000:])
        stalled = len(producer.acked)
        time.sleep(1)
        assert len(producer.acked) == stalled, "acknowledged while the metadata could not be stored"
        proxy.clear(rule)

        producer.wait_acked(stalled + 300, timeout=60)
        producer.stop(flush_s=60)
        assert not producer.failed, producer.failed[:3]
        assert direct.head("topics/refused.json") is not None, "the refused topic's object never reached the bucket"
        assert broker.proc.poll() is None, "the broker stopped"
        created.exception(30)  # settled either way before the admin client goes
        _read_back_from_bucket(brokers, broker, producer)
    finally:
        brokers.kill_all()


@pytest.mark.parametrize("action", [LOSE_ANSWER, 500], ids=["answer-lost", "applied-then-500"])
def test_a_metadata_write_that_landed_without_its_answer_is_not_another_writer(tmp_path, store_proxy, action):
    """A new topic's metadata object created in the bucket, its answer lost (or a 500 after the
    write was applied, as S3 may answer): the client's retry meets the object (412). That is this
    broker's own write, not another broker's: the broker goes on (it stopped, fenced, before)."""
    proxy, root, direct = store_proxy
    brokers = BucketBrokers(tmp_path, root, storage=STORAGE)
    try:
        broker = brokers.start("only")
        rule = proxy.fail("PUT", rf"/topics/{TOPIC}\.json$", action=action, times=1, applied=True)
        create_topic(broker.bootstrap, TOPIC)
        assert rule.hits == 1
        producer = AckedProducer(broker.bootstrap, TOPIC, "v").start()
        producer.wait_acked(200)
        producer.stop(flush_s=60)
        assert direct.head(f"topics/{TOPIC}.json") is not None
        assert broker.proc.poll() is None and "no longer leads" not in _log(broker), _log(broker)[-2000:]
    finally:
        brokers.kill_all()


def test_a_partition_whose_flush_is_refused_waits_flush_ms_and_the_others_do_not(tmp_path, store_proxy):
    """A flush the store refuses for good (403) fails inside the tick without raising. At
    flush_bytes = 1 every produce asks for a tick at once: the refused partition is flushed again
    only at the regular ticks (its PUTs follow flush_ms, not the produce requests), while another
    partition's produces are still stored at once, not held to the tick."""
    from confluent_kafka import Producer

    proxy, root, _direct = store_proxy
    flush_ms = 400
    brokers = BucketBrokers(tmp_path, root, storage=f"{STORAGE}\nflush_ms = {flush_ms}\nflush_bytes = 1")
    try:
        # not idempotent: its requests are not held to 5 in flight, each one asks for a tick
        broker, producer = _producing(brokers, **{"request.timeout.ms": 5000, "linger.ms": 0,
                                                  "enable.idempotence": False, "max.in.flight": 1000})
        create_topic(broker.bootstrap, "healthy")
        healthy = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "acks": "all"})
        healthy.produce("healthy", b"first")
        assert healthy.flush(30) == 0
        rule = proxy.fail("PUT", FLUSH_OBJECT, action=403, times=None)
        wait_for(lambda: rule.hits >= 1, 20, 0.05, what="a refused flush")
        first, began = rule.hits, time.monotonic()
        waits = []
        while time.monotonic() - began < 3.0:
            sent = time.monotonic()
            healthy.produce("healthy", b"x")
            assert healthy.flush(30) == 0
            waits.append(time.monotonic() - sent)
        refused, took = rule.hits - first, time.monotonic() - began
        proxy.clear(rule)
        # a seal (seal_ms) may add its own refused PUT to a tick's
        assert refused <= 2 * took * 1000 / flush_ms + 3, f"{refused} refused PUTs in {took:.1f} s at flush_ms {flush_ms}"
        waits.sort()
        assert waits[len(waits) // 2] < flush_ms / 2000, f"the healthy partition waited {waits} (flush_ms {flush_ms})"
        producer.wait_acked(len(producer.acked) + 100, timeout=60)  # stored once the store takes them
        producer.stop(flush_s=60)
        assert not producer.failed, producer.failed[:3]
    finally:
        brokers.kill_all()
