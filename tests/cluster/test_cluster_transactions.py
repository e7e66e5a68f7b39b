"""What spans brokers in a cluster, with real clients against three real brokers on one root:
transactions whose partitions, offsets and coordinator sit on different brokers (WriteTxnMarkers,
KIP-890 verification through the coordinator), a transaction coordinator failing over mid
transaction, a topic config change reaching the broker that leads the partition, and every
broker's schema registry serving what another one registered."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter

import pytest

from topiclake.segments import filenames

from tests.support.cluster_brokers import ClusterBrokers, cluster_settings
from tests.support.waits import wait_for

TOPIC_PARTITIONS = 6


@pytest.fixture(scope="module")
def txn_cluster(zookeeper, tmp_path_factory):
    registry_ports = {}
    settings = cluster_settings(zookeeper.connect_string, f"/txn-{uuid.uuid4().hex[:8]}")
    brokers = ClusterBrokers(tmp_path_factory.mktemp("cluster-txn"), settings)
    # Each broker its own schema registry port: one settings file per broker.
    from tests.support.cluster_brokers import write_toml
    from tests.support.broker_process import free_port

    for broker_id, broker in brokers.brokers.items():
        registry_ports[broker_id] = free_port()
        own = {**settings, "registry": {"listen": f"127.0.0.1:{registry_ports[broker_id]}"}}
        broker.config = write_toml(brokers.work / f"broker-{broker_id}.toml", own)
    brokers.registry_ports = registry_ports
    with brokers:
        yield brokers


@pytest.fixture
def live(txn_cluster):
    yield txn_cluster
    for broker_id, broker in txn_cluster.brokers.items():
        if broker.proc.poll() is not None:
            txn_cluster.restart(broker_id)


def leaders(txn_cluster: ClusterBrokers, topic: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    meta = AdminClient({"bootstrap.servers": txn_cluster.bootstrap}).list_topics(topic, timeout=10)
    return {p.id: p.leader for p in meta.topics[topic].partitions.values() if p.error is None}


def create_topic(txn_cluster: ClusterBrokers, topic: str, partitions: int = TOPIC_PARTITIONS, **config: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": txn_cluster.bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1, config=config)]).values():
        future.result(30)
    wait_for(lambda: len(leaders(txn_cluster, topic)) == partitions and set(leaders(txn_cluster, topic).values()) <=
             set(txn_cluster.live()), 30, what=f"{topic}'s leaders")


def read_committed(txn_cluster: ClusterBrokers, topic: str, expected: int, timeout: float = 30) -> Counter:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": txn_cluster.bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(TOPIC_PARTITIONS)])
    seen: Counter = Counter()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and sum(seen.values()) < expected:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen[msg.key()] += 1
        idle_until = time.monotonic() + 2  # anything beyond what was expected would show up here
        while time.monotonic() < idle_until:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen[msg.key()] += 1
    finally:
        consumer.close()
    return seen


def test_transactions_span_brokers_with_offsets_committed_in_them(live):
    from confluent_kafka import Consumer, Producer, TopicPartition

    create_topic(live, "tx-in")
    create_topic(live, "tx-out")
    assert len(set(leaders(live, "tx-out").values())) > 1  # the transaction's partitions: several brokers
    feeder = Producer({"bootstrap.servers": live.bootstrap, "enable.idempotence": True})
    for i in range(120):
        feeder.produce("tx-in", key=f"in-{i}".encode(), value=b"x", partition=i % TOPIC_PARTITIONS)
    assert feeder.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": live.bootstrap, "group.id": "tx-copier", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.assign([TopicPartition("tx-in", p, 0) for p in range(TOPIC_PARTITIONS)])
    producer = Producer({"bootstrap.servers": live.bootstrap, "transactional.id": "copier-1"})
    producer.init_transactions(30)
    copied = 0
    for round_ in range(4):
        batch = []
        while len(batch) < 30:
            msg = consumer.poll(1)
            if msg is not None and msg.error() is None:
                batch.append(msg)
        producer.begin_transaction()
        for msg in batch:
            producer.produce("tx-out", key=msg.key(), value=f"round-{round_}".encode(), partition=msg.partition())
        positions = [TopicPartition("tx-in", m.partition(), m.offset() + 1) for m in batch]
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        if round_ == 2:  # this round's copies and offsets go away together
            producer.abort_transaction(30)
            consumer.assign([TopicPartition("tx-in", p, o) for p, o in _committed(live, "tx-copier").items()])
        else:
            producer.commit_transaction(30)
            copied += len(batch)
    consumer.close()

    seen = read_committed(live, "tx-out", copied)
    assert sum(seen.values()) == copied and set(seen.values()) == {1}  # exactly once, nothing aborted
    assert sum(_committed(live, "tx-copier").values()) == copied  # the offsets committed with them


def _committed(txn_cluster: ClusterBrokers, group: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": txn_cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        offsets = consumer.committed([TopicPartition("tx-in", p) for p in range(TOPIC_PARTITIONS)], timeout=30)
    finally:
        consumer.close()
    return {tp.partition: max(tp.offset, 0) for tp in offsets}


def test_a_transaction_commits_after_its_coordinator_fails_over(live):
    from confluent_kafka import Producer

    create_topic(live, "tx-failover")
    producer = Producer({"bootstrap.servers": live.bootstrap, "transactional.id": "failover-1",
                         "transaction.timeout.ms": 60000, "message.timeout.ms": 60000})
    producer.init_transactions(30)
    coordinator = _coordinator_of(live, "failover-1")
    producer.begin_transaction()
    for i in range(60):
        producer.produce("tx-failover", key=f"k-{i}".encode(), value=b"v", partition=i % TOPIC_PARTITIONS)
    assert producer.flush(30) == 0
    live.kill(coordinator)  # the transaction is Ongoing in its __transaction_state partition
    producer.commit_transaction(60)  # the client finds the new coordinator, which loaded the partition
    seen = read_committed(live, "tx-failover", 60)
    assert sum(seen.values()) == 60 and set(seen.values()) == {1}


def _coordinator_of(txn_cluster: ClusterBrokers, transactional_id: str) -> int:
    from kio.schema.find_coordinator.v4 import request as fc_req

    from topiclake.client.conn import BrokerConnection

    with BrokerConnection(txn_cluster.bootstrap_of(txn_cluster.live()[0])) as client:
        [found] = client.request(fc_req.FindCoordinatorRequest(key_type=1, coordinator_keys=(transactional_id,))
                                 ).coordinators
    assert found.error_code.value == 0
    return found.node_id


def test_a_config_change_reaches_the_broker_leading_the_partition(live):
    from confluent_kafka import Producer
    from kio.schema.incremental_alter_configs.v1 import request as iac_req

    from topiclake.client.conn import BrokerConnection

    create_topic(live, "small-segments", partitions=3)
    partition, other = next(iter(leaders(live, "small-segments").items()))
    admin_broker = next(b for b in live.live() if b != other)
    with BrokerConnection(live.bootstrap_of(admin_broker)) as client:  # the change is made on another broker
        response = client.request(iac_req.IncrementalAlterConfigsRequest(validate_only=False, resources=(
            iac_req.AlterConfigsResource(resource_type=2, resource_name="small-segments", configs=(
                iac_req.AlterableConfig(name="segment.bytes", config_operation=0, value="2048"),)),)))
    assert response.responses[0].error_code.value == 0
    producer = Producer({"bootstrap.servers": live.bootstrap, "linger.ms": 0, "batch.size": 1000})
    directory = live.root / "log" / f"small-segments-{partition}"

    def rolled() -> bool:  # the change arrives as a notification: keep producing until it shows
        for _ in range(5):
            producer.produce("small-segments", value=b"x" * 400, partition=partition)
            producer.flush(10)
        return len([p for p in directory.iterdir() if p.suffix == filenames.LOG_SUFFIX]) >= 5

    wait_for(rolled, 60, interval=0.1, what=f"broker {other} to roll at the new segment.bytes")


def test_every_brokers_registry_serves_what_another_registered(live):
    import urllib.request

    def call(broker_id: int, path: str, body: dict | None = None):
        request = urllib.request.Request(f"http://127.0.0.1:{live.registry_ports[broker_id]}{path}",
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def up() -> bool:
        try:
            return all(isinstance(call(b, "/subjects"), list) for b in live.brokers)
        except OSError:
            return False

    wait_for(up, 90, interval=0.5, what="every broker's schema registry")
    schema = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
    registered = call(1, "/subjects/orders-value/versions", {"schema": json.dumps(schema)})
    for broker_id in live.brokers:
        found = wait_for(lambda: "orders-value" in call(broker_id, "/subjects") and call(broker_id, "/subjects"),
                         15, what=f"broker {broker_id}'s registry to see the subject")
        assert found == ["orders-value"]
        assert json.loads(call(broker_id, f"/schemas/ids/{registered['id']}")["schema"])["name"] == "Order"
    again = call(3, "/subjects/orders-value/versions", {"schema": json.dumps(schema)})
    assert again == registered  # the same schema, the same id, whichever broker is asked
