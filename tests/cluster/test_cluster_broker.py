"""Three real brokers on one shared storage root, coordinated through a real ZooKeeper (issue 18's
proof): Kafka's semantics for clients (Metadata, NOT_LEADER_OR_FOLLOWER, leader epochs,
FindCoordinator, DescribeCluster, ElectLeaders), failover under kill -9 and SIGSTOP with
idempotent producers (confluent-kafka and kafka-python) and a consumer group running throughout,
a paused leader's late produce never acknowledged nor visible, the root's single/cluster mode,
and a three-node ZooKeeper losing a node.

One cluster serves the module (its brokers are restarted or resumed after a test that stopped
them); sessions of 1 s keep each failover to a few seconds."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from kio.schema.describe_cluster.v1 import request as cluster_req
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as fc_req

from topiclake.client.conn import BrokerConnection
from topiclake.broker.group.java import coordinator_partition

from tests.support.paths import REPO
from tests.support.broker_process import BrokerProcess
from tests.support.cluster_brokers import INTERNAL_PARTITIONS, ClusterBrokers, cluster_settings, write_toml
from tests.support.cluster_clients import ConfluentProducer, GroupReader, KafkaPythonProducer, Ledger, metadata, parse_value, raw_fetch, raw_list_offsets, raw_produce
from tests.support.waits import wait_for
from tests.support.cluster_faults import leader_faults_under_load, leader_of
from tests.support.cluster_topics import create_topic, settled, preferred_leader

PREFERRED_DELAY_MS = 4000  # long enough for a test to ask ElectLeaders before the controller moves it


@pytest.fixture(scope="module")
def running_cluster(zookeeper, tmp_path_factory):
    settings = cluster_settings(zookeeper.connect_string, f"/cluster-{uuid.uuid4().hex[:8]}",
                                preferred_leader_delay_ms=PREFERRED_DELAY_MS)
    with ClusterBrokers(tmp_path_factory.mktemp("cluster"), settings) as brokers:
        yield brokers


@pytest.fixture
def brokers(running_cluster):
    """The module's cluster, whole again after the test (killed brokers restarted, paused resumed)."""
    yield running_cluster
    running_cluster.make_whole()



# ============================================================================ semantics
def test_metadata_names_every_broker_and_each_leader_and_others_refuse(brokers):
    views = create_topic(brokers, "where", 6)
    assert {v.leader for v in views.values()} == {1, 2, 3}, "the partitions spread over the brokers"
    assert all(v.replicas == (v.leader,) and v.leader == preferred_leader("where", p) for p, v in views.items())
    leader = views[0].leader
    other = next(b for b in (1, 2, 3) if b != leader)
    with BrokerConnection(brokers.bootstrap_of(other)) as client:
        assert raw_produce(client, "where", 0, b"misdirected").error_code == ErrorCode.not_leader_or_follower
        assert raw_fetch(client, "where", 0, 0).error_code == ErrorCode.not_leader_or_follower
        assert raw_list_offsets(client, "where", 0).error_code == ErrorCode.not_leader_or_follower
    with BrokerConnection(brokers.bootstrap_of(leader)) as client:
        answer = raw_produce(client, "where", 0, b"to the leader")
        assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0)
        epoch = views[0].epoch
        assert raw_fetch(client, "where", 0, 0, epoch=epoch).error_code == ErrorCode.none
        assert raw_fetch(client, "where", 0, 0, epoch=epoch + 1).error_code == ErrorCode.unknown_leader_epoch
        assert raw_list_offsets(client, "where", 0, epoch=epoch + 1).error_code == ErrorCode.unknown_leader_epoch


