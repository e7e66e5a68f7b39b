"""Metadata (key 3): the live brokers and each partition's leader (`leadership`); optional auto topic creation."""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode
from kio.schema.metadata.v13.request import MetadataRequest

from topiclake.segments.errors import InvalidTopicError, TopicAlreadyExistsError, UnknownTopicError
from topiclake.segments.storage import TopicMeta, validate_topic_name

from ..api_keys import ApiKey
from ..constants import AUTHORIZED_OPERATIONS_OMITTED
from ..context import BrokerContext
from ..errors import error_code
from ..partitions import INTERNAL_TOPICS, topic_uuid
from ..wire import Request, make, nested
from ._common import NO_THROTTLE, ZERO_UUID, partition_entries
from .registry import REGISTRY

log = logging.getLogger(__name__)


@REGISTRY.route(ApiKey.METADATA, (0, 13))
async def metadata(broker: BrokerContext, request: Request[MetadataRequest]):
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "topics")
    partition_cls = nested(topic_cls, "partitions")
    leadership = broker.leadership

    def topic_entry(name, meta: TopicMeta | None, code=ErrorCode.none, topic_id=ZERO_UUID):
        partitions = ()
        if meta is not None:
            partitions = partition_entries(partition_cls, leadership, meta.name, range(meta.partitions))
            topic_id = topic_uuid(meta)
        return make(topic_cls, error_code=code, name=name, topic_id=topic_id, is_internal=name in INTERNAL_TOPICS,
                    partitions=partitions)

    if body.topics is None or (request.api_version == 0 and not body.topics):
        topics = tuple(topic_entry(m.name, m) for m in broker.partitions.topics())
    else:
        auto_create = broker.config.auto_create_topics and getattr(body, "allow_auto_topic_creation", True)
        topics = tuple(_describe(broker, t, auto_create, topic_entry) for t in body.topics)

    broker_cls = nested(cls, "brokers")
    brokers = tuple(make(broker_cls, node_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
                    for b in leadership.brokers(request.session.listener))  # the listener the client came in on
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, cluster_id=broker.cluster_id,
                controller_id=leadership.controller_id(), brokers=brokers, topics=topics,
                cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)


def _describe(broker, requested, auto_create: bool, topic_entry):
    name = requested if isinstance(requested, str) else requested.name
    if name is None:  # v10+: by topic id
        meta = broker.partitions.topic_by_id(requested.topic_id)
        if meta is None:
            return topic_entry(None, None, ErrorCode.unknown_topic_id, requested.topic_id)
        return topic_entry(meta.name, meta)
    try:
        return topic_entry(name, broker.partitions.topic(name))
    except InvalidTopicError:
        return topic_entry(name, None, ErrorCode.invalid_topic_exception)
    except UnknownTopicError:
        if not auto_create:
            return topic_entry(name, None, ErrorCode.unknown_topic_or_partition)
    try:
        validate_topic_name(name)
        meta = broker.partitions.create_topic(name, broker.config.num_partitions)
        log.info("auto-created topic %s with %d partitions", name, meta.partitions)
    except TopicAlreadyExistsError:
        meta = broker.partitions.topic(name, fresh=True)
    except Exception as exc:
        return topic_entry(name, None, error_code(exc))
    return topic_entry(name, meta)
