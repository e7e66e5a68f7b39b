"""Share groups (KIP-932) with real clients against a real broker process: confluent-kafka's
ShareConsumer for delivery, acknowledgements, acquisition locks and the delivery limit, two
members sharing one partition, and the share-partition state across a kill -9; the share-group
admin APIs no client exposes yet (ShareGroupDescribe, the share-group offset APIs, ListGroups by
type) as raw requests, DeleteGroups and the GROUP configs through confluent-kafka's AdminClient."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                  ResourceType)
from kio.schema.alter_share_group_offsets.v0 import request as alter_req
from kio.schema.delete_share_group_offsets.v0 import request as delete_req
from kio.schema.describe_share_group_offsets.v1 import request as describe_offsets_req
from kio.schema.errors import ErrorCode
from kio.schema.list_groups.v5 import request as list_req
from kio.schema.share_group_describe.v1 import request as describe_req
from typer.testing import CliRunner

from tests.support.broker_process import BrokerProcess
from topiclake.client.conn import BrokerConnection
from tests.support.topics import create_topic

pytestmark = pytest.mark.slow

LOCK_MS = 1000
SETTINGS = f"""
[groups]
offsets_topic_partitions = 3
initial_rebalance_delay_ms = 0
[share]
record_lock_duration_ms = {LOCK_MS}
min_record_lock_duration_ms = {LOCK_MS}
state_topic_partitions = 3
"""


@pytest.fixture(scope="module")
def share_groups_broker(tmp_path_factory):
    config = tmp_path_factory.mktemp("conf") / "topiclake.toml"
    config.write_text(SETTINGS)
    proc = BrokerProcess(tmp_path_factory.mktemp("share") / "data", config=config).start()
    yield proc
    assert proc.stop() == 0, proc.log()


def group_config(bootstrap: str, group: str, **values) -> None:
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(name.replace("_", "."), str(v), incremental_operation=AlterConfigOpType.SET)
        for name, v in values.items()])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the futures resolve
    for future in admin.incremental_alter_configs([res]).values():
        future.result(10)


def new_group(bootstrap: str, **values) -> str:
    group = f"sg-{uuid.uuid4().hex[:10]}"
    group_config(bootstrap, group, share_auto_offset_reset="earliest", **values)
    return group


def produce(bootstrap: str, topic: str, count: int, *, one_per_batch: bool = False) -> list[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    values = [f"v{i}".encode() for i in range(count)]
    for v in values:
        producer.produce(topic, v)
        if one_per_batch:
            producer.flush(10)
    assert producer.flush(10) == 0
    return values


def consumer(bootstrap: str, group: str, topic: str, explicit: bool = True, **conf) -> ShareConsumer:
    sc = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                        "share.acknowledgement.mode": "explicit" if explicit else "implicit", **conf})
    sc.subscribe([topic])
    return sc


def poll(sc: ShareConsumer, timeout: float = 10.0) -> list:
    """The first non-empty batch within `timeout` (nothing acknowledged)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = [m for m in sc.poll(timeout=0.3) if m.error() is None]
        if batch:
            return batch
    return []


def request(bootstrap: str, body):
    with BrokerConnection(bootstrap) as client:
        return client.request(body)


def describe_offsets(bootstrap: str, group: str, topic: str | None = None):
    topics = None if topic is None else (describe_offsets_req.DescribeShareGroupOffsetsRequestTopic(
        topic_name=topic, partitions=(0,)),)
    response = request(bootstrap, describe_offsets_req.DescribeShareGroupOffsetsRequest(groups=(
        describe_offsets_req.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=topics),)))
    return response.groups[0]


def groups_cli(*args: str):
    from topiclake.cli import app

    return CliRunner().invoke(app, ["groups", *args])


def start_offset(bootstrap: str, group: str, topic: str) -> int:
    return describe_offsets(bootstrap, group, topic).topics[0].partitions[0].start_offset


