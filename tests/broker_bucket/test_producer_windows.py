"""An idempotent producer's in-flight batches across a bucket takeover: the producer snapshot at
the manifest's end keeps each producer's last batch only, so the new leader reads the headers of
the batches before it back from the last closed segment. Resent there, the last five batches are
duplicates answered with their offsets (as Kafka's new leader answers them), not
OUT_OF_ORDER_SEQUENCE_NUMBER, which stops librdkafka producing to the partition."""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode

from tests.support import wire
from tests.support.bucket_broker import wait_sealed
from tests.support.topics import create_topic
from tests.support.txn_wire import init_producer_id
from topiclake.client.conn import BrokerConnection
from topiclake.objectlog.keys import PartitionKeys
from topiclake.store.objects import ObjectStore


def test_resent_batches_after_a_takeover_right_after_a_seal_are_duplicates(sealing_brokers):
    first = sealing_brokers.start("first")
    topic = create_topic(first.bootstrap, name="retries")
    now = int(time.time() * 1000)
    with BrokerConnection(first.bootstrap) as client:
        error, producer_id, epoch = init_producer_id(client, None)
        assert error == ErrorCode.none
        sent = {seq: wire.batch([b"v%d" % seq, b"v%d" % (seq + 1)], ts=now, producer_id=producer_id, epoch=epoch,
                                seq=seq) for seq in range(0, 14, 2)}
        offsets = {}
        for seq, data in sent.items():
            answer = wire.produce(client, topic, data)
            assert answer.error_code == ErrorCode.none
            offsets[seq] = answer.base_offset
    wait_sealed(ObjectStore(sealing_brokers.root), PartitionKeys(topic, 0), 14)  # the tail is empty
    first.kill()

    second = sealing_brokers.start("second")
    with BrokerConnection(second.bootstrap) as client:
        for seq in (4, 6, 8, 10, 12):  # the last five, in flight when the leader died
            answer = wire.produce(client, topic, sent[seq])
            assert (answer.error_code, answer.base_offset) == (ErrorCode.none, offsets[seq]), seq
        answer = wire.produce(client, topic, sent[2])  # six back: past the window, as in Kafka
        assert answer.error_code == ErrorCode.out_of_order_sequence_number
        after = wire.produce(client, topic, wire.batch([b"v14"], ts=now, producer_id=producer_id, epoch=epoch, seq=14))
        assert (after.error_code, after.base_offset) == (ErrorCode.none, 14)
        read: list[tuple[int, bytes]] = []
        while len(read) < 15:  # one closed segment per fetch
            found = wire.values_of(wire.fetch(client, topic, len(read)).records)
            assert found, read
            read += found
        assert read == [(n, b"v%d" % n) for n in range(15)]  # each record once
