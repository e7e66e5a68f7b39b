"""Committed offsets: OffsetCommit (8), OffsetFetch (9, v8+ batched groups), OffsetDelete (47).

Thin over the GroupCoordinator (broker.groups). OffsetCommit and OffsetFetch v10 address topics by
id only: ids are translated to names for the coordinator (which keeps offsets by name, as
`__consumer_offsets` does) and back; an id no topic has is UNKNOWN_TOPIC_ID. A whole-request
error of the service is every partition's error.
"""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode
from kio.schema.offset_commit.v10.request import OffsetCommitRequest as KioOffsetCommitRequest
from kio.schema.offset_delete.v0.request import OffsetDeleteRequest
from kio.schema.offset_fetch.v10.request import OffsetFetchRequest

from ..api_keys import ApiKey
from ..constants import NO_LEADER_EPOCH
from ..context import BrokerContext
from ..group.api import OffsetCommitRequest
from ..group.errors import GroupCoordinatorError
from ..partitions import topic_uuid
from ..wire import Request, has_field, make, nested
from ._common import NO_THROTTLE, ZERO_UUID, code, ms
from ._coordinators import commit_offsets_of
from .registry import REGISTRY


def _grouped(results, cls, make_part, ids: "_TopicIds | None" = None):
    """Rebuild the per-topic nesting of a response from a flat list of per-partition results
    (keyed by topic name, or by id in v10+)."""
    topics: dict[str, list] = {}
    for r in results:
        topics.setdefault(r.topic, []).append(make_part(r))
    return tuple(make(cls, name=name, topic_id=ids.id_of(name) if ids else None, partitions=tuple(parts))
                 for name, parts in topics.items())


class _TopicIds:
    """Topic ids <-> names for one v10+ request. An unknown id stands for itself (a UUID key)."""

    def __init__(self, broker):
        self.broker = broker
        self._ids: dict[str, uuid.UUID] = {}

    def name_of(self, topic_id: uuid.UUID) -> str | uuid.UUID:
        meta = self.broker.partitions.topic_by_id(topic_id)
        if meta is None:
            return topic_id
        self._ids[meta.name] = topic_id
        return meta.name

    def id_of(self, key: str | uuid.UUID) -> uuid.UUID:
        if isinstance(key, uuid.UUID):
            return key
        if key not in self._ids:
            try:
                self._ids[key] = topic_uuid(self.broker.partitions.topic(key))
            except Exception:  # offsets of a deleted topic: Kafka's zero id
                self._ids[key] = ZERO_UUID
        return self._ids[key]


def _topic_keys(broker, topics) -> tuple[list, "_TopicIds | None"]:
    """Each request topic's key: its name, or (v10+) the name of its id, the id if unknown."""
    if not topics or not has_field(type(topics[0]), "topic_id"):
        return [t.name for t in topics or ()], None
    ids = _TopicIds(broker)
    return [ids.name_of(t.topic_id) for t in topics], ids


# ====================================================================== OffsetCommit
@REGISTRY.route(ApiKey.OFFSET_COMMIT, (2, 10))
async def offset_commit(broker: BrokerContext, request: Request[KioOffsetCommitRequest]):
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    keys, ids = _topic_keys(broker, body.topics)
    unknown = [_Failed(key, p.partition_index, ErrorCode.unknown_topic_id)
               for key, t in zip(keys, body.topics) if isinstance(key, uuid.UUID) for p in t.partitions]
    offsets = commit_offsets_of(body, keys)
    retention = ms(getattr(body, "retention_time", None))
    req = OffsetCommitRequest(body.group_id, offsets, body.generation_id_or_member_epoch, body.member_id,
                              getattr(body, "group_instance_id", None), retention if retention >= 0 else -1)
    try:
        results = await broker.groups.commit_offsets(req) if offsets else []
    except GroupCoordinatorError as exc:
        results = [_Failed(o.topic, o.partition, exc.code) for o in offsets]
    return make(cls, throttle_time=NO_THROTTLE, topics=_grouped(
        [*results, *unknown], topic_cls,
        lambda r: make(part_cls, partition_index=r.partition, error_code=code(r.error)), ids))


