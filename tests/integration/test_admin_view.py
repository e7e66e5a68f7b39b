"""What real admin tools see stays true: confluent-kafka's AdminClient and kafka-python's
KafkaAdminClient describe the cluster, the log dirs, the broker's and a topic's configs and the
groups of a broker that just converted a group both ways, ran a transactions-v2 transaction and
holds client quotas; every answer is checked against what the broker holds."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient, ConfigResource as ConfluentResource, ResourceType
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType
from kio.schema.end_txn.v5 import request as end5
from kio.schema.errors import ErrorCode
from kio.schema.produce.v12 import request as produce12

from tests.support import txn_wire as raw
from tests.support.broker_process import BrokerProcess
from tests.integration.group_members import PARTITIONS, Group, group_type
from tests.support.topics import create_topic
from tests.support.clients import produce
from tests.support.waits import wait_for
from topiclake.client.conn import BrokerConnection

pytestmark = pytest.mark.slow


def tv2_transaction(bootstrap: str, topic: str) -> None:
    """One transactions-v2 transaction, as a Kafka 4.x producer runs it: no AddPartitionsToTxn,
    Produce v12, EndTxn v5 (which bumps the epoch)."""
    with BrokerConnection(bootstrap) as client:
        _, pid, epoch = raw.init_producer_id(client, "tv2")
        response = client.request(produce12.ProduceRequest(
            transactional_id="tv2", acks=-1, timeout=raw.TIMEOUT, topic_data=(produce12.TopicProduceData(
                name=topic, partition_data=(produce12.PartitionProduceData(
                    index=0, records=raw.txn_batch([b"txn"], pid, epoch, 0)),)),)))
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
        ended = client.request(end5.EndTxnRequest(transactional_id="tv2", producer_id=pid, producer_epoch=epoch,
                                                  committed=True))
        assert (ended.error_code, ended.producer_epoch) == (ErrorCode.none, epoch + 1)


def test_admin_clients_describe_the_broker_as_it_is(tmp_path, config_file):
    data = tmp_path / "data"
    proc = BrokerProcess(data, config=config_file).start()
    group = None
    kafka_admin = None
    try:
        topic = create_topic(proc.bootstrap, PARTITIONS)
        produce(proc.bootstrap, topic, PARTITIONS, 5)
        group = Group(proc.bootstrap, topic)
        group.add("classic", "classic")
        group.add("consumer", "consumer")
        group.settle([2, 2], "a converted group of two")
        group.read_up_to(5)
        tv2_transaction(proc.bootstrap, topic)

        confluent = AdminClient({"bootstrap.servers": proc.bootstrap})
        cluster = confluent.describe_cluster().result(30)
        cluster_id = json.loads((data / "cluster" / "meta.json").read_text())["cluster_id"]
        assert cluster.cluster_id == cluster_id and cluster.controller.id == 0
        assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(0, "127.0.0.1", proc.port)]

        resources = [ConfluentResource(ResourceType.BROKER, "0"), ConfluentResource(ResourceType.TOPIC, topic)]
        broker_configs, topic_configs = (f.result(30) for f in confluent.describe_configs(resources).values())
        policy = broker_configs["group.consumer.migration.policy"]
        assert (policy.value, policy.is_default) == ("bidirectional", True)
        offsets_partitions = broker_configs["offsets.topic.num.partitions"]  # 5 in the settings file
        assert (offsets_partitions.value, offsets_partitions.source) == ("5", 4)  # STATIC_BROKER_CONFIG
        assert (broker_configs["num.partitions"].value, broker_configs["num.partitions"].is_default) == ("1", True)
        assert topic_configs["cleanup.policy"].value == "delete"

        described = confluent.describe_consumer_groups([group.group_id])[group.group_id].result(30)
        assert (described.type.name, described.state.name) == ("CONSUMER", "STABLE")
        owned = [{tp.partition for tp in m.assignment.topic_partitions} for m in described.members]
        assert sorted(map(len, owned)) == [2, 2] and set().union(*owned) == set(range(PARTITIONS))
        assert {m.host for m in described.members} == {"/127.0.0.1"}
        listed = {g.group_id: g.type.name for g in confluent.list_consumer_groups().result(30).valid}
        assert listed[group.group_id] == "CONSUMER"
        request = ConsumerGroupTopicPartitions(group.group_id)
        offsets = confluent.list_consumer_group_offsets([request])[group.group_id].result(30)
        assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == {p: 5 for p in range(PARTITIONS)}

        kafka_admin = KafkaAdminClient(bootstrap_servers=proc.bootstrap)
        view = kafka_admin.describe_cluster()
        assert (view["cluster_id"], view["controller_id"]) == (cluster_id, 0)
        assert [(b["broker_id"], b["port"]) for b in view["brokers"]] == [(0, proc.port)]
        [entry] = kafka_admin.describe_log_dirs()
        [log_dir] = entry["log_dirs"]
        assert log_dir["log_dir"] == str((data / "log").resolve())
        sizes = {p["partition_index"]: p["partition_size"] for t in log_dir["topics"] if t["name"] == topic
                 for p in t["partitions"]}
        assert sizes == {p: sum(f.stat().st_size for f in (data / "log" / f"{topic}-{p}").glob("*.log"))
                         for p in range(PARTITIONS)}
        configs = kafka_admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "0")],
                                               config_filter="all")["broker"]["0"]
        assert configs["group.consumer.migration.policy"]["value"] == "bidirectional"

        group.close("consumer")  # back to a classic group: the classic APIs describe it
        group.settle([4], "the classic member alone")
        assert wait_for(lambda: group_type(proc.bootstrap, group.group_id) == "CLASSIC", 20, what="a classic group",
                        interval=0.1)
        classic = kafka_admin.describe_groups([group.group_id])[group.group_id]
        assert (classic["error"], classic["group_state"], classic["protocol_type"], classic["protocol_data"]) == \
            (None, "Stable", "consumer", "range")
        [member] = classic["members"]
        assert member["client_host"] == "/127.0.0.1", member
        assert {p for t in member["member_assignment"]["assigned_partitions"] for p in t["partitions"]} == \
            set(range(PARTITIONS))
        types = {g["group_id"]: g["group_type"] for g in kafka_admin.list_groups()}
        assert types[group.group_id] == "classic"
    finally:
        if kafka_admin is not None:
            kafka_admin.close()
        if group is not None:
            group.close_all()
        proc.kill()
