"""Config resources through real admin clients and raw requests: every Kafka 4.x topic config,
the broker's whole configuration with sources, cluster-wide dynamic defaults, GROUP configs,
ListConfigResources, and the topic configs that act on produce requests."""

from __future__ import annotations

import datetime
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewTopic, ResourceType)
from kafka import KafkaAdminClient
from kio.schema.consumer_group_heartbeat.v0 import request as heartbeat_req
from kio.schema.describe_configs.v4 import request as describe_req
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as inc_req

from tests.support.in_process_broker import InProcessBroker
from tests.support.group_wire import loaded_partition
from tests.support.wire import batch, produce

TOPIC, BROKER, GROUP = 2, 4, 32
DYNAMIC_TOPIC, DYNAMIC_DEFAULT_BROKER, STATIC_BROKER, DEFAULT, GROUP_CONFIG = 1, 3, 4, 5, 8


@pytest.fixture
def confluent_admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def results(futures: dict) -> dict:
    return {resource.name: future.result(10) for resource, future in futures.items()}


def describe_raw(broker, resource_type, name, *, synonyms=False, documentation=False, keys=None):
    with broker.client() as c:
        res = describe_req.DescribeConfigsResource(resource_type=resource_type, resource_name=name,
                                                   configuration_keys=keys)
        [result] = c.request(describe_req.DescribeConfigsRequest(
            resources=(res,), include_synonyms=synonyms, include_documentation=documentation)).results
    return result.error_code, {e.name: e for e in result.configs}


def test_every_kafka_4_topic_config_is_accepted_stored_and_described(broker, confluent_admin):
    new = {"unclean.leader.election.enable": "true", "compression.zstd.level": "7",
           "message.timestamp.after.max.ms": "60000", "leader.replication.throttled.replicas": "0:0",
           "local.retention.ms": "-2", "remote.log.copy.disable": "false", "min.insync.replicas": "1"}
    futures = confluent_admin.create_topics([NewTopic("modern", 1, 1, config=new)])
    futures["modern"].result(10)
    [configs] = results(confluent_admin.describe_configs([ConfigResource(ResourceType.TOPIC, "modern")])).values()
    for name, value in new.items():
        assert (configs[name].value, configs[name].source) == (value, ConfigSource.DYNAMIC_TOPIC_CONFIG.value), name
    assert configs["remote.storage.enable"].value == "false" and configs["remote.storage.enable"].is_default
    assert broker.context.partitions.topic("modern", fresh=True).log_config.compression_zstd_level == 7
    tiered = {"remote.storage.enable": "true", "local.retention.ms": "60000"}
    confluent_admin.create_topics([NewTopic("tiered", 1, 1, config=tiered)])["tiered"].result(10)
    [configs] = results(confluent_admin.describe_configs([ConfigResource(ResourceType.TOPIC, "tiered")])).values()
    assert {name: configs[name].value for name in tiered} == tiered
    turned_on = ConfigResource(ResourceType.TOPIC, "modern", incremental_configs=[
        ConfigEntry("remote.storage.enable", "true", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("local.retention.bytes", "4096", incremental_operation=AlterConfigOpType.SET)])
    assert results(confluent_admin.incremental_alter_configs([turned_on])) == {"modern": None}
    modern = broker.context.partitions.topic("modern", fresh=True).log_config
    assert modern.remote_storage_enable and modern.local_retention.retention_bytes == 4096
    refused = confluent_admin.create_topics([NewTopic("tiered-compacted", 1, 1, config={
        "remote.storage.enable": "true", "cleanup.policy": "compact"})])
    with pytest.raises(ck.KafkaException) as info:
        refused["tiered-compacted"].result(10)
    assert info.value.args[0].code() == ck.KafkaError.INVALID_CONFIG

    code, entries = describe_raw(broker, TOPIC, "modern", documentation=True)
    assert code == ErrorCode.none and entries["segment.bytes"].config_type == 3  # INT
    assert entries["retention.ms"].config_type == 5 and entries["cleanup.policy"].config_type == 7
    assert "No effect here" in entries["unclean.leader.election.enable"].documentation
    assert "No effect here" not in entries["local.retention.ms"].documentation
    assert "No effect here" in entries["remote.log.copy.disable"].documentation
    assert "No effect here" not in entries["retention.ms"].documentation


def test_synonyms_only_when_asked_and_in_precedence_order(broker):
    broker.create_topic("syn", **{"retention.ms": "1000"})
    _, plain = describe_raw(broker, TOPIC, "syn")
    assert all(e.synonyms == () for e in plain.values())
    _, full = describe_raw(broker, TOPIC, "syn", synonyms=True)
    assert [(s.name, s.value, s.source) for s in full["retention.ms"].synonyms] == [
        ("retention.ms", "1000", DYNAMIC_TOPIC), ("log.retention.ms", "604800000", DEFAULT)]
    # Kafka 4.1+ records the cluster-wide min.insync.replicas when the cluster is first activated.
    assert [(s.name, s.source) for s in full["min.insync.replicas"].synonyms] == [
        ("min.insync.replicas", DYNAMIC_DEFAULT_BROKER), ("min.insync.replicas", DEFAULT)]
    assert full["min.insync.replicas"].config_source == DYNAMIC_DEFAULT_BROKER


def test_subtract_may_empty_cleanup_policy(broker, confluent_admin):
    broker.create_topic("keep-all")
    resource = ConfigResource(ResourceType.TOPIC, "keep-all", incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)])
    assert results(confluent_admin.incremental_alter_configs([resource])) == {"keep-all": None}
    [configs] = results(confluent_admin.describe_configs([ConfigResource(ResourceType.TOPIC, "keep-all")])).values()
    assert (configs["cleanup.policy"].value, configs["cleanup.policy"].is_default) == ("", False)
    config = broker.context.partitions.topic("keep-all", fresh=True).log_config
    assert not config.delete and not config.compact


