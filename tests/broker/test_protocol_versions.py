"""The newest versions Kafka 4.2 serves, where they mean something: topics by id (Produce v13,
OffsetCommit/OffsetFetch v10), Metadata v13's error code, ListOffsets v11, DescribeCluster v2,
DescribeGroups v6; and what a client infers from ApiVersions."""

from __future__ import annotations

import datetime
import uuid

from kafka import KafkaAdminClient
from kio.schema.describe_cluster.v2 import request as cluster_req
from kio.schema.describe_groups.v6 import request as groups_req
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v9 import request as join_req
from kio.schema.list_offsets.v11 import request as offsets_req
from kio.schema.metadata.v13 import request as metadata_req
from kio.schema.offset_commit.v10 import request as commit_req
from kio.schema.offset_fetch.v10 import request as fetch_req
from kio.schema.produce.v13 import request as produce_req

from topiclake.broker.partitions import topic_uuid

from tests.support.group_wire import loaded_partition
from tests.support.wire import batch, fetch, values_of

UNKNOWN_ID = uuid.UUID(int=12345)


def topic_id(broker, name: str) -> uuid.UUID:
    return topic_uuid(broker.context.partitions.topic(name))


def test_produce_v13_names_topics_by_id(broker):
    broker.create_topic("by-id")
    tid = topic_id(broker, "by-id")
    with broker.client() as c:
        response = c.request(produce_req.ProduceRequest(
            transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5), topic_data=(
                produce_req.TopicProduceData(topic_id=tid, partition_data=(
                    produce_req.PartitionProduceData(index=0, records=batch([b"a", b"b"])),)),
                produce_req.TopicProduceData(topic_id=UNKNOWN_ID, partition_data=(
                    produce_req.PartitionProduceData(index=0, records=batch([b"c"])),)))))
        known, unknown = response.responses
        assert (known.topic_id, known.partition_responses[0].error_code, known.partition_responses[0].base_offset) \
            == (tid, ErrorCode.none, 0)
        assert (unknown.topic_id, unknown.partition_responses[0].error_code) == (UNKNOWN_ID, ErrorCode.unknown_topic_id)
        assert values_of(fetch(c, "by-id", 0).records) == [(0, b"a"), (1, b"b")]


def test_offset_commit_and_fetch_v10_by_topic_id(broker):
    broker.create_topic("tracked", 2)
    tid = topic_id(broker, "tracked")
    loaded_partition(broker, "ids")
    with broker.client() as c:
        committed = c.request(commit_req.OffsetCommitRequest(
            group_id="ids", generation_id_or_member_epoch=-1, member_id="", topics=(
                commit_req.OffsetCommitRequestTopic(topic_id=tid, partitions=(
                    commit_req.OffsetCommitRequestPartition(partition_index=1, committed_offset=42,
                                                            committed_metadata="m"),)),
                commit_req.OffsetCommitRequestTopic(topic_id=UNKNOWN_ID, partitions=(
                    commit_req.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                            committed_metadata=None),)))))
        assert [(t.topic_id, [p.error_code for p in t.partitions]) for t in committed.topics] == [
            (tid, [ErrorCode.none]), (UNKNOWN_ID, [ErrorCode.unknown_topic_id])]

        def fetched(topics):
            group = fetch_req.OffsetFetchRequestGroup(group_id="ids", topics=topics)
            [answer] = c.request(fetch_req.OffsetFetchRequest(groups=(group,))).groups
            return answer.error_code, [(t.topic_id, [(p.partition_index, p.committed_offset, p.error_code)
                                                      for p in t.partitions]) for t in answer.topics]

        assert fetched(None) == (ErrorCode.none, [(tid, [(1, 42, ErrorCode.none)])])
        assert fetched((fetch_req.OffsetFetchRequestTopics(topic_id=tid, partition_indexes=(0, 1)),
                        fetch_req.OffsetFetchRequestTopics(topic_id=UNKNOWN_ID, partition_indexes=(0,)))) == (
            ErrorCode.none, [(tid, [(0, -1, ErrorCode.none), (1, 42, ErrorCode.none)]),
                             (UNKNOWN_ID, [(0, -1, ErrorCode.unknown_topic_id)])])


def test_metadata_v13_list_offsets_v11_cluster_v2_groups_v6(broker):
    broker.create_topic("newest")
    loaded_partition(broker, "nobody")
    with broker.client() as c:
        meta = c.request(metadata_req.MetadataRequest(topics=None, include_topic_authorized_operations=False))
        assert meta.error_code == ErrorCode.none and "newest" in [t.name for t in meta.topics]

        def offset(timestamp):
            topic = offsets_req.ListOffsetsTopic(name="newest", partitions=(
                offsets_req.ListOffsetsPartition(partition_index=0, timestamp=timestamp),))
            [answer] = c.request(offsets_req.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(topic,),
                                                                timeout=datetime.timedelta(seconds=5))).topics
            return answer.partitions[0].error_code, answer.partitions[0].offset

        assert offset(-1) == (ErrorCode.none, 0)
        assert offset(-6) == (ErrorCode.none, -1), "no tiered storage: nothing is pending upload"

        cluster = c.request(cluster_req.DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                               include_fenced_brokers=True))
        assert [(b.broker_id, b.is_fenced) for b in cluster.brokers] == [(0, False)]

        [group] = c.request(groups_req.DescribeGroupsRequest(groups=("nobody",),
                                                             include_authorized_operations=False)).groups
        assert (group.error_code, group.error_message) == (ErrorCode.group_id_not_found, "Group nobody not found.")


def test_kafka_python_infers_kafka_4_2(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert admin._manager.broker_version_data.broker_version == (4, 2)
    finally:
        admin.close()


def test_group_members_carry_their_host(broker):
    broker.create_topic("hosted")
    loaded_partition(broker, "hosts")
    with broker.client() as c:
        joined = c.request(join_req.JoinGroupRequest(
            group_id="hosts", session_timeout=datetime.timedelta(seconds=10),
            rebalance_timeout=datetime.timedelta(seconds=10), member_id="", group_instance_id=None,
            protocol_type="consumer", protocols=(join_req.JoinGroupRequestProtocol(name="range", metadata=b""),),
            reason=None))
        if joined.error_code == ErrorCode.member_id_required:  # KIP-394: join again with the id given
            joined = c.request(join_req.JoinGroupRequest(
                group_id="hosts", session_timeout=datetime.timedelta(seconds=10),
                rebalance_timeout=datetime.timedelta(seconds=10), member_id=joined.member_id, group_instance_id=None,
                protocol_type="consumer", protocols=(join_req.JoinGroupRequestProtocol(name="range", metadata=b""),),
                reason=None))
        assert joined.error_code == ErrorCode.none
        [group] = c.request(groups_req.DescribeGroupsRequest(groups=("hosts",),
                                                             include_authorized_operations=False)).groups
    assert [(m.member_id, m.client_host) for m in group.members] == [(joined.member_id, "/127.0.0.1")]