class _Failed:
    __slots__ = ("topic", "partition", "error")

    def __init__(self, topic, partition, error):
        self.topic, self.partition, self.error = topic, partition, error


# ======================================================================= OffsetFetch
@REGISTRY.route(ApiKey.OFFSET_FETCH, (1, 10))
async def offset_fetch(broker: BrokerContext, request: Request[OffsetFetchRequest]):
    body, cls = request.body, request.response_type
    require_stable = getattr(body, "require_stable", False)
    if has_field(type(body), "groups"):  # v8+: several groups in one request
        group_cls = nested(cls, "groups")
        topic_cls = nested(group_cls, "topics")
        part_cls = nested(topic_cls, "partitions")
        groups = []
        for g in body.groups:
            keys, ids = _topic_keys(broker, g.topics)
            if ids is None and has_field(topic_cls, "topic_id"):  # v10, all topics: answer by id
                ids = _TopicIds(broker)
            wanted = None if g.topics is None else [(key, p) for key, t in zip(keys, g.topics)
                                                    for p in t.partition_indexes]
            error, topics = await _fetch(broker, g.group_id, wanted, require_stable, topic_cls, part_cls,
                                         getattr(g, "member_id", None), getattr(g, "member_epoch", -1), ids)
            groups.append(make(group_cls, group_id=g.group_id, topics=topics, error_code=error))
        return make(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    wanted = None if body.topics is None else [(t.name, p) for t in body.topics for p in t.partition_indexes]
    error, topics = await _fetch(broker, body.group_id, wanted, require_stable, topic_cls, part_cls)
    if not has_field(cls, "error_code") and error != ErrorCode.none:
        # v0/v1 have no top-level error: every partition carries it.
        topics = tuple(make(topic_cls, name=t.name, partitions=tuple(
            make(part_cls, partition_index=p.partition_index, committed_offset=-1,
                 committed_leader_epoch=NO_LEADER_EPOCH, metadata="", error_code=error)
            for p in t.partitions)) for t in topics)
    return make(cls, throttle_time=NO_THROTTLE, topics=topics, error_code=error)


async def _fetch(broker, group_id, wanted, require_stable, topic_cls, part_cls, member_id=None, member_epoch=-1,
                 ids=None):
    """(group error, response topics); `wanted` keys are names, or unknown topic ids (v10)."""
    unknown = [_Failed(t, p, ErrorCode.unknown_topic_id) for t, p in wanted or () if isinstance(t, uuid.UUID)]
    known = None if wanted is None else [(t, p) for t, p in wanted if isinstance(t, str)]

    def failed(r):
        return make(part_cls, partition_index=r.partition, committed_offset=-1, committed_leader_epoch=NO_LEADER_EPOCH,
                    metadata="", error_code=code(r.error))

    try:
        resp = await broker.groups.fetch_offsets(group_id, known, require_stable=require_stable,
                                                 member_id=member_id, member_epoch=member_epoch)
    except GroupCoordinatorError as exc:
        empty = _grouped([_Failed(t, p, exc.code) for t, p in wanted or ()], topic_cls, failed, ids)
        return code(exc.code), empty
    topics = _grouped(resp.partitions, topic_cls, lambda r: make(
        part_cls, partition_index=r.partition, committed_offset=r.offset, committed_leader_epoch=r.leader_epoch,
        metadata=r.metadata, error_code=code(r.error)), ids)
    return code(resp.error), topics + _grouped(unknown, topic_cls, failed, ids)


# ====================================================================== OffsetDelete
@REGISTRY.route(ApiKey.OFFSET_DELETE, (0, 0))
async def offset_delete(broker: BrokerContext, request: Request[OffsetDeleteRequest]):
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    wanted = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    try:
        resp = await broker.groups.delete_offsets(body.group_id, wanted)
        error, results = resp.error, resp.partitions
    except GroupCoordinatorError as exc:
        error, results = exc.code, ()
    return make(cls, throttle_time=NO_THROTTLE, error_code=code(error), topics=_grouped(
        results, topic_cls,
        lambda r: make(part_cls, partition_index=r.partition, error_code=code(r.error))))