def test_partitions_added_through_one_broker_are_led_and_served_by_all(brokers):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewPartitions

    create_topic(brokers, "grown", 2)
    admin = AdminClient({"bootstrap.servers": brokers.bootstrap_of(1)})  # one broker handles the request
    for future in admin.create_partitions([NewPartitions("grown", 6)]).values():
        future.result(30)
    views = wait_for(lambda: settled(brokers, "grown", 6), 20, what="every broker knowing the new leaders")
    assert {v.leader for p, v in views.items() if p >= 2} == {1, 2, 3}
    producer = Producer({"bootstrap.servers": brokers.bootstrap, "enable.idempotence": True})
    delivered = []
    for p in range(6):
        producer.produce("grown", value=b"v%d" % p, partition=p,
                         on_delivery=lambda e, m: delivered.append((e, m.partition())))
    assert producer.flush(30) == 0
    assert sorted(delivered) == [(None, p) for p in range(6)]


def test_find_coordinator_and_describe_cluster_answer_alike_on_every_broker(brokers):
    create_topic(brokers, "coordinated", 1)
    keys = [f"group-{i}" for i in range(8)]
    answers = {}
    for broker_id in (1, 2, 3):
        with BrokerConnection(brokers.bootstrap_of(broker_id)) as client:
            def find(key_type: int) -> dict:
                return {c.key: (c.error_code, c.node_id) for c in client.request(
                    fc_req.FindCoordinatorRequest(key_type=key_type, coordinator_keys=tuple(keys))).coordinators}
            groups = wait_for(lambda: (lambda a: a if all(e == ErrorCode.none for e, _ in a.values()) else None)(
                find(0)), 20, what="every group's coordinator")
            txns = wait_for(lambda: (lambda a: a if all(e == ErrorCode.none for e, _ in a.values()) else None)(
                find(1)), 20, what="every transactional id's coordinator")
            described = client.request(cluster_req.DescribeClusterRequest(include_cluster_authorized_operations=False))
        answers[broker_id] = (groups, txns, sorted((b.broker_id, b.port) for b in described.brokers),
                              described.controller_id, metadata(brokers.bootstrap_of(broker_id), "coordinated").controller)
    assert answers[1] == answers[2] == answers[3]
    groups, txns, described, controller, metadata_controller = answers[1]
    # Every broker names the controller ZooKeeper's /controller names.
    assert controller == metadata_controller == brokers.zookeeper_controller()[0]
    assert described == sorted((b, int(brokers.bootstrap_of(b).rsplit(":", 1)[1])) for b in (1, 2, 3))
    offsets = metadata(brokers.bootstrap_of(1), "__consumer_offsets").partitions
    states = metadata(brokers.bootstrap_of(1), "__transaction_state").partitions
    for key in keys:
        assert groups[key][1] == offsets[coordinator_partition(key, INTERNAL_PARTITIONS)].leader
        assert txns[key][1] == states[coordinator_partition(key, INTERNAL_PARTITIONS)].leader


def test_elect_leaders_moves_a_partition_home_before_the_controller_would(brokers):
    from confluent_kafka import ElectionType, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient

    views = create_topic(brokers, "elected", 6)
    tps = [TopicPartition("elected", p) for p in range(6)]
    admin = AdminClient({"bootstrap.servers": brokers.bootstrap})
    result = admin.elect_leaders(ElectionType.PREFERRED, tps).result(20)
    assert {tp.partition: err.code() for tp, err in result.items()} == {p: KafkaError.ELECTION_NOT_NEEDED
                                                                       for p in range(6)}
    result = admin.elect_leaders(ElectionType.UNCLEAN, tps[:1]).result(20)  # every live broker is clean here
    assert [err.code() for err in result.values()] == [KafkaError.ELECTION_NOT_NEEDED]
    away = views[0].leader
    brokers.kill(away)
    moved = wait_for(lambda: settled(brokers, "elected", 6), 20, what="the failover")
    homeless = [p for p, v in views.items() if v.leader == away]
    assert all(moved[p].leader != away and moved[p].epoch > views[p].epoch for p in homeless)
    # A librdkafka admin client keeps the controller its last Metadata named until it asks again
    # (topic.metadata.refresh.interval.ms): a new one learns the controller elected after the kill.
    admin = AdminClient({"bootstrap.servers": brokers.bootstrap})
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("elected", homeless[0])]).result(20)
    assert [err.code() for err in result.values()] == [KafkaError.PREFERRED_LEADER_NOT_AVAILABLE]
    brokers.restart(away)
    wait_for(lambda: away in metadata(brokers.bootstrap_of(away), "elected").brokers, 20, what="the restart")
    asked = time.monotonic()
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("elected", p) for p in homeless]).result(20)
    assert all(err is None or err.code() == KafkaError.NO_ERROR for err in result.values()), result
    back = wait_for(lambda: settled(brokers, "elected", 6, preferred=True), 10, what="the elected leaders")
    assert time.monotonic() - asked < PREFERRED_DELAY_MS / 1000, "the election, not the controller, moved them"
    assert all(back[p].leader == away for p in homeless)


