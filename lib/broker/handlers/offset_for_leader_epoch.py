"""OffsetForLeaderEpoch (key 23, KIP-101/KIP-320): where a leader epoch ended in this log. A
consumer asks it with the epoch of its committed or fetched position after a leader change, and
treats an end below its position as a truncation; the answer follows Kafka's
LeaderEpochFileCache.endOffsetFor over the epochs storage recorded (`Partition.epoch_end_offset`)."""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode
from kio.schema.offset_for_leader_epoch.v4.request import OffsetForLeaderEpochRequest

from topiclake.segments.leader_epochs import UNDEFINED_EPOCH_OFFSET

from ..api_keys import ApiKey
from ..constants import NO_LEADER_EPOCH
from ..context import BrokerContext
from ..errors import error_code, error_message
from ..wire import Request, make, nested
from ._common import NO_THROTTLE
from .registry import REGISTRY

log = logging.getLogger(__name__)


@REGISTRY.route(ApiKey.OFFSET_FOR_LEADER_EPOCH, (2, 4))
async def offset_for_leader_epoch(broker: BrokerContext, request: Request[OffsetForLeaderEpochRequest]):
    topic_cls = nested(request.response_type, "topics")
    part_cls = nested(topic_cls, "partitions")
    topics = [make(topic_cls, topic=t.topic, partitions=tuple([await _epoch_end(broker, part_cls, t.topic, p)
                                                                for p in t.partitions]))
              for t in request.body.topics]
    return make(request.response_type, throttle_time=NO_THROTTLE, topics=tuple(topics))


async def _epoch_end(broker: BrokerContext, part_cls: type, topic: str, p):
    """One partition's EpochEndOffset: the epoch asked for ended there, or the error why not."""
    try:
        part = await broker.partitions.get(topic, p.partition)
        part.check_leader_epoch(p.current_leader_epoch)
        epoch, end = part.epoch_end_offset(p.leader_epoch)  # a few ints: the loop thread is fine
        code = ErrorCode.none
    except Exception as exc:
        epoch, end, code = NO_LEADER_EPOCH, UNDEFINED_EPOCH_OFFSET, error_code(exc)
        if code == ErrorCode.unknown_server_error:
            log.exception("OffsetForLeaderEpoch %s-%d failed", topic, p.partition)
        else:
            log.debug("OffsetForLeaderEpoch %s-%d: %s", topic, p.partition, error_message(exc))
    return make(part_cls, error_code=code, partition=p.partition, leader_epoch=epoch, end_offset=end)
