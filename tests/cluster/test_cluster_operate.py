"""Operating a 3-broker cluster (issue 30), with Kafka's own tools beside ours giving the same
answers: the controller and the metadata quorum as ZooKeeper has them, the same from every
broker; a replication factor up to the live brokers and replicas that keep the preferred broker
first through a failover (kafka-topics --describe, `topiclake topics describe`); /metrics with
the cluster's health and each group's lag reported once per partition across the brokers
(kafka-consumer-groups); one summary log line per leadership change."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid

import pytest
from kio.schema.describe_cluster.v1 import request as cluster_req

from topiclake.client.conn import BrokerConnection
from topiclake.broker.cluster.controller import preferred_order

from tests.support.metrics import scrape_url
from tests.support.paths import REPO
from tests.support.broker_process import free_port
from tests.support.cluster_brokers import ClusterBrokers, cluster_settings
from tests.support.cluster_clients import metadata
from tests.support.waits import wait_for
from tests.support.cluster_topics import settled
from tests.support.clients import commit_offsets

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ops(zookeeper, tmp_path_factory):
    settings = cluster_settings(zookeeper.connect_string, f"/operate-{uuid.uuid4().hex[:8]}")
    operated_cluster = ClusterBrokers(tmp_path_factory.mktemp("operate"), settings)
    operated_cluster.metrics = {}
    for broker_id, broker in operated_cluster.brokers.items():
        port = free_port()
        broker.args += ("--metrics-listen", f"127.0.0.1:{port}")
        operated_cluster.metrics[broker_id] = f"http://127.0.0.1:{port}/metrics"
    with operated_cluster:
        yield operated_cluster


@pytest.fixture
def operated_cluster(ops):
    """The module's cluster, whole again after the test."""
    yield ops
    for broker_id, broker in ops.brokers.items():
        if broker.proc.poll() is not None:
            ops.restart(broker_id)


def whole_log(operated_cluster: ClusterBrokers, broker_id: int) -> str:
    return operated_cluster.brokers[broker_id].log_path.read_text(errors="replace")


def kafka_describe(kafka_tools, operated_cluster: ClusterBrokers, topic: str, broker_id: int) -> tuple[int, dict]:
    """kafka-topics --describe through one broker: (ReplicationFactor, {partition: (leader, replicas, isr)})."""
    out = kafka_tools("kafka-topics", "--bootstrap-server", operated_cluster.bootstrap_of(broker_id), "--describe",
                      "--topic", topic)
    factor = int(re.search(r"ReplicationFactor: (\d+)", out).group(1))
    return factor, _partition_lines(out)