def test_two_members_share_one_partition_and_get_every_record_once(share_groups_broker):
    topic, group = create_topic(share_groups_broker.bootstrap), new_group(share_groups_broker.bootstrap)
    # At most 4 records per fetch (the batches hold one each), so both members get a turn.
    a, b = (consumer(share_groups_broker.bootstrap, group, topic, **{"max.poll.records": 4}) for _ in range(2))
    try:
        for _ in range(6):  # both join (a share group gives them the same partition)
            a.poll(timeout=0.2)
            b.poll(timeout=0.2)
        values = produce(share_groups_broker.bootstrap, topic, 40, one_per_batch=True)
        got: dict[str, list] = {"a": [], "b": []}
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < len(values) and time.monotonic() < deadline:
            for name, sc in (("a", a), ("b", b)):
                for m in sc.poll(timeout=0.2):
                    if m.error() is None:
                        sc.acknowledge(m, AcknowledgeType.ACCEPT)
                        got[name].append(m.offset())
        offsets = got["a"] + got["b"]
        assert sorted(offsets) == list(range(len(values))), "every record exactly once"
        assert got["a"] and got["b"], "both members consumed from the shared partition"
        described = request(share_groups_broker.bootstrap, describe_req.ShareGroupDescribeRequest(
            group_ids=(group,), include_authorized_operations=False)).groups[0]
        assert (described.error_code, described.group_state, described.assignor_name) == (
            ErrorCode.none, "Stable", "simple")
        assert [m.assignment.topic_partitions[0].partitions for m in described.members] == [(0,), (0,)]
        a.commit_sync(10)  # the last acknowledgements (sent with the next fetch otherwise)
        b.commit_sync(10)
        assert start_offset(share_groups_broker.bootstrap, group, topic) == len(values)
    finally:
        a.close()
        b.close()


def test_unacknowledged_records_come_back_after_the_lock_with_their_delivery_count(share_groups_broker):
    topic, group = create_topic(share_groups_broker.bootstrap), new_group(share_groups_broker.bootstrap)
    produce(share_groups_broker.bootstrap, topic, 5)
    silent, other = consumer(share_groups_broker.bootstrap, group, topic), consumer(share_groups_broker.bootstrap, group, topic)
    try:
        held = poll(silent)
        assert [m.delivery_count() for m in held] == [1] * len(held) and held
        first_seen = time.monotonic()
        again = poll(other, timeout=10)
        assert time.monotonic() - first_seen >= LOCK_MS / 1000 * 0.8, "redelivered before the lock expired"
        assert {m.offset() for m in again} == {m.offset() for m in held}
        assert {m.delivery_count() for m in again} == {2}
        for m in again:
            other.acknowledge(m, AcknowledgeType.ACCEPT)
        other.commit_sync(10)
        assert start_offset(share_groups_broker.bootstrap, group, topic) == 5
    finally:
        silent.close()
        other.close()


def test_reject_archives_release_redelivers_and_the_delivery_limit_archives(share_groups_broker):
    topic, group = create_topic(share_groups_broker.bootstrap), new_group(share_groups_broker.bootstrap, share_delivery_count_limit=2)
    produce(share_groups_broker.bootstrap, topic, 2)
    sc = consumer(share_groups_broker.bootstrap, group, topic)
    try:
        first = poll(sc)
        assert [m.offset() for m in first] == [0, 1]
        sc.acknowledge(first[0], AcknowledgeType.REJECT)
        sc.acknowledge(first[1], AcknowledgeType.RELEASE)
        second = poll(sc)
        assert [(m.offset(), m.delivery_count()) for m in second] == [(1, 2)]
        sc.acknowledge(second[0], AcknowledgeType.RELEASE)  # the second delivery: the limit archives it
        sc.commit_sync(10)
        assert poll(sc, timeout=2 * LOCK_MS / 1000) == []
        assert start_offset(share_groups_broker.bootstrap, group, topic) == 2
    finally:
        sc.close()


