"""Committed offsets: OffsetCommit (8), OffsetFetch (9, v8+ batched groups), OffsetDelete (47).

Thin over the GroupService (broker.groups). OffsetCommit and OffsetFetch stop at v9: v10
addresses topics by id only. A whole-request error of the service is every partition's error.
"""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from ..group.api import CommitOffset, OffsetCommitRequest
from ..group.errors import GroupCoordinatorError
from ..wire import has_field, make, nested
from .groups import code, ms
from .registry import REGISTRY

_NO_THROTTLE = datetime.timedelta(0)


def commit_offsets_of(body) -> tuple[CommitOffset, ...]:
    """The flat offsets of an OffsetCommit or TxnOffsetCommit request (same topic nesting)."""
    return tuple(CommitOffset(t.name, p.partition_index, p.committed_offset, p.committed_metadata,
                              getattr(p, "committed_leader_epoch", -1))
                 for t in body.topics for p in t.partitions)


def _grouped(results, cls, make_part):
    """Rebuild the per-topic nesting of a response from a flat list of per-partition results."""
    topics: dict[str, list] = {}
    for r in results:
        topics.setdefault(r.topic, []).append(make_part(r))
    return tuple(make(cls, name=name, partitions=tuple(parts)) for name, parts in topics.items())


# ====================================================================== OffsetCommit
@REGISTRY.route(8, (2, 9))
async def offset_commit(broker, request):
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    offsets = commit_offsets_of(body)
    retention = ms(getattr(body, "retention_time", None))
    req = OffsetCommitRequest(body.group_id, offsets, body.generation_id_or_member_epoch, body.member_id,
                              getattr(body, "group_instance_id", None), retention if retention >= 0 else -1)
    try:
        results = await broker.groups.commit_offsets(req)
    except GroupCoordinatorError as exc:
        results = [_Failed(o.topic, o.partition, exc.code) for o in offsets]
    return make(cls, throttle_time=_NO_THROTTLE, topics=_grouped(
        results, topic_cls,
        lambda r: make(part_cls, partition_index=r.partition, error_code=code(r.error))))


class _Failed:
    __slots__ = ("topic", "partition", "error")

    def __init__(self, topic, partition, error):
        self.topic, self.partition, self.error = topic, partition, error


# ======================================================================= OffsetFetch
@REGISTRY.route(9, (1, 9))
async def offset_fetch(broker, request):
    body, cls = request.body, request.response_type
    require_stable = getattr(body, "require_stable", False)
    if has_field(type(body), "groups"):  # v8+: several groups in one request
        group_cls = nested(cls, "groups")
        topic_cls = nested(group_cls, "topics")
        part_cls = nested(topic_cls, "partitions")
        groups = []
        for g in body.groups:
            wanted = None if g.topics is None else [(t.name, p) for t in g.topics for p in t.partition_indexes]
            error, topics = await _fetch(broker, g.group_id, wanted, require_stable, topic_cls, part_cls,
                                         getattr(g, "member_id", None), getattr(g, "member_epoch", -1))
            groups.append(make(group_cls, group_id=g.group_id, topics=topics, error_code=error))
        return make(cls, throttle_time=_NO_THROTTLE, groups=tuple(groups))
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    wanted = None if body.topics is None else [(t.name, p) for t in body.topics for p in t.partition_indexes]
    error, topics = await _fetch(broker, body.group_id, wanted, require_stable, topic_cls, part_cls)
    if not has_field(cls, "error_code") and error != ErrorCode.none:
        # v0/v1 have no top-level error: every partition carries it.
        topics = tuple(make(topic_cls, name=t.name, partitions=tuple(
            make(part_cls, partition_index=p.partition_index, committed_offset=-1, committed_leader_epoch=-1,
                 metadata="", error_code=error) for p in t.partitions)) for t in topics)
    return make(cls, throttle_time=_NO_THROTTLE, topics=topics, error_code=error)


async def _fetch(broker, group_id, wanted, require_stable, topic_cls, part_cls, member_id=None, member_epoch=-1):
    try:
        resp = await broker.groups.fetch_offsets(group_id, wanted, require_stable=require_stable,
                                                 member_id=member_id, member_epoch=member_epoch)
    except GroupCoordinatorError as exc:
        empty = _grouped([_Failed(t, p, exc.code) for t, p in wanted or ()], topic_cls,
                         lambda r: make(part_cls, partition_index=r.partition, committed_offset=-1,
                                        committed_leader_epoch=-1, metadata="", error_code=code(exc.code)))
        return code(exc.code), empty
    topics = _grouped(resp.partitions, topic_cls, lambda r: make(
        part_cls, partition_index=r.partition, committed_offset=r.offset, committed_leader_epoch=r.leader_epoch,
        metadata=r.metadata, error_code=code(r.error)))
    return code(resp.error), topics


# ====================================================================== OffsetDelete
@REGISTRY.route(47, (0, 0))
async def offset_delete(broker, request):
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    wanted = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    try:
        resp = await broker.groups.delete_offsets(body.group_id, wanted)
        error, results = resp.error, resp.partitions
    except GroupCoordinatorError as exc:
        error, results = exc.code, ()
    return make(cls, throttle_time=_NO_THROTTLE, error_code=code(error), topics=_grouped(
        results, topic_cls,
        lambda r: make(part_cls, partition_index=r.partition, error_code=code(r.error))))
