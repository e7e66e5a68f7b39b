"""A bucket root answers a produce after the flush tick stored it; a client's pipelined requests
on one connection are appended meanwhile and share the tick (not one tick each), and every
response still comes back in request order."""

from __future__ import annotations

import os
import time

from kio.schema.metadata.v12 import request as metadata_req
from kio.schema.produce.v9 import request as produce_req

from tests.support.bucket_broker import BucketBrokers
from tests.support.topics import create_topic
from tests.support.wire import TIMEOUT, batch
from topiclake.client.conn import BrokerConnection
from topiclake.protocol import codec
from topiclake.store.objects import ObjectStore

TOPIC = "pipelined"


def _produce(values: list[bytes]) -> produce_req.ProduceRequest:
    return produce_req.ProduceRequest(transactional_id=None, acks=-1, timeout=TIMEOUT, topic_data=(
        produce_req.TopicProduceData(name=TOPIC, partition_data=(
            produce_req.PartitionProduceData(index=0, records=batch(values)),)),))


def test_pipelined_produces_share_a_flush_tick_and_are_answered_in_order(tmp_path, s3_root, monkeypatch):
    for key, value in s3_root.env.items():
        monkeypatch.setitem(os.environ, key, value)
    brokers = BucketBrokers(tmp_path, s3_root.root, storage="flush_ms = 2000\nseal_ms = 600000")
    try:
        broker = brokers.start("pipelined")
        create_topic(broker.bootstrap, 1, TOPIC)
        requests = [_produce([b"a0", b"a1"]), _produce([b"b0", b"b1", b"b2"]),
                    metadata_req.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                 include_topic_authorized_operations=False),
                    _produce([b"c0"]), _produce([b"d0", b"d1"])]
        with BrokerConnection(broker.bootstrap) as conn:
            # every request in one write: the broker reads the next while the first waits for its tick
            conn.send_raw(b"".join(codec.encode_request(i, body, "pipeliner") for i, body in enumerate(requests)))
            answers = [codec.decode_response(conn.read_frame(), body) for body in requests]
        assert [correlation for correlation, _ in answers] == list(range(len(requests)))
        produced = [answer.responses[0].partition_responses[0] for i, (_c, answer) in enumerate(answers) if i != 2]
        assert [p.error_code for p in produced] == [0, 0, 0, 0]
        assert [p.base_offset for p in produced] == [0, 2, 5, 6]
        assert [b.port for b in answers[2][1].brokers] == [int(broker.bootstrap.rpartition(":")[2])]
        # One tick per request would have made four flush objects; a tick boundary inside the burst, two.
        flushes = [info.key for info in ObjectStore(s3_root.root).list(f"log/{TOPIC}-0/")
                   if info.key.endswith(".log") and ".e" in info.key.rpartition("/")[2]]
        assert 1 <= len(flushes) <= 2, flushes
    finally:
        brokers.kill_all()


def _single_record_produces(tmp_path, s3_root, monkeypatch, storage: str, count: int) -> float:
    """Seconds until `count` one-record produces, written in one go on one connection, are answered
    (each checked: in request order, consecutive offsets)."""
    for key, value in s3_root.env.items():
        monkeypatch.setitem(os.environ, key, value)
    brokers = BucketBrokers(tmp_path, s3_root.root, storage=storage)
    try:
        broker = brokers.start("pipeliner")
        create_topic(broker.bootstrap, 1, TOPIC)
        requests = [_produce([f"r{i}".encode()]) for i in range(count)]
        with BrokerConnection(broker.bootstrap) as conn:
            started = time.monotonic()
            conn.send_raw(b"".join(codec.encode_request(i, body, "pipeliner") for i, body in enumerate(requests)))
            answers = [codec.decode_response(conn.read_frame(), body) for body in requests]
            elapsed = time.monotonic() - started
        produced = [answer.responses[0].partition_responses[0] for _c, answer in answers]
        assert [p.error_code for p in produced] == [0] * count
        assert [p.base_offset for p in produced] == list(range(count))
        return elapsed
    finally:
        brokers.kill_all()


def test_a_client_at_its_in_flight_limit_brings_the_tick_forward(tmp_path, s3_root, monkeypatch):
    """Ten pipelined produces against a 6 s tick: five due (an idempotent client's in-flight limit)
    flush `full_window_flush_ms` later instead of at the tick. Waiting for the tick takes 6 s."""
    elapsed = _single_record_produces(tmp_path, s3_root, monkeypatch, count=10,
                                      storage="flush_ms = 6000\nfull_window_flush_ms = 100\nseal_ms = 600000")
    assert elapsed < 4.0, f"ten pipelined produces took {elapsed:.1f} s: the full window waited for the tick"


def test_a_client_without_an_in_flight_limit_is_read_a_tick_at_a_time(tmp_path, s3_root, monkeypatch):
    """librdkafka's default producer (no idempotence) has no in-flight limit and sends a request
    per produce call at linger.ms 0: 300 pipelined produces are read and flushed together, not five
    a tick (which took 60 ticks: 300 requests at 5 per 100 ms)."""
    elapsed = _single_record_produces(tmp_path, s3_root, monkeypatch, count=300,
                                      storage="flush_ms = 500\nfull_window_flush_ms = 100\nseal_ms = 600000")
    assert elapsed < 3.0, f"300 pipelined produces took {elapsed:.1f} s: read a few a tick"