def test_broker_resource_is_the_whole_configuration_with_sources(tmp_path):
    broker = InProcessBroker(tmp_path / "data", num_partitions=4).start()
    try:
        code, entries = describe_raw(broker, BROKER, "0", synonyms=True)
        assert code == ErrorCode.none
        assert (entries["num.partitions"].value, entries["num.partitions"].config_source) == ("4", STATIC_BROKER)
        assert [(s.value, s.source) for s in entries["num.partitions"].synonyms] == [("4", STATIC_BROKER),
                                                                                     ("1", DEFAULT)]
        assert (entries["auto.create.topics.enable"].value,
                entries["auto.create.topics.enable"].config_source) == ("true", DEFAULT)
        assert entries["log.dirs"].value == str(broker.context.layout.logs_dir.resolve())
        assert entries["advertised.listeners"].value == f"PLAINTEXT://127.0.0.1:{broker.server.port}"
        assert (entries["min.insync.replicas"].value, entries["min.insync.replicas"].config_source) == (
            "1", DYNAMIC_DEFAULT_BROKER)
        assert (entries["log.retention.ms"].value, entries["log.retention.ms"].config_source) == ("604800000", DEFAULT)
        assert {"group.consumer.session.timeout.ms", "transaction.max.timeout.ms", "message.max.bytes"} <= set(entries)
        _, without = describe_raw(broker, BROKER, "0")
        assert all(e.synonyms == () for e in without.values())
        code, cluster_default = describe_raw(broker, BROKER, "")
        assert code == ErrorCode.none and list(cluster_default) == ["min.insync.replicas"]
        assert describe_raw(broker, BROKER, "7")[0] == ErrorCode.invalid_request
    finally:
        broker.stop()


