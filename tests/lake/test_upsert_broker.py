"""Upsert tables fed by a live broker: confluent-kafka produces keyed updates and tombstones to a
compacted topic; the table, read back by deltalake and by delta-spark, equals the latest value per
key that a real consumer (kafka-python) computes from the topic. A `topiclake ingest` process
SIGKILLed mid-run, two ingest processes at once, and the log cleaner running before the ingest all
end at that same table."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.support.paths import REPO
from tests.support.broker_process import BrokerProcess
from topiclake.lake.runs.compaction import CompactOptions, compact
from topiclake.lake.runs.coverage import coverage
from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.table.delta import app_id
from topiclake.segments.storage import StorageLayout, TopicRegistry

from tests.support.lake import read_table

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")

TOPIC = "accounts"
PARTITIONS = 2


@pytest.fixture
def compacted_broker(root):
    TopicRegistry(StorageLayout(root)).create(TOPIC, PARTITIONS, {"cleanup.policy": "compact",
                                                                  "segment.bytes": "16384",
                                                                  "delete.retention.ms": "0"})
    process = BrokerProcess(root).start()
    yield process
    process.stop()


def produce(bootstrap: str, rounds: int, keys: int, *, start: int = 0) -> None:
    """Keyed updates, every 7th a tombstone, through librdkafka's own partitioner."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                                         "batch.size": 2000})  # batches below segment.bytes
    failed = []
    for i in range(start, start + rounds):
        key = f"acct-{i % keys}".encode()
        producer.produce(TOPIC, key=key, value=None if i % 7 == 3 else f"balance-{i}".encode(),
                         on_delivery=lambda err, _msg: err is not None and failed.append(err))
    assert producer.flush(30) == 0 and not failed, failed[:3]


def consumed_latest(bootstrap: str) -> dict[bytes, bytes]:
    """Per key, the value at its highest offset as a consumer reads the topic; deleted keys left out."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=2000)
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    ends = consumer.end_offsets(tps)
    records = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(consumer.position(tp) < ends[tp] for tp in tps):
        for batch in consumer.poll(timeout_ms=500).values():
            records += [(r.partition, r.offset, r.key, r.value) for r in batch]
    consumer.close()
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for partition, offset, key, value in sorted(records):  # a key lives in one partition: offsets order it
        latest[key] = (offset, value)
    return {k: v for k, (_o, v) in latest.items() if v is not None}


def table_rows(uri) -> dict[bytes, bytes]:
    _table, data = read_table(uri)
    keys = data["key"].to_pylist()
    assert len(keys) == len(set(keys)), "one row per key"
    return dict(zip(keys, data["value"].to_pylist()))


def spark_rows(spark, uri) -> dict[bytes, bytes]:
    rows = spark.read.format("delta").load(str(uri)).select("key", "value").collect()
    return {bytes(r["key"]): bytes(r["value"]) for r in rows}


def log_ends(bootstrap: str) -> dict[int, int]:
    """Each partition's end offset as ListOffsets answers it."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    ends = consumer.end_offsets([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    consumer.close()
    return {tp.partition: end for tp, end in ends.items()}


def assert_latest_at_log_end(spark, uri, bootstrap: str) -> None:
    """The table (deltalake and delta-spark) is the consumer's latest value per key, and the group's
    offsets are at the log end."""
    assert table_rows(uri) == consumed_latest(bootstrap) == spark_rows(spark, uri)
    table, _ = read_table(uri)
    for p, end in log_ends(bootstrap).items():
        assert table.transaction_version(app_id(f"topiclake-ingest-{TOPIC}", TOPIC, p)) == end


def ingest_process(root, *extra: str) -> subprocess.Popen:
    """`topiclake ingest` as its own process (its own Spark), in its own process group."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    env.pop("TOPICLAKE_ROOT", None)
    return subprocess.Popen([sys.executable, "-m", "topiclake.cli", "ingest", "--topic", TOPIC, "--data", str(root),
                             "--bootstrap", "none", "--master", "local[1]", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
                            start_new_session=True)


def test_the_table_is_the_latest_value_per_key_a_consumer_sees(spark, root, compacted_broker):
    produce(compacted_broker.bootstrap, 400, 60)
    uri = root / "tables" / TOPIC
    ingest(spark, IngestOptions(topics=(TOPIC,), root=root, bootstrap="none"))  # compacted topic: upsert
    expected = consumed_latest(compacted_broker.bootstrap)
    assert len(expected) > 30 and table_rows(uri) == expected == spark_rows(spark, uri)

    produce(compacted_broker.bootstrap, 150, 90, start=400)  # updates, new keys, more tombstones
    ingest(spark, IngestOptions(topics=(TOPIC,), root=root, bootstrap="none"))
    assert_latest_at_log_end(spark, uri, compacted_broker.bootstrap)


def test_sigkill_mid_run_then_rerun_and_two_concurrent_runs(spark, root, compacted_broker):
    produce(compacted_broker.bootstrap, 300, 50)
    uri = root / "tables" / TOPIC
    ingest(spark, IngestOptions(topics=(TOPIC,), root=root, bootstrap="none"))
    produce(compacted_broker.bootstrap, 300, 80, start=300)

    victim = ingest_process(root)
    staging = uri / "_topiclake_staging"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and victim.poll() is None and not (staging.exists() and any(staging.iterdir())):
        time.sleep(0.02)
    assert victim.poll() is None, f"the run ended before it was killed: {victim.communicate()[1][-2000:]}"
    os.killpg(victim.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers, mid-run
    victim.wait(30)
    assert read_table(uri)[0].version() == 1  # created + its properties: the killed run committed nothing

    produce(compacted_broker.bootstrap, 100, 80, start=600)
    first, second = ingest_process(root), ingest_process(root)
    outcomes = [p.communicate(timeout=300) + (p.returncode,) for p in (first, second)]
    codes = sorted(code for _out, _err, code in outcomes)
    assert codes[0] == 0, outcomes
    for _out, err, code in outcomes:  # the loser says so in one line (after any progress lines), commits nothing
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 0 or (len(errors) == 1 and "another writer" in errors[0] and "nothing was committed"
                             in errors[0] and err.strip().splitlines()[-1] == errors[0]), err
    ingest(spark, IngestOptions(topics=(TOPIC,), root=root, bootstrap="none"))  # whatever is left
    assert_latest_at_log_end(spark, uri, compacted_broker.bootstrap)


def test_the_cleaner_before_the_ingest_leaves_the_latest_value(spark, root, compacted_broker):
    produce(compacted_broker.bootstrap, 2500, 40)  # several segments per partition: the cleaner works below the active one
    produced = sum(log_ends(compacted_broker.bootstrap).values())
    result = compact(spark, CompactOptions(root=root, topics=(TOPIC,), force=True))
    assert not result.errors
    expected = consumed_latest(compacted_broker.bootstrap)
    uri = root / "tables" / TOPIC
    ingest(spark, IngestOptions(topics=(TOPIC,), root=root, bootstrap="none"))
    assert table_rows(uri) == expected == spark_rows(spark, uri)

    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=compacted_broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000)
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    kept = sum(len(batch) for _ in range(20) for batch in consumer.poll(timeout_ms=200).values())
    consumer.close()
    assert kept < produced, "the cleaner removed old versions before the ingest"

    report = coverage(spark, root, TOPIC, TOPIC, list(range(PARTITIONS)), group=f"topiclake-ingest-{TOPIC}")
    for c in report:  # what the commits read, not the offsets of the rows that survived
        assert [(r.first, r.end) for r in c.held] == [(0, c.committed)] and not c.missing
