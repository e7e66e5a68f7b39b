"""Share groups (KIP-932) on three real brokers sharing one storage root, coordinated through a
real ZooKeeper: a share-partition's leader (the data partition's leader, where ShareFetch and
ShareAcknowledge go) and its share coordinator (the leader of its `__share_group_state`
partition) are different brokers, so every read and write of its state crosses the wire
(share.persister, handlers.share_state).

With confluent-kafka's ShareConsumer: every record is delivered and acknowledged; after a kill -9
of a data partition's leader (the share coordinator of another partition's state, too), the
records acquired there and not acknowledged are delivered again by the new leader, the other
partition's state is found at its new coordinator, and nothing acknowledged comes back; offsets altered on the group's coordinator
reach the partitions' leaders; a ShareFetch to a broker that does not lead the partition names its
leader."""

from __future__ import annotations

import base64
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from kio.schema.alter_share_group_offsets.v0 import request as alter_req
from kio.schema.describe_share_group_offsets.v1 import request as describe_req
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v6 import request as fc_req
from kio.schema.metadata.v12 import request as md_req

from topiclake.client.conn import BrokerConnection

from tests.support.share_wire import share_fetch as raw_share_fetch
from tests.support.broker_process import BrokerProcess, free_port
from tests.support.waits import wait_for

pytestmark = pytest.mark.slow

BROKERS = (1, 2, 3)
PARTITIONS = 3
LOCK_MS = 2000
GROUP_KEY, SHARE_KEY = 0, 2  # FindCoordinator key types


class Cluster:
    """Three `topiclake broker start` processes in cluster mode on one root."""

    def __init__(self, work: Path, zookeeper: str):
        self.config = work / "cluster.toml"
        self.config.write_text(f"""
[broker]
num_partitions = {PARTITIONS}
[groups]
min_session_timeout_ms = 1000
initial_rebalance_delay_ms = 0
offsets_topic_partitions = 6
[share]
state_topic_partitions = 6
record_lock_duration_ms = {LOCK_MS}
min_record_lock_duration_ms = 1000
[cluster]
zookeeper = "{zookeeper}"
chroot = "/share-{uuid.uuid4().hex[:8]}"
session_timeout_ms = 1000
preferred_leader_delay_ms = 1000
""")
        self.brokers = {i: BrokerProcess(work / "data", free_port(), log_path=work / f"broker-{i}.log",
                                         config=self.config, args=("--broker-id", str(i))) for i in BROKERS}

    def start(self) -> "Cluster":
        with ThreadPoolExecutor(len(self.brokers)) as pool:
            for future in [pool.submit(b.start) for b in self.brokers.values()]:
                future.result()
        self.wait_whole()
        return self

    def wait_whole(self) -> None:
        """Until every broker has joined (each names all three and a controller), and leads its
        preferred share of the internal topics again after a restart."""
        def joined(broker_id: int) -> bool:
            response = self.request(md_req.MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                                           include_topic_authorized_operations=False), broker_id)
            return {b.node_id for b in response.brokers} == set(BROKERS) and response.controller_id >= 0

        for broker_id in BROKERS:
            wait_for(lambda: joined(broker_id), 30, 0.1, f"broker {broker_id} to join")
        for internal in ("__share_group_state", "__consumer_offsets"):
            wait_for(lambda: set(leaders(self, internal).values()) in (set(BROKERS), set()), 30, 0.2,
                     f"{internal}'s leaders to move home")

    def stop(self) -> None:
        for broker in self.brokers.values():
            try:
                broker.stop(30)
            except Exception:  # noqa: BLE001  (one that does not stop in time is killed)
                broker.kill()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def live(self) -> list[int]:
        return [i for i, b in self.brokers.items() if b.proc is not None and b.proc.poll() is None]

    def request(self, body, broker_id: int | None = None):
        broker = self.brokers[broker_id if broker_id is not None else self.live()[0]]
        with BrokerConnection(broker.bootstrap, timeout=20) as client:
            return client.request(body)

    def logs(self) -> str:
        return "\n".join(f"--- broker {i}\n{b.log()[-3000:]}" for i, b in self.brokers.items())


@pytest.fixture(scope="module")
def share_cluster(zookeeper, tmp_path_factory):
    brokers = Cluster(tmp_path_factory.mktemp("share-cluster"), zookeeper.connect_string).start()
    yield brokers
    brokers.stop()


def create_topic(share_cluster: Cluster) -> tuple[str, uuid.UUID]:
    name = f"share-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": share_cluster.bootstrap})
    for future in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).values():
        future.result(20)
    wait_for(lambda: all(leader >= 0 for leader in leaders(share_cluster, name).values()), 20, 0.1,
             f"leaders of {name}")
    return name, topic_metadata(share_cluster, name).topic_id


def topic_metadata(share_cluster: Cluster, topic: str):
    response = share_cluster.request(md_req.MetadataRequest(topics=(md_req.MetadataRequestTopic(topic_id=None, name=topic),),
                                                      allow_auto_topic_creation=False,
                                                      include_topic_authorized_operations=False))
    return response.topics[0]


