"""The table is the archive, end to end: a real broker process, a topic with remote.storage.enable,
records produced by confluent-kafka (keys, null keys and values, headers, a committed and an
aborted transaction), retention that keeps what the table lacks, the real ingest job, retention
again (now the old segments go), then every client reads from offset 0 across the boundary
between the table and the log: confluent-kafka, kafka-python, aiokafka, Kafka's console consumer
and Spark's Kafka source get every committed record, byte-equal; a group resumes below the local
start; the aborted records never come back; ListOffsets answers the table's first offset for
EARLIEST and the log's for EARLIEST_LOCAL; `topics describe` shows both."""

from __future__ import annotations

import asyncio
import datetime
import json
import subprocess
import sys
import time

import pytest
from kio.schema.list_offsets.v11 import request as offsets_req

from topiclake.client import admin
from topiclake.client.client import ClusterClient
from topiclake.client.conn import BrokerConnection
from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.runs.retention import RetentionOptions, retain

from tests.support.kafka_tools import peer_broker_process, spark_submit_with_kafka_source
from tests.support.topics import create_topic
from tests.support.waits import wait_for
from tests.support.clients import commit_offsets

pytestmark = pytest.mark.slow

TOPIC, PARTITIONS = "archived", 2
EARLIEST, EARLIEST_LOCAL = -2, -4


@pytest.fixture(scope="module")
def archive_broker(tmp_path_factory):
    b = peer_broker_process(tmp_path_factory.mktemp("archive"))
    yield b
    b.stop()


def produce(bootstrap: str) -> dict[int, list[tuple]]:
    """partition -> the committed records (offset, key, value, headers), one batch each."""
    from confluent_kafka import Producer

    acked: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}

    def remember(headers):
        def on_delivery(err, msg):
            assert err is None, err
            acked[msg.partition()].append((msg.offset(), msg.key(), msg.value(), headers))
        return on_delivery

    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(60):
        headers = [("seq", str(i).encode()), ("empty", b""), ("none", None)] if i % 3 else []
        plain.produce(TOPIC, key=None if i % 7 == 0 else b"key-%d" % i, value=None if i % 11 == 5 else b"v" * (i % 40),
                      headers=headers, partition=i % PARTITIONS, on_delivery=remember(headers))
        plain.flush(15)  # one batch per record: segments of a few records each
        if i == 20:
            txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "archive-txn"})
            txn.init_transactions(15)
            txn.begin_transaction()
            for j in range(4):
                txn.produce(TOPIC, key=b"committed-%d" % j, value=b"c", partition=0, on_delivery=remember([]))
            txn.commit_transaction(15)
            txn.begin_transaction()
            for j in range(3):
                txn.produce(TOPIC, key=b"aborted-%d" % j, value=b"ABORTED", partition=0)
            txn.flush(15)
            txn.abort_transaction(15)
    return {p: sorted(records) for p, records in acked.items()}


def offsets(bootstrap: str, spec: int) -> dict[int, int]:
    with ClusterClient(bootstrap) as client:
        got = admin.list_offsets(client, [(TOPIC, p) for p in range(PARTITIONS)], spec, strict=True)
    return {p: got[(TOPIC, p)] for p in range(PARTITIONS)}


@pytest.fixture(scope="module")
def archived(archive_broker, spark):
    """The topic with its old segments gone and the table holding them: (broker, expected records)."""
    bootstrap, root = archive_broker.bootstrap, archive_broker.data
    create_topic(bootstrap, PARTITIONS, name=TOPIC, **{"remote.storage.enable": "true", "segment.bytes": "600",
                                                       "local.retention.ms": "1"})
    expected = produce(bootstrap)

    # No table yet: local.retention.ms=1 would delete every closed segment, the table lacks them all
    kept = retain(RetentionOptions(root=root, topics=(TOPIC,)))
    assert all(not p.deleted and p.plan.held_back for p in kept.partitions), kept.partitions
    assert {p.name: p.plan.blocking_groups for p in kept.partitions} == {
        f"{TOPIC}-{p}": (f"table {TOPIC}",) for p in range(PARTITIONS)}

    result = ingest(spark, IngestOptions(topics=(TOPIC,), root=root, bootstrap=bootstrap))
    assert result.records == sum(len(r) for r in expected.values())
    done = retain(RetentionOptions(root=root, topics=(TOPIC,)))
    assert all(p.deleted for p in done.partitions), done.partitions
    starts = {p.partition: p.log_start_offset for p in done.partitions}
    wait_for(lambda: offsets(bootstrap, EARLIEST_LOCAL) == starts, what="the broker to see the new log starts")
    assert all(start > 10 for start in starts.values()), starts
    return archive_broker, expected


def test_list_offsets_earliest_is_the_tables_and_earliest_local_the_logs(archived):
    b, expected = archived
    assert offsets(b.bootstrap, EARLIEST) == {p: records[0][0] for p, records in expected.items()}
    local = offsets(b.bootstrap, EARLIEST_LOCAL)
    assert all(local[p] > 0 for p in local)
    # the transaction markers and the aborted records (offsets no committed record has) are archived
    not_records = set(range(expected[0][-1][0])) - {r[0] for r in expected[0]}
    assert len(not_records) == 2 + 3 and max(not_records) < local[0]