def test_a_reassignment_moves_a_partitions_leader_and_preferred_broker_at_once(brokers):
    from confluent_kafka import ElectionType, KafkaError, TopicPartition as CkPartition
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient
    from kafka import errors as kerrors
    from kafka.structs import TopicPartition

    views = create_topic(brokers, "reassigned", 3)
    before = views[0]
    target = next(b for b in sorted(brokers.live()) if b != before.leader)
    pair = (views[1].leader, next(b for b in (1, 2, 3) if b != views[1].leader))
    admin = KafkaAdminClient(bootstrap_servers=brokers.bootstrap)
    try:
        results = admin.alter_partition_reassignments({TopicPartition("reassigned", 0): [target],
                                                       TopicPartition("reassigned", 1): list(pair),
                                                       TopicPartition("reassigned", 2): [9]})
        assert results == {TopicPartition("reassigned", 0): None,
                           TopicPartition("reassigned", 1): None,
                           TopicPartition("reassigned", 2): kerrors.InvalidReplicationAssignmentError}
        assert admin.list_partition_reassignments() == {}  # done as it was written: none in progress
    finally:
        admin.close()
    after = wait_for(lambda: (v := settled(brokers, "reassigned", 3)) and v[0].leader == target
                     and v[1].replicas == pair and v, 20, what="the reassigned replicas")
    assert after[0].epoch == before.epoch + 1 and after[0].replicas == (target,) and after[2] == views[2]
    # partition 1's leader was already the first of its new replicas: no leader change, more replicas
    assert (after[1].leader, after[1].epoch) == (views[1].leader, views[1].epoch)
    with BrokerConnection(brokers.bootstrap_of(target)) as client:  # the new leader serves it
        assert raw_produce(client, "reassigned", 0, b"moved").error_code == ErrorCode.none
    # The named broker is now the preferred one: nothing to elect, and the controller keeps it there.
    confluent = AdminClient({"bootstrap.servers": brokers.bootstrap})
    elected = confluent.elect_leaders(ElectionType.PREFERRED, [CkPartition("reassigned", 0)]).result(20)
    assert [err.code() for err in elected.values()] == [KafkaError.ELECTION_NOT_NEEDED]


# ============================================================================ failover
def test_kill_and_pause_leaders_under_load_nothing_acknowledged_is_lost(brokers):
    """kill -9 one leader, then SIGSTOP another and SIGCONT it once it was replaced, while two
    idempotent producers (confluent-kafka, kafka-python) and a consumer group run."""
    topic, partitions = "failover", 6
    create_topic(brokers, topic, partitions)
    ledger, stop_producers, stop_reader = Ledger(), threading.Event(), threading.Event()
    producers = [ConfluentProducer(brokers.bootstrap, topic, partitions, ledger, stop_producers),
                 KafkaPythonProducer(brokers.bootstrap, topic, partitions, ledger, stop_producers)]
    reader = GroupReader(brokers.bootstrap, topic, "failover-readers", ledger, stop_reader)
    run = leader_faults_under_load(brokers, topic, partitions, ledger, producers, stop_producers, reader,
                                   stop_reader)  # Metadata names only the live brokers
    for partition in range(partitions):
        rows = sorted((o, v) for (p, o), v in run.consumed_at.items() if p == partition)
        for name in ("confluent", "kafka-python"):
            sequence = [parse_value(v)[2] for _o, v in rows if parse_value(v)[0] == name]
            assert sequence == sorted(sequence), f"{name}'s records out of order in partition {partition}"
    assert len(run.expected) > 1000