def leaders(share_cluster: Cluster, topic: str) -> dict[int, int]:
    return {p.partition_index: p.leader_id for p in topic_metadata(share_cluster, topic).partitions}


def coordinator(share_cluster: Cluster, key_type: int, key: str) -> int | None:
    """The broker coordinating `key` (None while it has none)."""
    response = share_cluster.request(fc_req.FindCoordinatorRequest(key_type=key_type, coordinator_keys=(key,)))
    [found] = response.coordinators
    return found.node_id if found.error_code == ErrorCode.none else None


def share_key(group: str, topic_id: uuid.UUID, partition: int) -> str:
    """Kafka's SharePartitionKey.asCoordinatorKey()."""
    return f"{group}:{base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip('=')}:{partition}"


def state_coordinators(share_cluster: Cluster, group: str, topic_id: uuid.UUID) -> dict[int, int]:
    return {p: wait_for(lambda p=p: coordinator(share_cluster, SHARE_KEY, share_key(group, topic_id, p)), 20, 0.1,
                        "a share coordinator") for p in range(PARTITIONS)}


def group_apart(share_cluster: Cluster, topic: str, topic_id: uuid.UUID) -> tuple[str, dict[int, int]]:
    """A group whose share-partitions all have their state on another broker than their data
    (a data leader coordinating another one's state), with the group's own coordinator elsewhere
    than at least one of them; and its share coordinator of each partition."""
    data = leaders(share_cluster, topic)
    seen = []
    for _ in range(200):
        group = f"sg-{uuid.uuid4().hex[:8]}"
        state = state_coordinators(share_cluster, group, topic_id)
        group_coordinator = wait_for(lambda: coordinator(share_cluster, GROUP_KEY, group), 20, 0.1, "a group coordinator")
        if all(state[p] != data[p] for p in range(PARTITIONS)) and set(state.values()) != {group_coordinator} \
                and set(state.values()) & set(data.values()):
            set_group_config(share_cluster, group, "share.auto.offset.reset", "earliest")
            return group, state
        seen.append((state, group_coordinator))
    raise AssertionError(f"no group found whose state lies apart from its data {data}: {seen[:5]}")


def set_group_config(share_cluster: Cluster, group: str, name: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": share_cluster.bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(20)


def produce(share_cluster: Cluster, topic: str, per_partition: int, tag: str, partitions=range(PARTITIONS)) -> set[bytes]:
    """Idempotent, acks=all; each partition's records in one batch (they are acquired together)."""
    producer = Producer({"bootstrap.servers": share_cluster.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 200})
    values = set()
    for p in partitions:
        for i in range(per_partition):
            value = f"{tag}-p{p}-{i}".encode()
            producer.produce(topic, value, partition=p)
            values.add(value)
    assert producer.flush(30) == 0
    return values


def share_consumer(share_cluster: Cluster, group: str, topic: str) -> ShareConsumer:
    sc = ShareConsumer({"bootstrap.servers": share_cluster.bootstrap, "group.id": group,
                        "share.acknowledgement.mode": "explicit"})
    sc.subscribe([topic])
    return sc


def consume(sc: ShareConsumer, want, timeout: float, ack=lambda m: True) -> list:
    """Poll until `want(records so far)` or `timeout`; acknowledges (ACCEPT) those `ack` picks."""
    got: list = []
    deadline = time.monotonic() + timeout
    while not want(got) and time.monotonic() < deadline:
        for m in sc.poll(timeout=0.5):
            if m.error() is None:
                got.append(m)
                if ack(m):
                    sc.acknowledge(m, AcknowledgeType.ACCEPT)
    return got


def commit(sc: ShareConsumer) -> None:
    results = sc.commit_sync(20)
    assert all(error is None for error in results.values()), results


def start_offsets(share_cluster: Cluster, group: str, topic: str) -> dict[int, int]:
    """DescribeShareGroupOffsets at the group's coordinator: the state of each partition, read
    from its share coordinator (another broker for some)."""
    node = wait_for(lambda: coordinator(share_cluster, GROUP_KEY, group), 20, 0.1, "a group coordinator")
    response = share_cluster.request(describe_req.DescribeShareGroupOffsetsRequest(groups=(
        describe_req.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=(
            describe_req.DescribeShareGroupOffsetsRequestTopic(topic_name=topic,
                                                               partitions=tuple(range(PARTITIONS))),)),)), node)
    [described] = response.groups
    [entry] = described.topics
    assert all(p.error_code == ErrorCode.none for p in entry.partitions), entry
    return {p.partition_index: p.start_offset for p in entry.partitions}


