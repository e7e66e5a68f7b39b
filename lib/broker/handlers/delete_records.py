"""DeleteRecords (21): move a partition's log start offset forward (Kafka's deleteRecordsOnLeader).

The log start offset is checkpointed at once (Log.advance_log_start_offset), so it survives a
restart; segments wholly below it go at the next retention run (a LOG_START_OFFSET_BREACH), as
Kafka's log cleanup thread removes them. One replica: the low watermark is this log's start.
On a bucket root the answer waits for the manifest commit that raises its log start (the cache's
checkpoint is not kept across a takeover): BucketService.commit_log_start.
"""

from __future__ import annotations

import logging

from kio.schema.delete_records.v2.request import DeleteRecordsRequest
from kio.schema.errors import ErrorCode

from topiclake.segments.errors import OffsetOutOfRangeError

from ..api_keys import ApiKey
from ..context import BrokerContext
from ..errors import BrokerError, error_code, error_message
from ..wire import Request, make, nested
from ._common import NO_THROTTLE
from .registry import REGISTRY

log = logging.getLogger(__name__)

HIGH_WATERMARK = -1  # DeleteRecordsRequest: "delete everything below the high watermark"


def _delete_before(part, offset: int) -> int:
    """On the I/O thread: the new log start offset."""
    hw = part.high_watermark
    if offset == HIGH_WATERMARK:
        offset = hw
    if offset < 0 or offset > hw:
        raise OffsetOutOfRangeError(f"cannot delete records of {part.topic}-{part.index} before offset {offset}: "
                                    f"it is outside [0, high watermark {hw}]")
    if part.closed is not None and offset < part.log.log_start_offset:
        # A bucket's closed segments below the cache: only the manifest's start moves (the commit)
        return max(offset, part.closed.log_start_offset)
    part.log.advance_log_start_offset(offset)
    part.txns.forget_before(part.log.log_start_offset)
    return part.log.log_start_offset


@REGISTRY.route(ApiKey.DELETE_RECORDS, (0, 2))
async def delete_records(broker: BrokerContext, request: Request[DeleteRecordsRequest]):
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    topics = []
    for topic in body.topics:
        results = []
        for p in topic.partitions:
            low_watermark = -1
            try:
                part = await broker.partitions.get(topic.name, p.partition_index)
                if part.config.compact and not part.config.delete:
                    raise BrokerError(f"records of {topic.name}-{p.partition_index} cannot be deleted: its "
                                      f"cleanup.policy is compact", ErrorCode.policy_violation)
                low_watermark = await broker.partitions.run_io(_delete_before, part, p.offset)
                if broker.partitions.bucket is not None:  # a bucket root: kept in the manifest too
                    await broker.partitions.bucket.commit_log_start(part, low_watermark)
                code = ErrorCode.none
                log.info("DeleteRecords: %s-%d now starts at offset %d", topic.name, p.partition_index, low_watermark)
            except Exception as exc:
                code = error_code(exc)
                log.info("DeleteRecords %s-%d before %d: %s (%s)", topic.name, p.partition_index, p.offset,
                         code.name, error_message(exc))
            results.append(make(part_cls, partition_index=p.partition_index, low_watermark=low_watermark,
                                error_code=code))
        topics.append(make(topic_cls, name=topic.name, partitions=tuple(results)))
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))
