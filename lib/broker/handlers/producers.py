"""DescribeProducers (61): the idempotent/transactional producers a partition remembers.

The same entries a producer snapshot holds (ProducerState + the open transactions): each
producer's epoch, last sequence and timestamp, the coordinator epoch of its last marker and the
first offset of its open transaction, read on the I/O thread that mutates them.
"""

from __future__ import annotations

from kio.schema.describe_producers.v0.request import DescribeProducersRequest
from kio.schema.errors import ErrorCode

from ..api_keys import ApiKey
from ..context import BrokerContext
from ..errors import error_code, error_message
from ..wire import Request, make, nested
from ._common import NO_THROTTLE
from .registry import REGISTRY


def _active_producers(part):
    return part.producers.to_snapshot(part.txns.ongoing())


@REGISTRY.route(ApiKey.DESCRIBE_PRODUCERS, (0, 0))
async def describe_producers(broker: BrokerContext, request: Request[DescribeProducersRequest]):
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    producer_cls = nested(part_cls, "active_producers")
    topics = []
    for t in body.topics:
        parts = []
        for index in t.partition_indexes:
            try:
                part = await broker.partitions.get(t.name, index)
                entries = await broker.partitions.run_io(_active_producers, part)
                producers = tuple(make(producer_cls, producer_id=e.producer_id, producer_epoch=e.epoch,
                                       last_sequence=e.last_sequence, last_timestamp=e.timestamp,
                                       coordinator_epoch=e.coordinator_epoch,
                                       current_txn_start_offset=e.current_txn_first_offset) for e in entries)
                parts.append(make(part_cls, partition_index=index, error_code=ErrorCode.none, error_message=None,
                                  active_producers=producers))
            except Exception as exc:
                parts.append(make(part_cls, partition_index=index, error_code=error_code(exc),
                                  error_message=error_message(exc), active_producers=()))
        topics.append(make(topic_cls, name=t.name, partitions=tuple(parts)))
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))
