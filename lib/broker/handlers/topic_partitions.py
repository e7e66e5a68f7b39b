"""DescribeTopicPartitions (75, KIP-966): Metadata's per-partition view, paginated by a cursor.

Topics come sorted by name (all of them when none is named); a response holds at most
`response_partition_limit` partitions and a `next_cursor` where the next page starts, as
Kafka's DescribeTopicPartitionsRequestHandler pages them. The partitions are Metadata's: this
broker leads each and is its only replica (no eligible leader replicas besides it).
"""

from __future__ import annotations

from kio.schema.describe_topic_partitions.v0.request import DescribeTopicPartitionsRequest
from kio.schema.errors import ErrorCode

from ..api_keys import ApiKey
from ..constants import AUTHORIZED_OPERATIONS_OMITTED
from ..context import BrokerContext
from ..partitions import INTERNAL_TOPICS, topic_uuid
from ..wire import Request, make, nested
from ._common import NO_THROTTLE, ZERO_UUID, partition_entries
from .registry import REGISTRY

MAX_PARTITION_LIMIT = 2000  # Kafka's max.request.partition.size.limit default


@REGISTRY.route(ApiKey.DESCRIBE_TOPIC_PARTITIONS, (0, 0))
async def describe_topic_partitions(broker: BrokerContext, request: Request[DescribeTopicPartitionsRequest]):
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    cursor_cls = nested(cls, "next_cursor")
    metas = {m.name: m for m in broker.partitions.topics()}
    names = sorted({t.name for t in body.topics}) if body.topics else sorted(metas)
    cursor = body.cursor
    if cursor is not None:
        if cursor.topic_name not in names:
            return make(cls, throttle_time=NO_THROTTLE, topics=(make(
                topic_cls, error_code=ErrorCode.invalid_request, name=cursor.topic_name, topic_id=ZERO_UUID,
                is_internal=False, partitions=(), topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED),),
                next_cursor=None)
        names = names[names.index(cursor.topic_name):]
    budget = min(body.response_partition_limit, MAX_PARTITION_LIMIT) if body.response_partition_limit > 0 \
        else MAX_PARTITION_LIMIT
    topics, next_cursor = [], None
    for name in names:
        meta = metas.get(name)
        if meta is None:
            topics.append(make(topic_cls, error_code=ErrorCode.unknown_topic_or_partition, name=name,
                               topic_id=ZERO_UUID, is_internal=False, partitions=(),
                               topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        if budget == 0:
            next_cursor = make(cursor_cls, topic_name=name, partition_index=first)
            break
        last = min(meta.partitions, first + budget)
        budget -= last - first
        topics.append(make(topic_cls, error_code=ErrorCode.none, name=name, topic_id=topic_uuid(meta),
                           is_internal=name in INTERNAL_TOPICS,
                           partitions=partition_entries(part_cls, broker.leadership, meta.name, range(first, last)),
                           topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
        if last < meta.partitions:
            next_cursor = make(cursor_cls, topic_name=name, partition_index=last)
            break
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics), next_cursor=next_cursor)