def topiclake_describe(operated_cluster: ClusterBrokers, topic: str, broker_id: int) -> dict:
    done = subprocess.run([sys.executable, "-m", "topiclake.cli", "topics", "describe", topic, "--bootstrap",
                           operated_cluster.bootstrap_of(broker_id)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return _partition_lines(done.stdout)


def _partition_lines(out: str) -> dict:
    def ids(text: str) -> tuple[int, ...]:
        return tuple(int(i) for i in text.split(",") if i)

    return {int(m.group(1)): (int(m.group(2)), ids(m.group(3)), ids(m.group(4))) for m in re.finditer(
        r"Partition: (\d+)\tLeader: (-?\d+)\tReplicas: ([\d,]*)\tIsr: ([\d,]*)", out)}


# ======================================================================= replicas
def test_replication_factor_three_and_replicas_that_keep_the_preferred_broker_first(operated_cluster, kafka_tools):
    topic, b = "replicated", ("--bootstrap-server", operated_cluster.bootstrap)
    assert f"Created topic {topic}." in kafka_tools("kafka-topics", *b, "--create", "--topic", topic,
                                                    "--partitions", "3", "--replication-factor", "3")
    refused = kafka_tools.run("kafka-topics", *b, "--create", "--topic", "too-many", "--partitions", "1",
                              "--replication-factor", "4", check=False)
    assert refused.returncode != 0 and "InvalidReplicationFactorException" in refused.stderr
    assert "only 3 broker(s) are registered" in refused.stderr
    views = wait_for(lambda: settled(operated_cluster, topic, 3), 30, what="the new topic's leaders")
    expected = {p: (preferred_order(topic, p, (1, 2, 3))[0], preferred_order(topic, p, (1, 2, 3)),
                    preferred_order(topic, p, (1, 2, 3))) for p in range(3)}
    assert {p: (v.leader, v.replicas, v.replicas) for p, v in views.items()} == expected
    assert kafka_describe(kafka_tools, operated_cluster, topic, 1) == (3, expected)
    assert topiclake_describe(operated_cluster, topic, 2) == expected

    # kill -9 partition 0's preferred broker: another leads, the replicas still name it first,
    # the ISR leaves it out, and every tool through every live broker says so.
    away = expected[0][0]
    marks = {i: len(whole_log(operated_cluster, i)) for i in (1, 2, 3) if i != away}
    operated_cluster.kill(away)
    moved = wait_for(lambda: (v := settled(operated_cluster, topic, 3)) and all(p.leader != away for p in v.values()) and v,
                     30, what="the failover")
    after = {p: (next(r for r in replicas if r != away) if leader == away else leader, replicas,
                 tuple(r for r in replicas if r != away)) for p, (leader, replicas, _isr) in expected.items()}
    assert {p: (v.leader, v.replicas) for p, v in moved.items()} == {p: a[:2] for p, a in after.items()}
    live = next(i for i in (1, 2, 3) if i != away)
    assert kafka_describe(kafka_tools, operated_cluster, topic, live) == (3, after)
    assert topiclake_describe(operated_cluster, topic, live) == after

    # One summary line per leadership change, not a line per partition (internal topics included).
    time.sleep(1)
    taken = 0
    for broker_id, mark in marks.items():
        lines = whole_log(operated_cluster, broker_id)[mark:].splitlines()
        assert not [line for line in lines if " leading " in line or "no longer leading" in line], lines
        summaries = [line for line in lines if "partitions after" in line]
        taken += sum(int(m.group(1)) for line in summaries if (m := re.search(r"took over (\d+)", line)))
        assert len(summaries) <= 3 and len([line for line in lines if " INFO " in line]) <= 10, lines
    assert taken >= sum(v.leader == away for v in views.values())


# ===================================================================== controller
def test_the_controller_and_the_quorum_are_zookeepers_from_every_broker(operated_cluster, kafka_tools):
    controller, epoch = operated_cluster.zookeeper_controller()

    def answers(broker_id: int) -> tuple[int, int]:
        with BrokerConnection(operated_cluster.bootstrap_of(broker_id)) as client:
            described = client.request(cluster_req.DescribeClusterRequest(include_cluster_authorized_operations=False))
        return metadata(operated_cluster.bootstrap_of(broker_id), "__consumer_offsets").controller, described.controller_id

    assert {b: answers(b) for b in (1, 2, 3)} == {b: (controller, controller) for b in (1, 2, 3)}
    status = _quorum(kafka_tools, operated_cluster, next(b for b in (1, 2, 3) if b != controller))
    assert (status["LeaderId"], status["LeaderEpoch"], status["HighWatermark"]) == (str(controller), str(epoch), "0")
    assert sorted(v["id"] for v in json.loads(status["CurrentVoters"])) == [1, 2, 3]
    assert status["CurrentObservers"] == "[]"

    operated_cluster.kill(controller)
    new, new_epoch = wait_for(lambda: (c := operated_cluster.zookeeper_controller()) and c[0] != controller and c, 30,
                              what="the next controller")
    assert new_epoch > epoch
    wait_for(lambda: all(answers(b) == (new, new) for b in operated_cluster.live()), 20, what="every broker naming it")
    status = _quorum(kafka_tools, operated_cluster, new)
    assert (status["LeaderId"], status["LeaderEpoch"]) == (str(new), str(new_epoch))
    assert sorted(v["id"] for v in json.loads(status["CurrentVoters"])) == sorted(operated_cluster.live())


def _quorum(kafka_tools, operated_cluster: ClusterBrokers, broker_id: int) -> dict[str, str]:
    out = kafka_tools("kafka-metadata-quorum", "--bootstrap-server", operated_cluster.bootstrap_of(broker_id), "describe",
                      "--status")
    return {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in out.splitlines())}


# ======================================================================== metrics
def test_metrics_report_cluster_health_and_each_groups_lag_once(operated_cluster, kafka_tools):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic, group, partitions = "lagged", "lag-readers", 6
    admin = AdminClient({"bootstrap.servers": operated_cluster.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(30)
    wait_for(lambda: settled(operated_cluster, topic, partitions), 30, what="the topic's leaders")
    producer = Producer({"bootstrap.servers": operated_cluster.bootstrap})
    for p in range(partitions):
        for i in range(p + 2):  # partition p holds p + 2 records
            producer.produce(topic, value=b"v%d" % i, partition=p, timestamp=int(time.time() * 1000) - 5000)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": operated_cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    commit_offsets(consumer, [TopicPartition(topic, p, 1) for p in range(partitions)])
    consumer.close()

    def lags() -> dict[int, list[tuple[int, float]]]:
        found: dict[int, list[tuple[int, float]]] = {}
        for broker_id, url in operated_cluster.metrics.items():
            for (name, labels), value in scrape_url(url).items():
                labels = dict(labels)
                if name == "kafka_consumergroup_group_lag" and labels.get("group") == group:
                    found.setdefault(int(labels["partition"]), []).append((broker_id, value))
        return found

    # Every partition once, from the group's coordinator, though it leads only some of them.
    reported = wait_for(lambda: (found := lags()) and len(found) == partitions and found, 30, what="the lag")
    assert {p: [v for _b, v in rows] for p, rows in reported.items()} == {p: [p + 1] for p in range(partitions)}
    coordinator = {b for rows in reported.values() for b, _v in rows}
    assert len(coordinator) == 1
    leaders = settled(operated_cluster, topic, partitions)
    assert {leaders[p].leader for p in range(partitions)} - coordinator, "some partitions are led elsewhere"
    tool = kafka_tools("kafka-consumer-groups", "--bootstrap-server", operated_cluster.bootstrap, "--describe", "--group", group)
    rows = [line.split() for line in tool.splitlines() if line.startswith(group)]
    assert {int(r[2]): int(r[5]) for r in rows} == {p: p + 1 for p in range(partitions)}  # Kafka's LAG column

    scrapes = {b: scrape_url(url) for b, url in operated_cluster.metrics.items()}

    def each(name: str, **labels) -> dict[int, float]:
        key = (name, tuple(sorted(labels.items())))
        return {b: samples[key] for b, samples in scrapes.items()}

    controller = operated_cluster.zookeeper_controller()[0]
    assert each("kafka_controller_kafkacontroller_activecontrollercount") == {b: float(b == controller) for b in (1, 2, 3)}
    assert each("kafka_server_sessionexpirelistener_sessionstate", state="connected") == {1: 1, 2: 1, 3: 1}
    assert each("kafka_controller_kafkacontroller_activebrokercount")[controller] == 3
    assert sum(each("kafka_controller_kafkacontroller_offlinepartitionscount").values()) == 0
    total = each("kafka_controller_kafkacontroller_globalpartitioncount")[controller]
    assert total >= partitions and sum(each("kafka_server_replicamanager_leadercount").values()) == total
    assert all(v >= partitions for v in each("kafka_server_replicamanager_partitioncount").values())  # RF 3 topic
    elections = each("kafka_controller_controllerstats_leaderelections_total")[controller]

    # A broker dies: the controller moves its partitions (elections), the new leaders of the RF 3
    # topic are under-replicated, nothing stays offline.
    victim = next(b for b in (1, 2, 3) if b != controller)
    operated_cluster.kill(victim)
    wait_for(lambda: settled(operated_cluster, topic, partitions), 30, what="the failover")

    def after() -> dict[int, dict]:
        return {b: scrape_url(operated_cluster.metrics[b]) for b in operated_cluster.live()}

    def counted(samples: dict[int, dict], name: str) -> float:
        return sum(s[(name, ())] for s in samples.values())

    now = wait_for(lambda: (s := after()) and counted(s, "kafka_server_replicamanager_leadercount") == total and s,
                   30, what="every partition led again")
    assert counted(now, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert now[controller][("kafka_controller_controllerstats_leaderelections_total", ())] > elections
    assert counted(now, "kafka_server_replicamanager_underreplicatedpartitions") >= partitions