def test_a_fetch_answers_the_historys_log_start_not_the_local_one(archived):
    from tests.support import wire

    b, expected = archived
    local = offsets(b.bootstrap, EARLIEST_LOCAL)
    with BrokerConnection(b.bootstrap) as c:
        for p, records in expected.items():
            at_start = wire.fetch(c, TOPIC, records[0][0], partition=p)
            at_tail = wire.fetch(c, TOPIC, local[p], partition=p)
            # KIP-405: log_start_offset is the whole history's, wherever the fetch reads from
            assert (at_start.log_start_offset, at_tail.log_start_offset) == (records[0][0], records[0][0])
            assert local[p] > records[0][0]


def test_list_offsets_latest_tiered_and_earliest_pending_upload_answer_the_tables_end(archived):
    b, expected = archived
    with BrokerConnection(b.bootstrap) as c:
        def offset(timestamp: int) -> int:
            topic = offsets_req.ListOffsetsTopic(name=TOPIC, partitions=(
                offsets_req.ListOffsetsPartition(partition_index=0, timestamp=timestamp),))
            [answer] = c.request(offsets_req.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(topic,),
                                                                timeout=datetime.timedelta(seconds=5))).topics
            return answer.partitions[0].offset

        end = offset(-1)
        assert offset(-5) == end - 1  # the ingest read the whole log: the table's last offset is the log's
        assert offset(-6) == -1  # nothing is waiting for the table


def _headers(pairs) -> list[tuple]:
    return [(k, v) for k, v in pairs or []]


def _gather(expected: dict[int, list[tuple]], poll) -> dict[int, list[tuple]]:
    """Records by partition until as many as expected arrived (or a minute): `poll()` answers
    {TopicPartition: messages}, as kafka-python's poll and aiokafka's getmany do."""
    got: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    while sum(map(len, got.values())) < sum(map(len, expected.values())) and time.monotonic() < deadline:
        for tp, messages in poll().items():
            got[tp.partition] += [(m.offset, m.key, m.value, _headers(m.headers)) for m in messages]
    return got


def test_confluent_kafka_reads_every_record_from_offset_0_in_both_isolation_levels(archived):
    from confluent_kafka import Consumer, TopicPartition

    b, expected = archived
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "unused", "enable.auto.commit": False,
                             "isolation.level": isolation, "message.max.bytes": 1000, "fetch.max.bytes": 1000,
                             "max.partition.fetch.bytes": 300})
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        got: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < sum(map(len, expected.values())) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got[msg.partition()].append((msg.offset(), msg.key(), msg.value(), _headers(msg.headers())))
        consumer.close()
        assert got == {p: [(o, k, v, _headers(h)) for o, k, v, h in records] for p, records in expected.items()}, \
            isolation


def test_kafka_python_reads_every_record_from_offset_0(archived):
    from kafka import KafkaConsumer, TopicPartition

    b, expected = archived
    consumer = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=None, enable_auto_commit=False,
                             isolation_level="read_committed", max_partition_fetch_bytes=500)
    parts = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer.assign(parts)
    for tp in parts:
        consumer.seek(tp, 0)
    got = _gather(expected, lambda: consumer.poll(timeout_ms=500))
    consumer.close()
    assert got == {p: [(o, k, v, _headers(h)) for o, k, v, h in records] for p, records in expected.items()}


def test_aiokafka_reads_every_record_from_offset_0(archived):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    b, expected = archived

    async def started() -> AIOKafkaConsumer:  # made, started and assigned inside the loop it runs on
        consumer = AIOKafkaConsumer(bootstrap_servers=b.bootstrap, group_id=None, enable_auto_commit=False,
                                    isolation_level="read_committed", max_partition_fetch_bytes=500)
        await consumer.start()
        parts = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(parts)
        for tp in parts:
            consumer.seek(tp, 0)
        return consumer

    loop = asyncio.new_event_loop()
    consumer = loop.run_until_complete(started())
    try:
        got = _gather(expected, lambda: loop.run_until_complete(consumer.getmany(timeout_ms=500)))
    finally:
        loop.run_until_complete(consumer.stop())
        loop.close()
    assert got == {p: [(o, k, v, _headers(h)) for o, k, v, h in records] for p, records in expected.items()}


def test_kafkas_console_consumer_reads_partition_0_from_offset_0(archived, kafka_tools):
    b, expected = archived
    records = expected[0]
    out = kafka_tools("kafka-console-consumer", "--bootstrap-server", b.bootstrap, "--topic", TOPIC,
                      "--partition", "0", "--offset", "0", "--max-messages", str(len(records)),
                      "--timeout-ms", "30000", "--isolation-level", "read_committed",
                      "--formatter-property", "print.offset=true", "--formatter-property", "print.key=true",
                      "--formatter-property", "print.headers=true")

    def headers(pairs) -> str:
        return ",".join(f"{k}:{'null' if v is None else v.decode()}" for k, v in pairs) or "NO_HEADERS"

    lines = [line.split("\t") for line in out.splitlines() if line.startswith("Offset:")]
    assert lines == [[f"Offset:{o}", headers(h), "null" if k is None else k.decode(),
                      "null" if v is None else v.decode()] for o, k, v, h in records]


