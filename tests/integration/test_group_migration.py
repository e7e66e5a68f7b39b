"""KIP-848 online migration with real clients (confluent-kafka / librdkafka, kafka-python):
classic members (group.protocol=classic) and consumer-protocol members (group.protocol=consumer)
in one group, the group converted both ways, committed offsets kept, no record read again once
its offset was committed, the group's type as an admin client describes it, and the converted
group rebuilt from `__consumer_offsets` after a broker SIGKILL."""

from __future__ import annotations

import time
import uuid
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from tests.support.broker_process import BrokerProcess
from tests.integration.test_groups_clients import config_file, create_topic, produce, wait_for  # noqa: F401

pytestmark = pytest.mark.slow

PARTITIONS = 4


class Group:
    """The members of one group, consumed together: every record read, every offset committed
    (synchronously, one record at a time), and any record read again after its commit."""

    def __init__(self, bootstrap: str, topic: str):
        self.bootstrap, self.topic = bootstrap, topic
        self.group_id = f"migrate-{uuid.uuid4().hex[:8]}"
        self.members: dict[str, Consumer] = {}
        self.read: dict[int, set[int]] = {}
        self.committed: set[tuple[int, int]] = set()
        self.read_again_after_commit: list[tuple[str, int, int]] = []

    def add(self, name: str, protocol: str) -> None:
        conf = {"bootstrap.servers": self.bootstrap, "group.id": self.group_id, "group.protocol": protocol,
                "auto.offset.reset": "earliest", "enable.auto.commit": False,
                "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 300}
        if protocol == "classic":
            conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                         "partition.assignment.strategy": "range"})
        consumer = self.members[name] = Consumer(conf)
        consumer.subscribe([self.topic])

    def close(self, name: str) -> None:
        self.members.pop(name).close()

    def pump(self, seconds: float = 0.5) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for name, consumer in self.members.items():
                msg = consumer.poll(0.02)
                if msg is None or msg.error() is not None:
                    continue
                where = (msg.partition(), msg.offset())
                if where in self.committed:
                    self.read_again_after_commit.append((name, *where))
                self.read.setdefault(msg.partition(), set()).add(msg.offset())
                try:
                    consumer.commit(message=msg, asynchronous=False)
                    self.committed.add(where)
                except KafkaException:
                    pass  # a rebalance got in between: the next owner reads it again (allowed)

    def assignments(self) -> dict[str, set[int]]:
        return {name: {tp.partition for tp in c.assignment()} for name, c in self.members.items()}

    def settle(self, counts: list[int], what: str, timeout: float = 60) -> None:
        """Consume until the members' assignment sizes are `counts` and cover every partition once."""
        def settled():
            self.pump(0.3)
            owned = list(self.assignments().values())
            return (sorted(len(a) for a in owned) == sorted(counts) and set().union(*owned) == set(range(PARTITIONS))
                    and sum(map(len, owned)) == PARTITIONS)
        wait_for(settled, timeout, what, interval=0, detail=lambda: f"assignments {self.assignments()}")

    def read_up_to(self, per_partition: int, timeout: float = 60) -> None:
        wait_for(lambda: self.pump(0.3) or all(self.read.get(p, set()) >= set(range(per_partition))
                                               for p in range(PARTITIONS)),
                 timeout, f"{per_partition} records per partition", interval=0,
                 detail=lambda: f"read {({p: len(o) for p, o in self.read.items()})}, {self.assignments()}")

    def close_all(self) -> None:
        for name in list(self.members):
            self.close(name)


