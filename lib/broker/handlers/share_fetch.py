"""Share-group records (KIP-932): ShareFetch (78) and ShareAcknowledge (79).

Thin: decode the kio request into `share.fetcher` terms, call the share-partition manager
(broker.share.fetcher), build the response for the request's version. ShareFetch carries
acknowledgements too (piggy-backed); their outcome is each partition's acknowledge error.
Version 2 (Kafka 4.2) adds RENEW acknowledgements (a lock restarts) and the record-limit
acquire mode, where max_records is a hard limit rather than a batch-aligned one.

In a cluster each partition's current_leader names its leader and epoch, and a partition this
broker does not lead (NOT_LEADER_OR_FOLLOWER) brings its leader's endpoint in node_endpoints, so
the client moves there (KIP-951, as Kafka's share-partition leader answers).
"""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode
from kio.schema.share_acknowledge.v2.request import ShareAcknowledgeRequest
from kio.schema.share_fetch.v2.request import ShareFetchRequest

from topiclake.security.acls import Operation, ResourceType

from ..api_keys import ApiKey
from ..constants import LEADER_EPOCH, NO_LEADER_EPOCH
from ..context import BrokerContext
from ..leadership import NO_LEADER
from ..security.gate import authorize
from ..share.fetcher import PartitionRequest, ShareResult
from ..share.partition import AckRange
from ..throttle import FETCH
from ..wire import Request, make, nested
from .registry import REGISTRY

RECORD_LIMIT_MODE = 1


def _requests(topics) -> list[PartitionRequest]:
    return [PartitionRequest(t.topic_id, p.partition_index, tuple(
        AckRange(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in p.acknowledgement_batches))
        for t in topics for p in t.partitions]


def _leader(broker, part_cls, topic: str | None, index: int):
    """The partition's current leader (this broker at epoch 0 when alone)."""
    leader_id, epoch = broker.broker_id, LEADER_EPOCH
    if broker.leadership.clustered:
        current = broker.leadership.leader(topic, index) if topic is not None else None
        leader_id, epoch = (current.leader, current.epoch) if current is not None else (NO_LEADER, NO_LEADER_EPOCH)
    return make(nested(part_cls, "current_leader"), leader_id=leader_id, leader_epoch=epoch)


def _readable(broker, request):
    """Whether the request's principal may read a topic (KafkaApis answers TOPIC_AUTHORIZATION_FAILED
    per partition and serves the rest)."""
    return lambda topic: authorize(broker, request, Operation.READ, ResourceType.TOPIC, topic)


def _code(value: int | None) -> ErrorCode:
    return ErrorCode(value or 0)


@REGISTRY.route(ApiKey.SHARE_FETCH, (1, 2))
async def share_fetch(broker: BrokerContext, request: Request[ShareFetchRequest]):
    body = request.body
    forgotten = [(t.topic_id, p) for t in body.forgotten_topics_data for p in t.partitions]
    max_records = 0 if getattr(body, "is_renew_ack", False) else body.max_records  # v2: renewing, not fetching
    group, member = body.group_id or "", body.member_id or ""
    result = await broker.share.fetcher.fetch(
        group, member, body.share_session_epoch, _requests(body.topics), forgotten,
        max_wait_ms=int(body.max_wait.total_seconds() * 1000), max_records=max_records, max_bytes=body.max_bytes,
        strict_records=getattr(body, "share_acquire_mode", 0) == RECORD_LIMIT_MODE, readable=_readable(broker, request))
    session = broker.share.fetcher.sessions.get(group, member)
    if session is not None:  # the member's records are released if this connection drops
        request.session.on_close(("share", group, member, id(session)),
                                 lambda: broker.share.fetcher.disconnected(group, member, session))
    throttle_ms = broker.throttle.record(FETCH, request.session.user, request.client_id, result.fetched_bytes)

    def partition(part_cls, leader, r):
        acquired_cls = nested(part_cls, "acquired_records")
        return make(part_cls, partition_index=r.partition, error_code=_code(r.error), error_message=r.error_message,
                    acknowledge_error_code=r.ack_error or 0, acknowledge_error_message=r.ack_message,
                    current_leader=leader, records=r.records, acquired_records=tuple(
                        make(acquired_cls, first_offset=a.first_offset, last_offset=a.last_offset,
                             delivery_count=a.delivery_count) for a in r.acquired))

    return _response(broker, request, result, throttle_ms, partition)


@REGISTRY.route(ApiKey.SHARE_ACKNOWLEDGE, (1, 2))
async def share_acknowledge(broker: BrokerContext, request: Request[ShareAcknowledgeRequest]):
    body = request.body
    result = await broker.share.fetcher.acknowledge(body.group_id or "", body.member_id or "",
                                                    body.share_session_epoch, _requests(body.topics),
                                                    readable=_readable(broker, request))

    def partition(part_cls, leader, r):
        return make(part_cls, partition_index=r.partition, error_code=_code(r.error), error_message=r.error_message,
                    current_leader=leader)

    return _response(broker, request, result, 0, partition)


def _response(broker, request, result: ShareResult, throttle_ms: int, partition):
    """The response of either API: `partition(part_cls, leader, r)` answers each partition result,
    grouped by topic."""
    cls = request.response_type
    topic_cls = nested(cls, "responses")
    part_cls = nested(topic_cls, "partitions")
    topics: dict = {}
    names: dict = {}  # topic id -> name (cluster mode: whose leader to name)
    moved: set[int] = set()  # leaders of partitions this broker does not lead
    for r in result.partitions:
        if broker.leadership.clustered and r.topic_id not in names:
            meta = broker.partitions.topic_by_id(r.topic_id)
            names[r.topic_id] = meta.name if meta is not None else None
        leader = _leader(broker, part_cls, names.get(r.topic_id), r.partition)
        if r.error == ErrorCode.not_leader_or_follower and leader.leader_id >= 0:
            moved.add(leader.leader_id)
        topics.setdefault(r.topic_id, []).append(partition(part_cls, leader, r))
    node_cls = nested(cls, "node_endpoints")
    nodes = tuple(make(node_cls, node_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
                  for b in (broker.leadership.brokers(request.session.listener) if moved else ())
                  if b.broker_id in moved)
    return make(cls, throttle_time=datetime.timedelta(milliseconds=throttle_ms), error_code=_code(result.error),
                error_message=result.error_message,
                acquisition_lock_timeout=datetime.timedelta(milliseconds=result.lock_ms),
                responses=tuple(make(topic_cls, topic_id=tid, partitions=tuple(parts))
                                for tid, parts in topics.items()),
                node_endpoints=nodes)
