"""A Spark ingest of what three brokers wrote while a leader was killed and another paused past
its session (issue 18: "A Spark ingest of the result is exact"): the Delta table holds every
acknowledged record once, at the offset its producer was told, and nothing else; the group's
offsets are mirrored to whichever broker coordinates the group now."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from topiclake.lake.runs.ingest import IngestOptions, ingest

from tests.support.lake import read_table
from tests.support.cluster_brokers import ClusterBrokers, cluster_settings
from tests.support.waits import wait_for

TOPIC = "lake-failover"
PARTITIONS = 6


@pytest.fixture(scope="module")
def lake_cluster(zookeeper, tmp_path_factory):
    settings = cluster_settings(zookeeper.connect_string, f"/lake-{uuid.uuid4().hex[:8]}")
    with ClusterBrokers(tmp_path_factory.mktemp("cluster-lake"), settings) as brokers:
        yield brokers


def leaders(lake_cluster: ClusterBrokers) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    meta = AdminClient({"bootstrap.servers": lake_cluster.bootstrap}).list_topics(TOPIC, timeout=10)
    return {p.id: p.leader for p in meta.topics[TOPIC].partitions.values() if p.error is None}


def test_an_ingest_after_a_kill_and_a_pause_holds_exactly_what_was_acknowledged(spark, lake_cluster):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": lake_cluster.bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        future.result(30)
    wait_for(lambda: len(leaders(lake_cluster)) == PARTITIONS, 30, what="the topic's leaders")
    acknowledged: dict[tuple[int, int], bytes] = {}
    failed = []

    def delivered(err, msg):
        if err is None:
            acknowledged[(msg.partition(), msg.offset())] = msg.key()
        else:
            failed.append(err)

    producer = Producer({"bootstrap.servers": lake_cluster.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 60000})
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            producer.produce(TOPIC, key=f"k{i}".encode(), value=b"v", on_delivery=delivered)
            producer.poll(0)
            i += 1
            time.sleep(0.002)

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        time.sleep(2)
        first, second = sorted(set(leaders(lake_cluster).values()))[:2]
        lake_cluster.kill(first)
        time.sleep(4)
        lake_cluster.pause(second)
        time.sleep(4)  # beyond its session: its partitions move
        lake_cluster.resume(second)
        time.sleep(3)
    finally:
        stop.set()
        writer.join()
        producer.flush(60)
    assert not failed and len(acknowledged) > 1000

    result = ingest(spark, IngestOptions(topics=(TOPIC,), root=lake_cluster.root, bootstrap=lake_cluster.bootstrap))
    assert result.records == len(acknowledged)
    _table, data = read_table(lake_cluster.root / "tables" / TOPIC)
    rows = list(zip(data["partition"].to_pylist(), data["offset"].to_pylist(), data["key"].to_pylist()))
    assert len(rows) == len(set(rows)) == len(acknowledged)  # nothing twice
    assert {(p, o): k for p, o, k in rows} == acknowledged  # each at the offset its producer was told
    assert result.tables[0].mirror.ok, result.tables[0].mirror.describe()