def test_every_record_is_delivered_and_a_leader_kill_redelivers_only_what_was_not_acknowledged(share_cluster):
    topic, topic_id = create_topic(share_cluster)
    group, state = group_apart(share_cluster, topic, topic_id)
    data = leaders(share_cluster, topic)
    # The victim's leader is the share coordinator of the orphan's state: both move at the kill.
    victim, orphan = next((p, q) for p in range(PARTITIONS) for q in range(PARTITIONS) if state[q] == data[p])
    first = produce(share_cluster, topic, 20, "a")
    holder = share_consumer(share_cluster, group, topic)
    taker = None
    try:
        got = consume(holder, lambda got: {m.value() for m in got} >= first, 60)
        values = [m.value() for m in got]
        assert set(values) == first and len(values) == len(first), "every record once, each acknowledged"
        commit(holder)
        assert start_offsets(share_cluster, group, topic) == {p: 20 for p in range(PARTITIONS)}

        # The holder acquires the victim partition's next records and keeps them unacknowledged
        # (explicit acknowledgement: it cannot poll again), on the leader that is then killed.
        victim_leader = data[victim]
        held = produce(share_cluster, topic, 10, "b", partitions=[victim])
        acquired = consume(holder, lambda got: bool(got), 30, ack=lambda m: False)
        assert {m.value() for m in acquired} == held, "the batch is acquired whole"

        share_cluster.brokers[victim_leader].kill()  # kill -9: the acquisitions die with it, the state does not
        wait_for(lambda: leaders(share_cluster, topic)[victim] not in (victim_leader, -1), 30, 0.2, "a new leader")
        holder.close()  # leaves the group: the taker is given every partition
        more = produce(share_cluster, topic, 5, "c", partitions=[orphan])  # its state now has another coordinator
        taker = share_consumer(share_cluster, group, topic)
        again = consume(taker, lambda got: {m.value() for m in got} >= held | more, 90)
        delivered = [m.value() for m in again]
        assert set(delivered) >= held, f"not delivered again: {sorted(held - set(delivered))}\n{share_cluster.logs()}"
        assert set(delivered) >= more
        assert not set(delivered) & first, "an acknowledged record came back"
        assert len(delivered) == len(set(delivered)) == len(held) + len(more)
        commit(taker)
        expected = {p: 20 + (10 if p == victim else 0) + (5 if p == orphan else 0) for p in range(PARTITIONS)}
        assert wait_for(lambda: start_offsets(share_cluster, group, topic) == expected or None, 30, 0.3,
                        "every record acknowledged, none lost")
    finally:
        for sc in (holder, taker):
            if sc is not None:
                try:
                    sc.close()
                except RuntimeError:  # closed already
                    pass
        for broker_id in [i for i in BROKERS if i not in share_cluster.live()]:  # whole again for the next test
            share_cluster.brokers[broker_id].start()
        share_cluster.wait_whole()


def test_offsets_altered_on_the_group_coordinator_reach_the_partition_leaders(share_cluster):
    topic, topic_id = create_topic(share_cluster)
    group, _state = group_apart(share_cluster, topic, topic_id)
    produce(share_cluster, topic, 8, "c")
    sc = share_consumer(share_cluster, group, topic)
    try:
        assert len(consume(sc, lambda got: len(got) >= 8 * PARTITIONS, 60)) == 8 * PARTITIONS
        commit(sc)
    finally:
        sc.close()  # leaves the group; its share sessions close on every leader
    assert start_offsets(share_cluster, group, topic) == {p: 8 for p in range(PARTITIONS)}
    node = coordinator(share_cluster, GROUP_KEY, group)

    def alter():
        return share_cluster.request(alter_req.AlterShareGroupOffsetsRequest(group_id=group, topics=(
            alter_req.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=tuple(
                alter_req.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=5)
                for p in range(PARTITIONS))),)), node)

    altered = wait_for(lambda: (lambda r: r if r.error_code == ErrorCode.none else None)(alter()), 20, 0.5,
                       "the group to be empty")  # the member's leave reaches the coordinator
    assert [p.error_code for p in altered.responses[0].partitions] == [ErrorCode.none] * PARTITIONS
    assert start_offsets(share_cluster, group, topic) == {p: 5 for p in range(PARTITIONS)}
    again = share_consumer(share_cluster, group, topic)
    try:
        records = consume(again, lambda got: len(got) >= 3 * PARTITIONS, 60)
        assert sorted((m.partition(), m.offset()) for m in records) == [
            (p, o) for p in range(PARTITIONS) for o in range(5, 8)], "delivered again from the altered offsets"
        commit(again)
    finally:
        again.close()
    assert start_offsets(share_cluster, group, topic) == {p: 8 for p in range(PARTITIONS)}


def test_a_share_fetch_to_a_broker_not_leading_the_partition_names_its_leader(share_cluster):
    topic, topic_id = create_topic(share_cluster)
    [partition] = [p for p in topic_metadata(share_cluster, topic).partitions if p.partition_index == 0]
    other = next(i for i in share_cluster.live() if i != partition.leader_id)
    with BrokerConnection(share_cluster.brokers[other].bootstrap, timeout=20) as client:
        response = raw_share_fetch(client, f"sg-{uuid.uuid4().hex[:8]}", "member-1", 0, topic_id)
    [answer] = response.responses[0].partitions
    assert answer.error_code == ErrorCode.not_leader_or_follower
    assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (
        partition.leader_id, partition.leader_epoch)
    leader = share_cluster.brokers[partition.leader_id]
    assert [(n.node_id, n.host, n.port) for n in response.node_endpoints] == [
        (partition.leader_id, "127.0.0.1", leader.port)]
