"""A bucket root answers a produce after the flush tick stored it; a client's pipelined requests
on one connection are appended meanwhile and share the tick (not one tick each), and every
response still comes back in request order."""

from __future__ import annotations

import os

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
