"""Replica placement admin: ElectLeaders (43), AlterPartitionReassignments (45),
ListPartitionReassignments (46).

The storage is shared, so a replica holds no copy: a partition's replicas are the brokers that
should lead it, preferred first. One broker alone is every partition's only replica and leader:
an election is never needed (ELECTION_NOT_NEEDED, as Kafka answers when the preferred replica
already leads), and a reassignment can only name this broker (any other id is
INVALID_REPLICA_ASSIGNMENT: no such broker is live). In cluster mode a preferred election moves a
partition to its preferred broker, and a reassignment to live brokers makes them its replicas and
the first its preferred broker and leader at once (there is no replica to catch up), so no
reassignment is ever in progress.
"""

from __future__ import annotations

from kio.schema.alter_partition_reassignments.v1.request import AlterPartitionReassignmentsRequest
from kio.schema.elect_leaders.v2.request import ElectLeadersRequest
from kio.schema.errors import ErrorCode
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest

from ..api_keys import ApiKey
from ..context import BrokerContext
from ..leadership import NO_LEADER
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
_ELECTION_CODES = {"elected": ErrorCode.none, "not needed": ErrorCode.election_not_needed,
                   "not available": ErrorCode.preferred_leader_not_available,
                   "unknown": ErrorCode.unknown_topic_or_partition}


async def _elect(broker, election: int, topic: str, index: int) -> tuple[ErrorCode, str | None]:
    unknown = _partition_error(broker, topic, index)
    if unknown is not None:
        return unknown
    where = f"{topic}-{index}"
    leadership = broker.leadership
    if not leadership.clustered:
        return ErrorCode.election_not_needed, \
            f"broker {broker.broker_id} is already the leader and only replica of {where}"
    if election == UNCLEAN:
        # Every broker reads the same storage, so every live broker is a clean choice, and the
        # controller already gives a leaderless partition the first live one.
        current = leadership.leader(topic, index)
        if current is not None and current.leader != NO_LEADER:
            return ErrorCode.election_not_needed, f"{where} has a live leader"
        return ErrorCode.eligible_leaders_not_available, f"{where}: no live broker to lead it yet"
    outcome = await leadership.elect_preferred(topic, index)
    messages = {"elected": None, "not needed": f"the preferred broker leads {where} already",
                "not available": f"the preferred broker of {where} is not live (or its leader changed meanwhile)",
                "unknown": f"{where} has no leader state yet"}
    return _ELECTION_CODES[outcome], messages[outcome]


@REGISTRY.route(ApiKey.ELECT_LEADERS, (0, 2))
async def elect_leaders(broker: BrokerContext, request: Request[ElectLeadersRequest]):
    """One broker alone: it leads every partition, so no election is needed. In cluster mode a
    PREFERRED election moves each partition to the first broker of its preferred order
    (ClusterNode.elect_preferred); null partitions mean every partition not led by its preferred
    broker, and only those are listed, as Kafka lists the partitions an election ran for."""
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "replica_election_results")
    part_cls = nested(topic_cls, "partition_result")
    election = getattr(body, "election_type", PREFERRED)
    if election not in (PREFERRED, UNCLEAN):
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.invalid_request, replica_election_results=())
    if body.topic_partitions is None:
        wanted: dict[str, list[int]] = {}
        for topic, index in broker.leadership.not_preferred() if election == PREFERRED else ():
            wanted.setdefault(topic, []).append(index)
    else:
        wanted = {}
        for t in body.topic_partitions:
            wanted.setdefault(t.topic, []).extend(t.partitions)
    results = []
    for topic, indexes in wanted.items():
        parts = []
        for index in indexes:
            code, message = await _elect(broker, election, topic, index)
            parts.append(make(part_cls, partition_id=index, error_code=code, error_message=message))
        results.append(make(topic_cls, topic=topic, partition_result=tuple(parts)))
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, replica_election_results=tuple(results))


# ======================================================= AlterPartitionReassignments
_REASSIGNMENT_CODES = {"moved": ErrorCode.none, "not needed": ErrorCode.none,
                       "unknown": ErrorCode.unknown_topic_or_partition, "conflict": ErrorCode.request_timed_out}


async def _reassign(broker, topic: str, index: int, replicas) -> tuple[ErrorCode, str | None]:
    """The named live brokers become the partition's replicas, the first its preferred broker
    and leader at once (nothing is copied: the storage is shared), so none is ever in progress."""
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
    live = broker.leadership.broker_ids()
    others = sorted(set(replicas) - live)
    if others:
        return ErrorCode.invalid_replica_assignment, (
            f"the assignment of {where} names brokers {others}; the live brokers are {sorted(live)}")
    outcome = await broker.leadership.reassign(topic, index, tuple(replicas))
    messages = {"moved": None, "not needed": None, "unknown": f"{where} has no leader state yet",
                "conflict": f"the state of {where} changed while it was reassigned; ask again"}
    return _REASSIGNMENT_CODES[outcome], messages[outcome]


@REGISTRY.route(ApiKey.ALTER_PARTITION_REASSIGNMENTS, (0, 1))
async def alter_partition_reassignments(broker: BrokerContext, request: Request[AlterPartitionReassignmentsRequest]):
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "responses")
    part_cls = nested(topic_cls, "partitions")
    responses = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            code, message = await _reassign(broker, t.name, p.partition_index, p.replicas)
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
