"""The share-group offset APIs (KIP-932): DescribeShareGroupOffsets (90),
AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92), over `share.service`.

A share group's "offset" of a partition is its share-partition start offset (SPSO): every
record below it is delivered and done. Altering or deleting it needs a group without members.
"""

from __future__ import annotations

from kio.schema.alter_share_group_offsets.v0.request import AlterShareGroupOffsetsRequest
from kio.schema.delete_share_group_offsets.v0.request import DeleteShareGroupOffsetsRequest
from kio.schema.describe_share_group_offsets.v1.request import DescribeShareGroupOffsetsRequest

from ..api_keys import ApiKey
from ..context import BrokerContext
from ..group.errors import GroupCoordinatorError
from ..share.service import TopicOffsets
from ..wire import Request, make, nested
from ._common import NO_THROTTLE, code
from .registry import REGISTRY


@REGISTRY.route(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, (0, 1))
async def describe_share_group_offsets(broker: BrokerContext, request: Request[DescribeShareGroupOffsetsRequest]):
    body, cls = request.body, request.response_type
    group_cls = nested(cls, "groups")
    topic_cls = nested(group_cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    groups = []
    for g in body.groups:
        wanted = None if g.topics is None else {t.topic_name: list(t.partitions) for t in g.topics}
        try:
            error, message, topics = await broker.share.describe_offsets(g.group_id, wanted)
        except GroupCoordinatorError as exc:
            error, message, topics = exc.code, str(exc), []
        groups.append(make(group_cls, group_id=g.group_id, error_code=code(error), error_message=message, topics=tuple(
            make(topic_cls, topic_name=t.topic, topic_id=t.topic_id, partitions=tuple(
                make(part_cls, partition_index=p.partition, start_offset=p.start_offset, leader_epoch=0, lag=p.lag,
                     error_code=code(p.error), error_message=p.message) for p in t.partitions))
            for t in topics)))
    return make(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))


@REGISTRY.route(ApiKey.ALTER_SHARE_GROUP_OFFSETS, (0, 0))
async def alter_share_group_offsets(broker: BrokerContext, request: Request[AlterShareGroupOffsetsRequest]):
    body, cls = request.body, request.response_type
    wanted = {t.topic_name: {p.partition_index: p.start_offset for p in t.partitions} for t in body.topics}
    try:
        error, message, topics = await broker.share.alter_offsets(body.group_id, wanted)
    except GroupCoordinatorError as exc:
        error, message, topics = exc.code, str(exc), []
    topic_cls = nested(cls, "responses")
    part_cls = nested(topic_cls, "partitions")
    return make(cls, throttle_time=NO_THROTTLE, error_code=code(error), error_message=message, responses=tuple(
        make(topic_cls, topic_name=t.topic, topic_id=t.topic_id, partitions=tuple(
            make(part_cls, partition_index=p.partition, error_code=code(p.error), error_message=p.message)
            for p in t.partitions)) for t in topics))


@REGISTRY.route(ApiKey.DELETE_SHARE_GROUP_OFFSETS, (0, 0))
async def delete_share_group_offsets(broker: BrokerContext, request: Request[DeleteShareGroupOffsetsRequest]):
    body, cls = request.body, request.response_type
    try:
        error, message, topics = await broker.share.delete_offsets(body.group_id, [t.topic_name for t in body.topics])
    except GroupCoordinatorError as exc:
        error, message, topics = exc.code, str(exc), []
    topic_cls = nested(cls, "responses")
    return make(cls, throttle_time=NO_THROTTLE, error_code=code(error), error_message=message,
                responses=tuple(_deleted(topic_cls, t) for t in topics))


def _deleted(topic_cls, t: TopicOffsets):
    return make(topic_cls, topic_name=t.topic, topic_id=t.topic_id, error_code=code(t.error), error_message=t.message)
