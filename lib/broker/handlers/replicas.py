"""Replica placement admin: ElectLeaders (43), AlterPartitionReassignments (45),
ListPartitionReassignments (46).

Each partition has one replica, on this broker, which is its leader: an election is never
needed (ELECTION_NOT_NEEDED, as Kafka answers when the preferred replica already leads), a
reassignment can only name this broker (any other id is INVALID_REPLICA_ASSIGNMENT: no such
broker is registered), so none is ever in progress.
"""

from __future__ import annotations

from kio.schema.alter_partition_reassignments.v1.request import AlterPartitionReassignmentsRequest
from kio.schema.elect_leaders.v2.request import ElectLeadersRequest
from kio.schema.errors import ErrorCode
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest

from ..api_keys import ApiKey
from ..context import BrokerContext
from ..wire import Request, make, nested
from ._common import NO_THROTTLE
from .registry import REGISTRY

PREFERRED, UNCLEAN = 0, 1


def _partition_error(broker, topic: str, index: int) -> tuple[ErrorCode, str | None] | None:
    """UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist, else None."""
    try:
        meta = broker.partitions.topic(topic)
    except Exception:
        return ErrorCode.unknown_topic_or_partition, f"topic {topic!r} does not exist"
    if not 0 <= index < meta.partitions:
        return ErrorCode.unknown_topic_or_partition, f"topic {topic!r} has no partition {index}"
    return None


# ====================================================================== ElectLeaders
@REGISTRY.route(ApiKey.ELECT_LEADERS, (0, 2))
async def elect_leaders(broker: BrokerContext, request: Request[ElectLeadersRequest]):
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "replica_election_results")
    part_cls = nested(topic_cls, "partition_result")
    election = getattr(body, "election_type", PREFERRED)
    results = []
    if election not in (PREFERRED, UNCLEAN):
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.invalid_request, replica_election_results=())
    # All partitions (null): Kafka lists only the partitions an election was run for: none here.
    for t in body.topic_partitions or ():
        parts = []
        for index in t.partitions:
            code, message = _partition_error(broker, t.topic, index) or (
                ErrorCode.election_not_needed,
                f"broker {broker.broker_id} is already the leader and only replica of {t.topic}-{index}")
            parts.append(make(part_cls, partition_id=index, error_code=code, error_message=message))
        results.append(make(topic_cls, topic=t.topic, partition_result=tuple(parts)))
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, replica_election_results=tuple(results))


# ======================================================= AlterPartitionReassignments
def _reassignment_error(broker, topic: str, index: int, replicas) -> tuple[ErrorCode, str | None]:
    unknown = _partition_error(broker, topic, index)
    if unknown is not None:
        return unknown
    where = f"{topic}-{index}"
    if replicas is None:  # cancel
        return ErrorCode.no_reassignment_in_progress, f"no reassignment of {where} is in progress"
    if not replicas:
        return ErrorCode.invalid_replica_assignment, f"the assignment of {where} has an empty replica list"
    if len(set(replicas)) != len(replicas):
        return ErrorCode.invalid_replica_assignment, f"the assignment of {where} repeats a replica: {list(replicas)}"
    others = sorted(set(replicas) - {broker.broker_id})
    if others:
        return ErrorCode.invalid_replica_assignment, (
            f"the assignment of {where} names brokers {others}; only broker {broker.broker_id} is registered")
    return ErrorCode.none, None  # the partition's current assignment: nothing to move


@REGISTRY.route(ApiKey.ALTER_PARTITION_REASSIGNMENTS, (0, 1))
async def alter_partition_reassignments(broker: BrokerContext, request: Request[AlterPartitionReassignmentsRequest]):
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "responses")
    part_cls = nested(topic_cls, "partitions")
    responses = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            code, message = _reassignment_error(broker, t.name, p.partition_index, p.replicas)
            parts.append(make(part_cls, partition_index=p.partition_index, error_code=code, error_message=message))
        responses.append(make(topic_cls, name=t.name, partitions=tuple(parts)))
    return make(cls, throttle_time=NO_THROTTLE, allow_replication_factor_change=getattr(
        body, "allow_replication_factor_change", True), error_code=ErrorCode.none, error_message=None,
        responses=tuple(responses))


# ======================================================== ListPartitionReassignments
@REGISTRY.route(ApiKey.LIST_PARTITION_REASSIGNMENTS, (0, 0))
async def list_partition_reassignments(broker: BrokerContext, request: Request[ListPartitionReassignmentsRequest]):
    # Only ongoing reassignments are listed, and there never is one.
    return make(request.response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                topics=())
