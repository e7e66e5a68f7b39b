"""Topic admin over the protocol: the `topiclake topics` commands, configs, partitions, cluster, ids."""

from __future__ import annotations

import datetime

from kio.schema.alter_configs.v2 import request as alter_req
from kio.schema.describe_cluster.v1 import request as cluster_req
from kio.schema.describe_configs.v4 import request as describe_req
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as inc_req
from kio.schema.init_producer_id.v5 import request as pid_req
from typer.testing import CliRunner

from topiclake.cli import app

runner = CliRunner()


def cli(broker, *args: str):
    return runner.invoke(app, ["topics", *args, "--bootstrap", broker.bootstrap])


def describe_configs(client, topic, keys=None):
    res = describe_req.DescribeConfigsResource(resource_type=2, resource_name=topic, configuration_keys=keys)
    result = client.request(describe_req.DescribeConfigsRequest(resources=(res,))).results[0]
    return result.error_code, {c.name: (c.value, c.config_source) for c in result.configs}


def test_topics_commands_round_trip(broker):
    result = cli(broker, "create", "events", "--partitions", "3", "--config", "retention.ms=60000")
    assert result.exit_code == 0, result.output
    assert "Created topic events (3 partitions" in result.output
    assert cli(broker, "list").output.split() == ["events"]
    described = cli(broker, "describe", "events").output
    assert "PartitionCount: 3" in described and "retention.ms=60000" in described
    assert described.count("Leader: 0") == 3

    assert cli(broker, "alter-config", "events", "cleanup.policy=compact", "segment.bytes=1048576").exit_code == 0
    assert cli(broker, "alter-config", "events", "retention.ms=1", "--delete", "retention.ms").exit_code == 0
    with broker.client() as c:
        code, configs = describe_configs(c, "events")
    assert code == ErrorCode.none
    assert configs["cleanup.policy"] == ("compact", 1) and configs["segment.bytes"] == ("1048576", 1)
    assert configs["retention.ms"] == ("604800000", 5), "deleted override falls back to the default"

    assert cli(broker, "add-partitions", "events", "--partitions", "5").exit_code == 0
    assert "PartitionCount: 5" in cli(broker, "describe", "events").output
    assert cli(broker, "delete", "events").exit_code == 0
    assert cli(broker, "list").output.split() == []
    assert not broker.context.layout.topic_file("events").exists()


def test_topics_command_errors(broker):
    bad = cli(broker, "create", "../etc", "--partitions", "1")
    assert bad.exit_code == 1 and "INVALID_TOPIC_EXCEPTION" in bad.output
    assert "UNKNOWN_TOPIC_OR_PARTITION" in cli(broker, "delete", "missing").output
    cli(broker, "create", "t1")
    bad_config = cli(broker, "alter-config", "t1", "min.cleanable.dirty.ratio=7")
    assert bad_config.exit_code == 1 and "INVALID_CONFIG" in bad_config.output
    assert "INVALID_PARTITIONS" in cli(broker, "add-partitions", "t1", "--partitions", "1").output
    unreachable = runner.invoke(app, ["topics", "list", "--bootstrap", "127.0.0.1:1"])
    assert unreachable.exit_code == 1 and "cannot reach" in unreachable.output


def test_legacy_alter_configs_replaces_overrides_and_reaches_open_logs(broker):
    broker.create_topic("legacy", **{"retention.ms": "1000", "segment.ms": "5000"})
    with broker.client() as c:
        res = alter_req.AlterConfigsResource(resource_type=2, resource_name="legacy", configs=(
            alter_req.AlterableConfig(name="message.timestamp.type", value="LogAppendTime"),))
        resp = c.request(alter_req.AlterConfigsRequest(resources=(res,), validate_only=False))
        assert resp.responses[0].error_code == ErrorCode.none
        code, configs = describe_configs(c, "legacy", ("retention.ms", "message.timestamp.type"))
    assert configs == {"retention.ms": ("604800000", 5), "message.timestamp.type": ("LogAppendTime", 1)}