def test_share_group_admin_apis(share_groups_broker):
    topic, group = create_topic(share_groups_broker.bootstrap), new_group(share_groups_broker.bootstrap)
    produce(share_groups_broker.bootstrap, topic, 10)
    sc = consumer(share_groups_broker.bootstrap, group, topic, explicit=False)
    try:
        assert len(poll(sc)) == 10
        sc.commit_sync(10)
        listed = request(share_groups_broker.bootstrap, list_req.ListGroupsRequest(states_filter=(), types_filter=("share",)))
        assert (group, "share", "Stable") in {(g.group_id, g.group_type, g.group_state) for g in listed.groups}
        described = groups_cli("describe", group, "--bootstrap", share_groups_broker.bootstrap)
        assert described.exit_code == 0 and "Type: share\tState: Stable" in described.output
        assert f"Assignment: {topic}-0" in described.output
        lag = groups_cli("lag", group, "--bootstrap", share_groups_broker.bootstrap)
        assert lag.exit_code == 0, lag.output
        assert lag.output.splitlines()[1].split()[:5] == [topic, "0", "10", "10", "0"]
        alter = alter_req.AlterShareGroupOffsetsRequest(group_id=group, topics=(
            alter_req.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=(
                alter_req.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=4),)),))
        assert request(share_groups_broker.bootstrap, alter).error_code == ErrorCode.non_empty_group
    finally:
        sc.close()  # leaves the group
    described = describe_offsets(share_groups_broker.bootstrap, group)
    assert [(t.topic_name, [(p.partition_index, p.start_offset, p.lag) for p in t.partitions])
            for t in described.topics] == [(topic, [(0, 10, 0)])]
    altered = request(share_groups_broker.bootstrap, alter)
    assert altered.error_code == ErrorCode.none and altered.responses[0].partitions[0].error_code == ErrorCode.none
    assert start_offset(share_groups_broker.bootstrap, group, topic) == 4
    sc = consumer(share_groups_broker.bootstrap, group, topic, explicit=False)
    try:
        assert [m.offset() for m in poll(sc)] == list(range(4, 10))  # delivered again from the altered offset
    finally:
        sc.close()
    deleted = request(share_groups_broker.bootstrap, delete_req.DeleteShareGroupOffsetsRequest(group_id=group, topics=(
        delete_req.DeleteShareGroupOffsetsRequestTopic(topic_name=topic),)))
    assert deleted.error_code == ErrorCode.none and deleted.responses[0].error_code == ErrorCode.none
    assert start_offset(share_groups_broker.bootstrap, group, topic) == -1
    admin = AdminClient({"bootstrap.servers": share_groups_broker.bootstrap})
    configs = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)])
    [entries] = [f.result(10) for f in configs.values()]
    assert (entries["share.auto.offset.reset"].value, entries["share.auto.offset.reset"].source) == (
        "earliest", ConfigSource.GROUP_CONFIG.value)
    assert entries["share.record.lock.duration.ms"].value == str(LOCK_MS)
    described_broker = admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")])
    [broker_configs] = [f.result(10) for f in described_broker.values()]
    lock = broker_configs["group.share.record.lock.duration.ms"]
    assert (lock.value, lock.source) == (str(LOCK_MS), ConfigSource.STATIC_BROKER_CONFIG.value)
    for future in admin.delete_consumer_groups([group]).values():
        future.result(10)
    gone = request(share_groups_broker.bootstrap, describe_req.ShareGroupDescribeRequest(group_ids=(group,),
                                                                           include_authorized_operations=False))
    assert gone.groups[0].error_code == ErrorCode.group_id_not_found


def test_acknowledged_records_stay_done_across_a_kill_9(share_groups_broker):
    topic, group = create_topic(share_groups_broker.bootstrap), new_group(share_groups_broker.bootstrap)
    produce(share_groups_broker.bootstrap, topic, 20)
    sc = consumer(share_groups_broker.bootstrap, group, topic)
    batch = poll(sc)
    assert [m.offset() for m in batch] == list(range(20))
    for m in batch[:12]:
        sc.acknowledge(m, AcknowledgeType.ACCEPT)
    results = sc.commit_sync(10)
    assert all(err is None for err in results.values()), results
    share_groups_broker.kill()  # offsets 12-19 are still acquired by the consumer
    sc.close()
    share_groups_broker.start()
    again = consumer(share_groups_broker.bootstrap, group, topic)
    try:
        redelivered = poll(again, timeout=20)
        assert [m.offset() for m in redelivered] == list(range(12, 20)), "in-flight records come back, acked ones not"
        for m in redelivered:
            again.acknowledge(m, AcknowledgeType.ACCEPT)
        again.commit_sync(10)
        assert start_offset(share_groups_broker.bootstrap, group, topic) == 20
        assert poll(again, timeout=2 * LOCK_MS / 1000) == []
    finally:
        again.close()
    described = request(share_groups_broker.bootstrap, describe_req.ShareGroupDescribeRequest(
        group_ids=(group,), include_authorized_operations=False)).groups[0]
    assert described.error_code == ErrorCode.none and described.group_epoch >= 2  # membership replayed


HOLDER = """
import sys, time
from confluent_kafka import ShareConsumer
bootstrap, group, topic = sys.argv[1:4]
sc = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
sc.subscribe([topic])
while True:
    held = [m for m in sc.poll(timeout=0.3) if m.error() is None]
    if held:
        print("HELD", len(held), flush=True)
        time.sleep(3600)  # killed here: its connection drops with the records acquired
"""


def test_a_dropped_connection_gives_its_records_back_at_once(share_groups_broker, tmp_path):
    """A member's records are released when its connection drops (as Kafka does), not when their
    30 s acquisition locks run out."""
    topic = create_topic(share_groups_broker.bootstrap)
    group = new_group(share_groups_broker.bootstrap, share_record_lock_duration_ms=30_000)
    produce(share_groups_broker.bootstrap, topic, 5)
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    holder = subprocess.Popen([sys.executable, str(script), share_groups_broker.bootstrap, group, topic], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().startswith("HELD "), "the holder never got records"
    finally:
        holder.kill()
        holder.wait()
    dropped = time.monotonic()
    other = consumer(share_groups_broker.bootstrap, group, topic)
    try:
        again = poll(other, timeout=20)
        assert again and time.monotonic() - dropped < 15, "the records waited for their locks"
        assert {m.delivery_count() for m in again} == {2}
    finally:
        other.close()
