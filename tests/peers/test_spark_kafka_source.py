"""Spark's own Kafka source (org.apache.spark:spark-sql-kafka-0-10 at the venv's Spark version,
from the jars bin/fetch-peers fetches: a real Java consumer inside Spark) reads a topiclake broker:
`spark.read.format("kafka")` with starting and ending offsets returns exactly the records
produced (offsets, keys, values, headers), and with `kafka.isolation.level=read_committed` it
leaves out the aborted transactions' records and every transaction marker."""

from __future__ import annotations

import json

import pytest

from tests.support.kafka_tools import spark_submit_with_kafka_source

pytestmark = pytest.mark.slow

TOPIC = "spark-source"
READER = """
import json, sys
from pyspark.sql import SparkSession

bootstrap, topic = sys.argv[1], sys.argv[2]
spark = SparkSession.builder.appName("kafka-source-peer").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
for isolation in ("read_committed", "read_uncommitted"):
    rows = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
            .option("startingOffsets", "earliest").option("endingOffsets", "latest").option("includeHeaders", "true")
            .option("kafka.isolation.level", isolation).load()
            .select("partition", "offset", "key", "value", "headers").collect())
    print(json.dumps({"isolation": isolation, "rows": [
        [r.partition, r.offset, None if r.key is None else bytes(r.key).decode(), bytes(r.value).decode(),
         [[h.key, bytes(h.value).decode()] for h in (r.headers or [])]] for r in rows]}))
spark.stop()
"""


def produce(bootstrap: str) -> tuple[list[list], list[list]]:
    """Plain records, committed and aborted transactions over 2 partitions. Returns (committed or
    plain rows, aborted rows), each [partition, offset, key, value, headers]."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(20)
    kept, aborted = [], []

    def into(out, headers):
        def delivered(err, msg):
            assert err is None, err
            out.append([msg.partition(), msg.offset(), msg.key().decode(), msg.value().decode(), headers])
        return delivered

    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        plain.produce(TOPIC, key=b"plain-%d" % i, value=b"p%d" % i, partition=i % 2, headers=[("n", b"%d" % i)],
                      on_delivery=into(kept, [["n", str(i)]]))
    assert plain.flush(20) == 0
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "spark-source-txn"})
    txn.init_transactions(20)
    for round_, commit in enumerate((True, False, True, False)):
        txn.begin_transaction()
        for i in range(6):
            txn.produce(TOPIC, key=b"t%d-%d" % (round_, i), value=b"round %d" % round_, partition=i % 2,
                        on_delivery=into(kept if commit else aborted, []))
        txn.flush(20)
        txn.commit_transaction(20) if commit else txn.abort_transaction(20)
    return kept, aborted


def test_spark_kafka_source_reads_exact_records_and_read_committed(peer_broker, tmp_path):
    kept, aborted = produce(peer_broker.bootstrap)
    script = tmp_path / "read_kafka.py"
    script.write_text(READER)
    done = spark_submit_with_kafka_source(script, peer_broker.bootstrap, TOPIC)
    assert done.returncode == 0, done.stderr[-4000:]
    read = {r["isolation"]: sorted(r["rows"]) for r in map(json.loads, done.stdout.splitlines())}
    assert read["read_committed"] == sorted(kept)
    assert read["read_uncommitted"] == sorted(kept + aborted)
    assert len(kept) == 22 and len(aborted) == 12
