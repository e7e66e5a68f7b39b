"""DescribeQuorum (55): who decides the cluster's metadata, the same answer from every broker.

Kafka answers this for the KRaft partition `__cluster_metadata-0`: its Raft leader, epoch and
voters. Here the controller role decides the metadata, and the candidates for it are the brokers:

- one broker alone is the controller at epoch 0 and the only voter;
- in cluster mode (ZooKeeper) the leader is the broker ZooKeeper's `/controller` names, at the
  controller epoch it was elected with, and the voters are the live brokers (every broker stands
  for the controller role; `ClusterNode.controller`). No broker holds the role for a moment after
  a controller's session ends: NOT_LEADER_OR_FOLLOWER then, which Kafka's tools retry.

There is no Raft log (the metadata lives in ZooKeeper and the storage root): its high watermark
and every voter's log end offset are those of an empty log, 0 (Kafka's clients and tools,
kafka-metadata-quorum among them, expect a leader's high watermark to be a real, non-negative
offset; -1 means "unknown"), so no voter lags, and each live voter's fetch and caught-up times are
now (its ZooKeeper session is alive). There are no observers. The ZooKeeper ensemble that keeps
the registries is described by `bin/zookeeper status` and its four-letter words. Any other
partition is UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers until it runs more than one Raft partition.
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
EMPTY_LOG_END_OFFSET = 0  # the high watermark and log end offset of a Raft log with no records
UNKNOWN_OFFSET = -1
NO_LEADER = -1
_NO_DIRECTORY_ID = uuid.UUID(int=0)


@REGISTRY.route(ApiKey.DESCRIBE_QUORUM, (0, 2))
async def describe_quorum(broker: BrokerContext, request: Request[DescribeQuorumRequest]):
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    replica_cls = nested(part_cls, "current_voters")
    leadership = broker.leadership
    controller = leadership.controller()
    voters = leadership.brokers(request.session.listener)  # the live brokers: each stands for controller
    now_ms = broker.partitions.clock()

    def unanswered(index: int, code: ErrorCode, message: str):
        return make(part_cls, partition_index=index, error_code=code, error_message=message, leader_id=NO_LEADER,
                    leader_epoch=-1, high_watermark=UNKNOWN_OFFSET, current_voters=(), observers=())

    topics = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            if (t.topic_name, p.partition_index) != (METADATA_TOPIC, METADATA_PARTITION):
                parts.append(unanswered(p.partition_index, ErrorCode.unknown_topic_or_partition,
                                        f"{t.topic_name}-{p.partition_index} is not a Raft partition here"))
            elif controller is None:
                parts.append(unanswered(p.partition_index, ErrorCode.not_leader_or_follower,
                                        "no broker holds the controller role right now (an election follows "
                                        "the end of the last controller's ZooKeeper session)"))
            else:
                current = tuple(make(replica_cls, replica_id=v.broker_id, replica_directory_id=_NO_DIRECTORY_ID,
                                     log_end_offset=EMPTY_LOG_END_OFFSET, last_fetch_timestamp=now_ms,
                                     last_caught_up_timestamp=now_ms) for v in voters)
                parts.append(make(part_cls, partition_index=p.partition_index, error_code=ErrorCode.none,
                                  error_message=None, leader_id=controller.broker_id, leader_epoch=controller.epoch,
                                  high_watermark=EMPTY_LOG_END_OFFSET, current_voters=current, observers=()))
        topics.append(make(topic_cls, topic_name=t.topic_name, partitions=tuple(parts)))
    node_cls = nested(cls, "nodes")
    listener_cls = nested(node_cls, "listeners")
    nodes = tuple(make(node_cls, node_id=v.broker_id, listeners=(
        make(listener_cls, name=request.session.listener, host=v.host, port=v.port),)) for v in voters)
    return make(cls, error_code=ErrorCode.none, error_message=None, topics=tuple(topics), nodes=nodes)