def test_incremental_alter_reaches_the_active_segment_at_once(broker):
    from tests.support.wire import batch, produce

    broker.create_topic("grows")
    directory = broker.context.layout.log_dir("grows", 0)
    with broker.client() as c:
        assert produce(c, "grows", batch([b"x" * 100])).error_code == ErrorCode.none
        assert len(list(directory.glob("*.log"))) == 1
        res = inc_req.AlterConfigsResource(resource_type=2, resource_name="grows", configs=(
            inc_req.AlterableConfig(name="segment.bytes", config_operation=0, value="300"),))
        resp = c.request(inc_req.IncrementalAlterConfigsRequest(resources=(res,), validate_only=False))
        assert resp.responses[0].error_code == ErrorCode.none
        # The open log's active segment rolls by the new size on the very next appends.
        for _ in range(3):
            assert produce(c, "grows", batch([b"y" * 100])).error_code == ErrorCode.none
    assert len(list(directory.glob("*.log"))) >= 3
    log = broker.context.partitions._partitions[("grows", 0)].log
    assert log.config.segment_bytes == 300 and log.active_segment.config.segment_bytes == 300


def test_describe_cluster_and_producer_ids(broker):
    with broker.client() as c:
        cluster = c.request(cluster_req.DescribeClusterRequest(include_cluster_authorized_operations=False))
        assert cluster.cluster_id == broker.context.cluster_id and len(cluster.cluster_id) == 22
        assert [(b.broker_id, b.port) for b in cluster.brokers] == [(0, broker.server.port)]
        ids = [c.request(pid_req.InitProducerIdRequest(transactional_id=None,
                                                       transaction_timeout=datetime.timedelta(seconds=60)))
               for _ in range(3)]
        assert [r.error_code for r in ids] == [ErrorCode.none] * 3
        assert len({r.producer_id for r in ids}) == 3
        txn = c.request(pid_req.InitProducerIdRequest(transactional_id="tx",
                                                      transaction_timeout=datetime.timedelta(seconds=60)))
        # a transactional id: the transaction coordinator's own id, epoch 0 (tests/broker/txn has the rest)
        assert (txn.error_code, txn.producer_epoch) == (ErrorCode.none, 0)
        assert txn.producer_id not in {r.producer_id for r in ids}


def test_a_single_broker_takes_a_replication_factor_of_one_and_itself_as_the_only_replica(broker):
    from kio.schema.create_topics.v7 import request as create_req

    def create(name: str, factor: int = -1, assignments=()):
        topic = create_req.CreatableTopic(name=name, num_partitions=-1 if assignments else 2,
                                          replication_factor=factor, assignments=assignments, configs=())
        with broker.client() as client:
            return client.request(create_req.CreateTopicsRequest(
                topics=(topic,), timeout=datetime.timedelta(seconds=5), validate_only=False)).topics[0]

    assert [(r.error_code, r.replication_factor) for r in (create("rf-default"), create("rf-one", 1))] == [
        (ErrorCode.none, 1), (ErrorCode.none, 1)]
    two = create("rf-two", 2)
    assert two.error_code == ErrorCode.invalid_replication_factor
    assert "replication factor of 2 cannot be reached because only 1 broker(s) are registered" in two.error_message
    assert create("rf-zero", 0).error_code == ErrorCode.invalid_replication_factor
    elsewhere = create("rf-elsewhere", assignments=(
        create_req.CreatableReplicaAssignment(partition_index=0, broker_ids=(0, 7)),))
    assert elsewhere.error_code == ErrorCode.invalid_replica_assignment and "not live" in elsewhere.error_message
    mine = create("rf-mine", assignments=(create_req.CreatableReplicaAssignment(partition_index=0, broker_ids=(0,)),))
    assert (mine.error_code, mine.num_partitions, mine.replication_factor) == (ErrorCode.none, 1, 1)
