"""KIP-848 online migration with real clients (confluent-kafka / librdkafka, kafka-python):
classic members (group.protocol=classic) and consumer-protocol members (group.protocol=consumer)
in one group, the group converted both ways, committed offsets kept, no record read again once
its offset was committed, the group's type as an admin client describes it, and the converted
group rebuilt from `__consumer_offsets` after a broker SIGKILL."""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from tests.support.broker_process import BrokerProcess
from tests.support.topics import create_topic
from tests.support.clients import produce
from tests.support.waits import wait_for
from tests.integration.group_members import PARTITIONS, Group, group_type

pytestmark = pytest.mark.slow


def committed_offsets(bootstrap: str, group_id: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group_id)
    result = admin.list_consumer_group_offsets([request])[group_id].result(30)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


@contextmanager
def running_group(tmp_path, config_file, first: str):
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
    assert wait_for(lambda: group_type(bootstrap, group.group_id) == "CLASSIC", 20, what="a classic group",
                    interval=0.1)
    produce(bootstrap, group.topic, PARTITIONS, more, start=read)
    group.read_up_to(read + more)
    wait_for(lambda: committed_offsets(bootstrap, group.group_id) == {p: read + more for p in range(PARTITIONS)},
             20, what="every offset committed", interval=0.1)
    assert group.read == {p: set(range(read + more)) for p in range(PARTITIONS)}
    assert group.read_again_after_commit == []


def test_classic_group_upgrades_survives_a_crash_and_downgrades(tmp_path, config_file):
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


def test_classic_member_joins_a_consumer_group_and_inherits_it(tmp_path, config_file):
    with running_group(tmp_path, config_file, "consumer") as run:
        group = run.group
        group.add("classic", "classic")  # JoinGroup/SyncGroup answered by the consumer group
        group.settle([2, 2], "a classic member inside the consumer group")
        assert group_type(run.proc.bootstrap, group.group_id) == "CONSUMER"
        produce(run.proc.bootstrap, group.topic, PARTITIONS, 10, start=10)
        group.read_up_to(20)
        the_consumer_member_leaves(run, 20, 5)


def test_a_kafka_python_member_inside_a_consumer_group(tmp_path, config_file):
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
            wait_for(split([2, 2]), 60, what="kafka-python and confluent-kafka sharing the group", interval=0)
            assert group_type(run.proc.bootstrap, run.group.group_id) == "CONSUMER"
            run.group.close("consumer")
            wait_for(split([4]), 60, what="kafka-python alone with every partition", interval=0)
            assert wait_for(lambda: group_type(run.proc.bootstrap, run.group.group_id) == "CLASSIC", 20, what="classic",
                            interval=0.1)
        finally:
            member.close()