# ============================================================================ the root's mode
def test_a_single_broker_and_a_cluster_refuse_each_others_root(brokers, tmp_path):
    zookeeper, chroot = brokers.settings["cluster"]["zookeeper"], brokers.settings["cluster"]["chroot"]
    config = write_toml(tmp_path / "joiner.toml", cluster_settings(zookeeper, "/joiner"))
    single_root = tmp_path / "single"

    def start(root, *args) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "topiclake.cli", "broker", "start", "--port", "0", "--data",
                               str(root), *args], cwd=REPO, capture_output=True, text=True, timeout=60)

    def single_broker_was_here() -> None:
        BrokerProcess(single_root, log_path=tmp_path / "single.log").start().stop()

    with ThreadPoolExecutor(2) as pool:  # two process starts at once: each is seconds of imports
        made = pool.submit(single_broker_was_here)
        alone = start(brokers.root, "--config", str(REPO / "conf" / "topiclake.toml"))
        made.result()
    joiner = start(single_root, "--config", str(config), "--broker-id", "9")
    assert (alone.returncode, joiner.returncode) == (1, 1)
    assert alone.stderr.strip().splitlines() == [
        f"error: storage root {brokers.root} is used by a cluster of brokers ({zookeeper}{chroot}): set [cluster] "
        "zookeeper to join it, or use another --data"], alone.stderr
    assert joiner.stderr.strip().splitlines() == [
        f"error: storage root {single_root} belongs to a single broker (no [cluster] setting); a cluster needs a "
        "storage root of its own: use another --data"], joiner.stderr


# ============================================================================ ZooKeeper
def test_a_three_node_zookeeper_losing_its_leader_keeps_the_cluster_serving(zookeeper3, tmp_path):
    """kill -9 the ZooKeeper node that leads the ensemble: the brokers' sessions move to the
    others (2 s sessions, as configured by default), producing never stops for long, and a broker
    killed next still fails over."""
    settings = cluster_settings(zookeeper3.connect_string, f"/zk3-{uuid.uuid4().hex[:8]}", session_timeout_ms=2000)
    with ClusterBrokers(tmp_path / "zk3", settings) as brokers:
        topic, partitions = "quorum", 3
        create_topic(brokers, topic, partitions)
        ledger, stop = Ledger(), threading.Event()
        producer = ConfluentProducer(brokers.bootstrap, topic, partitions, ledger, stop)
        producer.start()
        try:
            wait_for(lambda: len(ledger.acked) >= 100, 30, what="the first acknowledgements")
            zookeeper3.kill(zookeeper3.leader_id())
            killed_at, acked = time.monotonic(), len(ledger.acked)
            for p in range(partitions):
                wait_for(lambda: ledger.acked_since(p, acked) >= 20, 20, what=f"partition {p} acknowledging again")
            recovered_s = time.monotonic() - killed_at
            assert settled(brokers, topic, partitions), "every broker serving, every partition led"
            # ...and the two ZooKeeper nodes left still move a dead broker's partitions.
            brokers.kill(leader_of(brokers, topic, 0))
            acked = len(ledger.acked)
            wait_for(lambda: settled(brokers, topic, partitions), 20, what="a failover on two ZooKeeper nodes")
            wait_for(lambda: ledger.acked_since(0, acked) >= 20, 20, what="partition 0 acknowledging again")
        finally:
            stop.set()
            producer.join(120)
    assert producer.error is None and producer.unflushed == 0 and ledger.delivery_errors == []
    assert recovered_s < 15