def test_cluster_wide_topic_defaults_reach_topics_and_their_logs(broker, confluent_admin):
    broker.create_topic("defaulted")
    broker.create_topic("overridden", **{"retention.ms": "5000"})
    with broker.client() as c:
        assert produce(c, "defaulted", batch([b"x"])).error_code == ErrorCode.none
    assert set_cluster_default(broker, "log.retention.ms", "3600000") == ErrorCode.none
    described = results(confluent_admin.describe_configs([ConfigResource(ResourceType.TOPIC, "defaulted"),
                                                ConfigResource(ResourceType.TOPIC, "overridden")]))
    assert (described["defaulted"]["retention.ms"].value, described["defaulted"]["retention.ms"].source) == (
        "3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert described["overridden"]["retention.ms"].value == "5000"
    assert broker.context.partitions._partitions[("defaulted", 0)].log.config.retention_ms == 3_600_000
    from topiclake.segments.storage import StorageLayout, TopicRegistry
    assert TopicRegistry(StorageLayout(broker.config.root)).get("defaulted").log_config.retention_ms == 3_600_000

    one_broker = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
        ConfigEntry("log.retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(ck.KafkaException) as info:
        results(confluent_admin.incremental_alter_configs([one_broker]))
    assert info.value.args[0].code() == ck.KafkaError.INVALID_REQUEST, "topic defaults are cluster-wide"
    assert set_cluster_default(broker, "num.io.threads", "4") == ErrorCode.invalid_request
    assert set_cluster_default(broker, "log.retention.ms", "-7") == ErrorCode.invalid_config


def set_cluster_default(broker, name: str, value: str) -> ErrorCode:
    """IncrementalAlterConfigs SET on the default BROKER resource "" (confluent-kafka refuses the empty name)."""
    res = inc_req.AlterConfigsResource(resource_type=BROKER, resource_name="", configs=(
        inc_req.AlterableConfig(name=name, config_operation=0, value=value),))
    with broker.client() as c:
        return c.request(inc_req.IncrementalAlterConfigsRequest(resources=(res,), validate_only=False)).responses[
            0].error_code


def heartbeat_interval_ms(broker, group: str) -> int:
    with broker.client() as c:
        response = c.request(heartbeat_req.ConsumerGroupHeartbeatRequest(
            group_id=group, member_id="", member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout=datetime.timedelta(seconds=30), subscribed_topic_names=(), server_assignor=None,
            topic_partitions=()))
    assert response.error_code == ErrorCode.none
    return int(response.heartbeat_interval.total_seconds() * 1000)


def test_group_configs_are_described_altered_and_used(broker, confluent_admin):
    loaded_partition(broker, "g848")
    loaded_partition(broker, "other")
    group = ConfigResource(ResourceType.GROUP, "g848", incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", "50000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("consumer.heartbeat.interval.ms", "6000", incremental_operation=AlterConfigOpType.SET)])
    assert results(confluent_admin.incremental_alter_configs([group])) == {"g848": None}
    [configs] = results(confluent_admin.describe_configs([ConfigResource(ResourceType.GROUP, "g848")])).values()
    assert (configs["consumer.session.timeout.ms"].value, configs["consumer.session.timeout.ms"].source) == (
        "50000", ConfigSource.GROUP_CONFIG.value)
    assert (configs["share.record.lock.duration.ms"].value, configs["share.record.lock.duration.ms"].is_default) == (
        "30000", True)
    assert heartbeat_interval_ms(broker, "g848") == 6000
    assert heartbeat_interval_ms(broker, "other") == 5000

    for name, value in (("consumer.session.timeout.ms", "1000"), ("consumer.heartbeat.interval.ms", "50000"),
                        ("share.auto.offset.reset", "sometime"), ("no.such.config", "1")):
        bad = ConfigResource(ResourceType.GROUP, "g848", incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
        with pytest.raises(ck.KafkaException) as info:
            results(confluent_admin.incremental_alter_configs([bad]))
        assert info.value.args[0].code() == ck.KafkaError.INVALID_CONFIG, name
    kafka_python = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        listed = kafka_python.list_config_resources()
        assert "g848" in listed["group"] and listed["broker"] == ["0"]
        assert "__consumer_offsets" in listed["topic"]
    finally:
        kafka_python.close()


def test_min_insync_replicas_and_timestamp_bounds_act_on_produce(broker):
    broker.create_topic("strict", **{"min.insync.replicas": "2"})
    broker.create_topic("recent", **{"message.timestamp.before.max.ms": "3600000"})
    now = int(time.time() * 1000)
    with broker.client() as c:
        assert produce(c, "strict", batch([b"x"])).error_code == ErrorCode.not_enough_replicas
        assert produce(c, "strict", batch([b"x"]), acks=1).error_code == ErrorCode.none
        assert produce(c, "recent", batch([b"now"], ts=now)).error_code == ErrorCode.none
        old = produce(c, "recent", batch([b"old", b"older"], ts=now - 7_200_000))
        assert old.error_code == ErrorCode.invalid_timestamp
        assert [e.batch_index for e in old.record_errors] == [0, 1]
        future = produce(c, "recent", batch([b"later"], ts=now + 7_200_000))  # after.max.ms: one hour by default
        assert future.error_code == ErrorCode.invalid_timestamp
