"""Produce requests waiting for their flush are answered when the partition stops being led here
(its topic deleted, or resigned in a cluster), not left to time out: a connection answers in
order, so each pipelined request would otherwise wait out its whole timeout after the one before."""

from __future__ import annotations

import dataclasses
import datetime
import time

from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from topiclake.client.conn import BrokerConnection
from topiclake.protocol import codec

from tests.support.bucket_broker import create_topic
from tests.support.cluster_clients import produce_request, raw_batch

PIPELINED = 4


def waiting_produce(value: bytes):
    """acks=all, waiting up to 30 s for its flush."""
    return dataclasses.replace(produce_request("doomed", 0, raw_batch(value)), timeout=datetime.timedelta(seconds=30))


def test_pipelined_produces_to_a_deleted_topic_are_answered_at_once(slow_flush_brokers):
    broker = slow_flush_brokers.start("doomed")
    create_topic(broker.bootstrap, "doomed")
    with BrokerConnection(broker.bootstrap, timeout=120) as client:
        for n in range(PIPELINED):  # each waiting for the next flush (flush_ms 5 s)
            client.send_raw(codec.encode_request(n + 1, waiting_produce(b"r%d" % n), "t"))
        time.sleep(0.5)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.delete_topics(["doomed"])["doomed"].result(30)
        deleted = time.monotonic()
        codes = []
        for n in range(PIPELINED):
            _correlation, response = codec.decode_response(client.read_frame(), waiting_produce(b""))
            codes.append(response.responses[0].partition_responses[0].error_code)
        took = time.monotonic() - deleted
    assert codes == [ErrorCode.not_leader_or_follower] * PIPELINED, codes
    assert took < 10, f"answered {took:.1f} s after the deletion"
