"""One interface, two implementations: what holds for one client holds on ZooKeeper and for a
broker alone; the single broker leads everything at epoch 0 (today's behaviour). And `[cluster]`."""

from __future__ import annotations

import pytest

from topiclake.broker.cluster.config import ClusterConfig
from topiclake.broker.cluster.coordination import (BrokerInfo, ControllerToken, NodeExistsError, NotControllerError,
                                                   PartitionState, SessionState, StaleVersionError)
from topiclake.broker.cluster.single import SINGLE_BROKER_EPOCH, UNWRITTEN_VERSION, SingleBrokerCoordination
from topiclake.segments.errors import InvalidConfigError
from topiclake.segments.settings import load_settings

from .helpers import Recorder


@pytest.fixture(params=["zookeeper", "single"])
def one_client(request):
    if request.param == "single":
        client = SingleBrokerCoordination(1)
        yield client
        client.close()
    else:
        yield request.getfixturevalue("coordination")(1)


def test_the_same_rules_on_every_implementation(one_client):
    client = one_client
    assert client.session_state is SessionState.CONNECTED
    brokers, topics, changes, elected = Recorder(), Recorder(), Recorder(), Recorder()
    client.watch_brokers(brokers)
    client.watch_topics(topics)
    assert brokers.next() == {} and topics.next() == []
    client.register_broker(BrokerInfo(1, "127.0.0.1", 9001))
    assert brokers.until(lambda live: 1 in live)[1].port == 9001
    client.campaign(elected, lambda: None)
    token = elected.next()
    client.create_topic("t", {0: PartitionState(1, 0, (1,))}, token=token)
    assert topics.until(lambda names: names) == ["t"]
    with pytest.raises(NodeExistsError):
        client.create_topic("t", {0: PartitionState(1, 0, (1,))})
    state = client.partition_state("t", 0)
    moved = client.set_partition_state("t", 0, PartitionState(1, 1, (1,)), state.version, token=token)
    assert moved.version == state.version + 1
    with pytest.raises(StaleVersionError):
        client.set_partition_state("t", 0, PartitionState(1, 2, (1,)), state.version, token=token)
    with pytest.raises(NotControllerError):
        client.set_partition_state("t", 0, PartitionState(1, 2, (1,)), moved.version,
                                   token=ControllerToken(9, token.epoch + 7, token.fence + 7))
    partitions = Recorder()
    client.watch_partitions("t", partitions)
    assert partitions.next() == [0]
    client.add_partitions("t", {1: PartitionState(1, 0, (1,)), 2: PartitionState(1, 0, (1,))})
    assert partitions.until(lambda numbers: len(numbers) == 3) == [0, 1, 2]
    with pytest.raises(NodeExistsError):
        client.add_partitions("t", {2: PartitionState(1, 0, (1,))})
    assert sorted(client.partition_states("t")) == [0, 1, 2]
    assert client.watch_changes("configs", changes) == -1
    sequences = [client.publish_change("configs", {"n": n}) for n in range(3)]
    assert [changes.next().sequence for _ in range(3)] == sequences
    late = Recorder()
    client.watch_changes("configs", late, after=sequences[0])
    assert [late.next().payload["n"] for _ in range(2)] == [1, 2]


def test_a_single_broker_leads_every_partition_at_epoch_0():
    client = SingleBrokerCoordination(3)
    try:
        state = client.partition_state("anything", 17)
        assert state.value == PartitionState(3, SINGLE_BROKER_EPOCH, (3,)) and state.version == UNWRITTEN_VERSION
        assert client.controller() == (3, 0)
        elected = Recorder()
        client.campaign(elected, lambda: None)
        assert elected.next() == ControllerToken(3, 0, 0)
        written = client.set_partition_state("anything", 17, PartitionState(3, 0, (3,)), UNWRITTEN_VERSION)
        assert written.version == 0
    finally:
        client.close()


def test_cluster_settings(tmp_path):
    assert not ClusterConfig().enabled and not ClusterConfig.from_settings({}).enabled  # unset: nothing changes
    path = tmp_path / "topiclake.toml"
    path.write_text('[cluster]\nzookeeper = "zk1:2181, zk2:2181,zk3:2181"\nchroot = "/prod/topiclake"\n'
                    'session_timeout_ms = 3000\nrack = "a"\n')
    config = ClusterConfig.from_settings(load_settings(path))
    assert config.enabled and config.zookeeper == "zk1:2181,zk2:2181,zk3:2181" and config.chroot == "/prod/topiclake"
    assert (config.session_timeout_ms, config.rack) == (3000, "a")
    inline = ClusterConfig(zookeeper="zk1:2181/kafka-like")
    assert (inline.zookeeper, inline.chroot) == ("zk1:2181", "/kafka-like")


@pytest.mark.parametrize("section, message", [
    ({"zookeeper": "zk1"}, "host:port"),
    ({"zookeeper": "zk1:2181,:2181"}, "host:port"),
    ({"zookeeper": "zk1:99999"}, "host:port"),
    ({"zookeeper": "zk1:2181", "chroot": "topiclake"}, "absolute znode path"),
    ({"zookeeper": "zk1:2181/a", "chroot": "/b"}, "give it once"),
    ({"zookeeper": "zk1:2181", "session_timeout_ms": 10}, "session_timeout_ms"),
    ({"zookeeper": 2181}, "zookeeper must be a string"),
    ({"zookeeper": "zk1:2181", "zookeper_chroot": "/x"}, "unknown \\[cluster\\] settings: zookeper_chroot"),
])
def test_bad_cluster_settings_are_one_clear_error(section, message):
    with pytest.raises(InvalidConfigError, match=message):
        ClusterConfig.from_settings({"cluster": section})
