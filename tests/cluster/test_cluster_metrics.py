"""/metrics in cluster mode: two brokers on one root, each reporting the partitions it leads, so
every partition's series come from exactly one broker (its leader)."""

from __future__ import annotations

import uuid

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.metrics import scrape_url
from tests.support.broker_process import free_port
from tests.support.cluster_brokers import ClusterBrokers, cluster_settings

TOPIC = "metered-cluster"
PARTITIONS = 4


def test_each_partition_is_reported_by_its_leader_alone(zookeeper, tmp_path):
    settings = cluster_settings(zookeeper.connect_string, f"/metrics-{uuid.uuid4().hex[:8]}")
    cluster = ClusterBrokers(tmp_path, settings, count=2)
    urls = {}
    for broker_id, broker in cluster.brokers.items():
        port = free_port()
        broker.args += ("--metrics-listen", f"127.0.0.1:{port}")
        urls[broker_id] = f"http://127.0.0.1:{port}/metrics"
    with cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        producer = ck.Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
        for partition in range(PARTITIONS):
            for _ in range(partition + 1):  # partition p holds p + 1 records
                producer.produce(TOPIC, value=b"v", partition=partition)
        assert producer.flush(30) == 0
        scrapes = {broker_id: scrape_url(url) for broker_id, url in urls.items()}

    reporters = {}
    for broker_id, samples in scrapes.items():
        for (name, labels), value in samples.items():
            labels = dict(labels)
            if name == "kafka_log_log_logendoffset" and labels["topic"] == TOPIC:
                reporters.setdefault(int(labels["partition"]), []).append((broker_id, value))
    assert sorted(reporters) == list(range(PARTITIONS))
    for partition, reported in reporters.items():
        assert len(reported) == 1, f"partition {partition} reported by {reported}"
        assert reported[0][1] == partition + 1
    assert {b for reported in reporters.values() for b, _ in reported} == {1, 2}  # both brokers lead some
    messages = sum(v for samples in scrapes.values() for (name, labels), v in samples.items()
                   if name == "kafka_server_brokertopicmetrics_messagesin_total" and dict(labels)["topic"] == TOPIC)
    assert messages == sum(range(1, PARTITIONS + 1))
