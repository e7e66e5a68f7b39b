"""DescribeQuorum (55): the metadata quorum of one.

Kafka answers this for the KRaft partition `__cluster_metadata-0`. Here cluster metadata is the
JSON files in shared storage and this broker is its only writer: a quorum whose one voter is
this broker, the leader at epoch 0, with no observers. There is no Raft log: its high watermark
and the voter's log end offset are those of an empty log, 0 (Kafka's clients and tools,
kafka-metadata-quorum among them, expect a leader's high watermark to be a real, non-negative
offset; -1 means "unknown"). Any other partition is UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers until it runs
more than one Raft partition.
"""

from __future__ import annotations

import uuid

from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest
from kio.schema.errors import ErrorCode

from ..api_keys import ApiKey
from ..context import BrokerContext
from ..wire import Request, make, nested
from .registry import REGISTRY

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
QUORUM_EPOCH = 0
EMPTY_LOG_END_OFFSET = 0  # the high watermark and log end offset of a Raft log with no records
UNKNOWN_OFFSET = -1
LISTENER_NAME = "PLAINTEXT"
_NO_DIRECTORY_ID = uuid.UUID(int=0)


@REGISTRY.route(ApiKey.DESCRIBE_QUORUM, (0, 2))
async def describe_quorum(broker: BrokerContext, request: Request[DescribeQuorumRequest]):
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    replica_cls = nested(part_cls, "current_voters")
    me = broker.broker_id
    now_ms = broker.partitions.clock()
    topics = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            if (t.topic_name, p.partition_index) != (METADATA_TOPIC, METADATA_PARTITION):
                parts.append(make(part_cls, partition_index=p.partition_index,
                                  error_code=ErrorCode.unknown_topic_or_partition,
                                  error_message=f"{t.topic_name}-{p.partition_index} is not a Raft partition here",
                                  leader_id=-1, leader_epoch=-1, high_watermark=UNKNOWN_OFFSET, current_voters=(),
                                  observers=()))
                continue
            voter = make(replica_cls, replica_id=me, replica_directory_id=_NO_DIRECTORY_ID,
                         log_end_offset=EMPTY_LOG_END_OFFSET, last_fetch_timestamp=now_ms, last_caught_up_timestamp=now_ms)
            parts.append(make(part_cls, partition_index=p.partition_index, error_code=ErrorCode.none,
                              error_message=None, leader_id=me, leader_epoch=QUORUM_EPOCH,
                              high_watermark=EMPTY_LOG_END_OFFSET, current_voters=(voter,), observers=()))
        topics.append(make(topic_cls, topic_name=t.topic_name, partitions=tuple(parts)))
    node_cls = nested(cls, "nodes")
    listener_cls = nested(node_cls, "listeners")
    node = make(node_cls, node_id=me, listeners=(make(listener_cls, name=LISTENER_NAME, host=broker.config.public_host,
                                                      port=broker.config.public_port),))
    return make(cls, error_code=ErrorCode.none, error_message=None, topics=tuple(topics), nodes=(node,))