def group_type(bootstrap: str, group_id: str) -> str:
    """CLASSIC or CONSUMER, as the admin client describes the group (waiting while it loads)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def described():
        try:
            return admin.describe_consumer_groups([group_id])[group_id].result(30).type.name
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.COORDINATOR_LOAD_IN_PROGRESS:
                raise
            return None
    return wait_for(described, 20, f"group {group_id} loaded")


def committed_offsets(bootstrap: str, group_id: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group_id)
    result = admin.list_consumer_group_offsets([request])[group_id].result(30)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


@contextmanager
def running_group(tmp_path, config_file, first: str):  # noqa: F811
    """A broker, a topic of 10 records per partition, and a group whose first member (of protocol
    `first`) holds every partition and has read them all."""
    run = SimpleNamespace(proc=BrokerProcess(tmp_path / "data", config=config_file).start(), group=None)
    try:
        topic = create_topic(run.proc.bootstrap, PARTITIONS)
        run.group = Group(run.proc.bootstrap, topic)
        produce(run.proc.bootstrap, topic, PARTITIONS, 10)
        run.group.add(first, first)
        run.group.settle([4], f"the {first} member's assignment")
        run.group.read_up_to(10)
        yield run
    finally:
        if run.group is not None:
            run.group.close_all()
        run.proc.kill()


def the_consumer_member_leaves(run, read: int, more: int) -> None:
    """The last consumer-protocol member leaves: the classic member alone, in a classic group
    again, reads `more` new records per partition and commits all; nothing was read twice."""
    group, bootstrap = run.group, run.proc.bootstrap
    group.close("consumer")
    group.settle([4], "the classic member alone again")
    assert wait_for(lambda: group_type(bootstrap, group.group_id) == "CLASSIC", 20, "a classic group")
    produce(bootstrap, group.topic, PARTITIONS, more, start=read)
    group.read_up_to(read + more)
    wait_for(lambda: committed_offsets(bootstrap, group.group_id) == {p: read + more for p in range(PARTITIONS)},
             20, "every offset committed")
    assert group.read == {p: set(range(read + more)) for p in range(PARTITIONS)}
    assert group.read_again_after_commit == []


def test_classic_group_upgrades_survives_a_crash_and_downgrades(tmp_path, config_file):  # noqa: F811
    with running_group(tmp_path, config_file, "classic") as run:
        group = run.group
        assert group_type(run.proc.bootstrap, group.group_id) == "CLASSIC"
        group.add("consumer", "consumer")  # a ConsumerGroupHeartbeat joins: the group converts
        group.settle([2, 2], "two members of the converted group")
        assert group_type(run.proc.bootstrap, group.group_id) == "CONSUMER"
        produce(run.proc.bootstrap, group.topic, PARTITIONS, 10, start=10)
        group.read_up_to(20)

        run.proc.kill()  # the converted group and its offsets come back from __consumer_offsets
        group.pump(0.5)
        run.proc = BrokerProcess(tmp_path / "data", run.proc.port, config=config_file).start()
        assert group_type(run.proc.bootstrap, group.group_id) == "CONSUMER"
        produce(run.proc.bootstrap, group.topic, PARTITIONS, 10, start=20)
        group.read_up_to(30)
        group.settle([2, 2], "both members after the restart")
        the_consumer_member_leaves(run, 30, 10)


def test_classic_member_joins_a_consumer_group_and_inherits_it(tmp_path, config_file):  # noqa: F811
    with running_group(tmp_path, config_file, "consumer") as run:
        group = run.group
        group.add("classic", "classic")  # JoinGroup/SyncGroup answered by the consumer group
        group.settle([2, 2], "a classic member inside the consumer group")
        assert group_type(run.proc.bootstrap, group.group_id) == "CONSUMER"
        produce(run.proc.bootstrap, group.topic, PARTITIONS, 10, start=10)
        group.read_up_to(20)
        the_consumer_member_leaves(run, 20, 5)


def test_a_kafka_python_member_inside_a_consumer_group(tmp_path, config_file):  # noqa: F811
    """kafka-python (classic protocol only) beside a consumer-protocol member, then alone."""
    from kafka import KafkaConsumer

    with running_group(tmp_path, config_file, "consumer") as run:
        member = KafkaConsumer(run.group.topic, bootstrap_servers=run.proc.bootstrap, group_id=run.group.group_id,
                               auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6000,
                               heartbeat_interval_ms=300)
        try:
            def split(counts):
                def settled():
                    run.group.pump(0.1)
                    member.poll(timeout_ms=100)
                    owned = [{tp.partition for tp in member.assignment()}, *run.group.assignments().values()]
                    return sorted(map(len, owned)) == counts and set().union(*owned) == set(range(PARTITIONS))
                return settled
            wait_for(split([2, 2]), 60, "kafka-python and confluent-kafka sharing the group", interval=0)
            assert group_type(run.proc.bootstrap, run.group.group_id) == "CONSUMER"
            run.group.close("consumer")
            wait_for(split([4]), 60, "kafka-python alone with every partition", interval=0)
            assert wait_for(lambda: group_type(run.proc.bootstrap, run.group.group_id) == "CLASSIC", 20, "classic")
        finally:
            member.close()