def test_a_group_resumes_below_the_local_start(archived):
    from confluent_kafka import Consumer, TopicPartition

    b, expected = archived
    resume_at = {p: records[3][0] for p, records in expected.items()}
    assert all(resume_at[p] < local for p, local in offsets(b.bootstrap, EARLIEST_LOCAL).items())
    config = {"bootstrap.servers": b.bootstrap, "group.id": "archive-resume", "enable.auto.commit": False,
              "auto.offset.reset": "latest", "session.timeout.ms": 6000}
    first = Consumer(config)
    commit_offsets(first, [TopicPartition(TOPIC, p, o) for p, o in resume_at.items()])
    first.close()
    consumer = Consumer(config)
    consumer.subscribe([TOPIC])
    want = {p: [r[0] for r in records if r[0] >= resume_at[p]] for p, records in expected.items()}
    got: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    while got != want and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got[msg.partition()].append(msg.offset())
    consumer.close()
    assert got == want


def test_topics_describe_shows_the_earliest_and_the_earliest_local_offsets(archived):
    b, expected = archived
    out = subprocess.run([sys.executable, "-m", "topiclake.cli", "topics", "describe", TOPIC, "--bootstrap", b.bootstrap],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    local = offsets(b.bootstrap, EARLIEST_LOCAL)
    for p, records in expected.items():
        assert f"Partition: {p}\t" in out and f"\tEarliest: {records[0][0]}\tEarliestLocal: {local[p]}" in out, out


SPARK_READER = """
import json, sys
from pyspark.sql import SparkSession

bootstrap, topic = sys.argv[1], sys.argv[2]
spark = SparkSession.builder.appName("kafka-source-archive").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
rows = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
        .option("startingOffsets", "earliest").option("endingOffsets", "latest").option("includeHeaders", "true")
        .option("kafka.isolation.level", "read_committed").load()
        .select("partition", "offset", "key", "value", "headers").collect())
print(json.dumps([[r.partition, r.offset, None if r.key is None else bytes(r.key).hex(),
                   None if r.value is None else bytes(r.value).hex(),
                   [[h.key, None if h.value is None else bytes(h.value).hex()] for h in (r.headers or [])]]
                  for r in rows]))
spark.stop()
"""


def test_sparks_kafka_source_reads_from_the_tables_first_offset(archived, tmp_path):
    b, expected = archived
    script = tmp_path / "read_kafka.py"
    script.write_text(SPARK_READER)
    done = spark_submit_with_kafka_source(script, b.bootstrap, TOPIC)
    assert done.returncode == 0, done.stderr[-4000:]

    def hexed(value):
        return None if value is None else value.hex()

    rows = json.loads(done.stdout.splitlines()[-1])
    assert sorted(rows) == sorted([p, o, hexed(k), hexed(v), [[hk, hexed(hv)] for hk, hv in h]]
                                  for p, records in expected.items() for o, k, v, h in records)


def test_a_fetch_below_the_tables_first_offset_is_out_of_range(archive_broker, spark):
    """The table's own retention (a DELETE of old rows) moves the start of the history: below it a
    fetch is OFFSET_OUT_OF_RANGE, as below a log's start, and EARLIEST answers the new start."""
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
    from deltalake import DeltaTable

    bootstrap, root, topic = archive_broker.bootstrap, archive_broker.data, "archived-trimmed"
    create_topic(bootstrap, 1, name=topic, **{"remote.storage.enable": "true", "segment.bytes": "300",
                                              "local.retention.ms": "1"})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(20):
        producer.produce(topic, value=b"r%d" % i, partition=0)
        producer.flush(15)
    ingest(spark, IngestOptions(topics=(topic,), root=root, bootstrap=bootstrap))
    [retained] = retain(RetentionOptions(root=root, topics=(topic,))).partitions
    assert retained.deleted and retained.log_start_offset > 8
    DeltaTable(str(root / "tables" / topic)).delete("`offset` < 5")

    with ClusterClient(bootstrap) as client:
        wait_for(lambda: admin.list_offsets(client, [(topic, 0)], EARLIEST)[(topic, 0)] == 5, timeout=20,
                 what="EARLIEST to follow the table's new start")  # its snapshot is re-read every 2 s
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "auto.offset.reset": "error"})
    consumer.assign([TopicPartition(topic, 0, 2)])
    deadline, error = time.monotonic() + 30, None
    while error is None and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None:
            assert msg.error() is not None, f"a record below the history's start: {msg.offset()}"
            error = msg.error()
    consumer.assign([TopicPartition(topic, 0, 5)])
    first = None
    while first is None and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            first = msg.offset()
    consumer.close()
    assert error is not None and error.code() == KafkaError._AUTO_OFFSET_RESET, error
    assert first == 5
