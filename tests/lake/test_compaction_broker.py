"""Compaction and retention beside a live broker process, checked with real Kafka clients
(kafka-python): records produced through the broker, compacted by the Spark job while a producer
keeps writing, then read from the beginning with their original offsets; retention moves the
log start offset that ListOffsets answers, and fetching below it is OFFSET_OUT_OF_RANGE."""

from __future__ import annotations

import threading
import time

import pytest

from tests.support.broker_process import BrokerProcess
from topiclake.lake.runs.compaction import CompactOptions, compact, format_summary
from topiclake.lake.runs.retention import RetentionOptions, retain
from topiclake.segments import ownership
from topiclake.segments.storage import StorageLayout, TopicRegistry

from .compaction_model import Rec, committed_view, model_round

kafka = pytest.importorskip("kafka")
from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.errors import OffsetOutOfRangeError  # noqa: E402


def consume_all(bootstrap, topic, end, **kwargs):
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000,
                             **kwargs)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    out = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and consumer.position(tp) < end:
        for records in consumer.poll(timeout_ms=500).values():
            out += [(r.offset, r.key, r.value) for r in records]
    consumer.close()
    return out


def test_compaction_and_retention_beside_a_live_broker(spark, root):
    layout = StorageLayout(root)
    TopicRegistry(layout).create("kv", 1, {"cleanup.policy": "compact", "segment.bytes": "2000",
                                           "delete.retention.ms": "60000"})
    TopicRegistry(layout).create("ev", 1, {"segment.bytes": "1000", "retention.ms": "1000"})
    broker = BrokerProcess(root).start()
    try:
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
        written = []
        for i in range(300):
            key = f"key-{i % 17}".encode()
            value = None if i % 11 == 0 else f"value-{i}".encode()
            meta = producer.send("kv", key=key, value=value, partition=0).get(10)
            written.append(Rec(meta.offset, key, value, False))
        for i in range(100):
            producer.send("ev", key=b"e", value=b"x" * 50, partition=0).get(10)
        upper = max(int(p.name.split(".")[0]) for p in layout.log_dir("kv", 0).glob("*.log"))

        # a producer and a consumer keep going while compaction and retention run
        live, errors, stop = [], [], threading.Event()

        def produce_live():
            try:
                for i in range(2000):
                    if stop.is_set():
                        break
                    meta = producer.send("kv", key=f"live-{i}".encode(), value=b"L%d" % i, partition=0).get(10)
                    live.append(Rec(meta.offset, f"live-{i}".encode(), b"L%d" % i, False))
                    time.sleep(0.005)
            except Exception as exc:  # any client error fails the test
                errors.append(exc)

        thread = threading.Thread(target=produce_live)
        thread.start()
        try:
            result = compact(spark, CompactOptions(root=root, topics=("kv",), force=True))
            during = consume_all(broker.bootstrap, "kv", upper)  # reading while the producer writes
            retained = retain(RetentionOptions(root=root, topics=("ev",), now_ms=int(time.time() * 1000) + 10_000))
        finally:
            stop.set()
            thread.join(60)
        assert not errors, errors
        # The jobs ran beside the broker under its ownership lock (issue 10): they never need it,
        # and the broker still owns the root afterwards.
        assert ownership.owner_of(root)["pid"] == broker.proc.pid
        assert not result.errors, format_summary(result)
        assert result.partitions[0].records_dropped > 0

        everything = written + live
        end = max(r.offset for r in everything) + 1
        expected = committed_view(model_round(everything, upper=upper))
        got = consume_all(broker.bootstrap, "kv", end, isolation_level="read_committed")
        assert got == expected
        assert during[: len([r for r in expected if r[0] < upper])] == [r for r in expected if r[0] < upper]

        # retention: ListOffsets earliest answers the new log start; below it is out of range
        start = retained.partitions[0].log_start_offset
        assert start > 0 and retained.partitions[0].deleted
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="none",
                                 enable_auto_commit=False)
        tp = TopicPartition("ev", 0)
        assert consumer.beginning_offsets([tp])[tp] == start
        consumer.assign([tp])
        consumer.seek(tp, 0)
        with pytest.raises(OffsetOutOfRangeError):
            for _ in range(20):
                consumer.poll(timeout_ms=500)
        consumer.seek(tp, start)
        first = []
        for _ in range(20):
            first += [r.offset for rs in consumer.poll(timeout_ms=500).values() for r in rs]
            if first:
                break
        assert first and first[0] == start
        consumer.close()
        producer.close()
    finally:
        assert broker.stop() == 0
    assert ownership.owner_of(root) is None
