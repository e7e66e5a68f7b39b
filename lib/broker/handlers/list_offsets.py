"""ListOffsets (key 2): earliest, latest, max timestamp, or the first offset at a timestamp.
As Kafka's Partition.fetchOffsetForTimestamp answers a consumer: "latest" is the last fetchable
offset (the high watermark; with isolation_level read_committed, v2+, the last stable offset), and
a lookup by time or MAX_TIMESTAMP whose record is at or past it finds nothing. The log end is not
an answer: on a bucket root or in a cluster, offsets past the high watermark are not yet stored
and may be given to other records by the next leader."""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v11.request import ListOffsetsRequest

from topiclake.segments.batch import NO_TIMESTAMP
from topiclake.segments.read_constants import (EARLIEST_LOCAL_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP,
                                               EARLIEST_TIMESTAMP, LATEST_TIERED_TIMESTAMP, LATEST_TIMESTAMP,
                                               MAX_TIMESTAMP, UNKNOWN_OFFSET, IsolationLevel)

from ..api_keys import ApiKey
from ..constants import NO_LEADER_EPOCH
from ..context import BrokerContext
from ..errors import error_code, error_message
from ..wire import Request, make, nested
from ._common import NO_THROTTLE
from .registry import REGISTRY

log = logging.getLogger(__name__)


def _lookup(part, timestamp: int, committed: bool = False) -> tuple[int, int]:
    """(timestamp, offset) on the I/O thread, or a bucket reader thread for a lookup by time
    below a bucket partition's cache (`_by_time`); (NO_TIMESTAMP, UNKNOWN_OFFSET) when no record
    qualifies. As if nothing were tiered: nothing is tiered and nothing is pending upload (`_tiered`
    corrects that for a topic with remote storage). EARLIEST is the whole log's start (a bucket's
    manifest's, KIP-405's shape), EARLIEST_LOCAL the cache's."""
    log_ = part.log
    fetchable = part.last_stable_offset if committed else part.high_watermark
    if timestamp == LATEST_TIMESTAMP:
        return NO_TIMESTAMP, fetchable
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        log_.refresh()  # retention may just have moved the start offset (a rare request: worth a look)
        return NO_TIMESTAMP, part.history_start_offset if timestamp == EARLIEST_TIMESTAMP else log_.log_start_offset
    if timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
        return NO_TIMESTAMP, UNKNOWN_OFFSET
    found = part.offset_for_timestamp(timestamp)  # also answers MAX_TIMESTAMP; the closed segments too
    if found is None or found.offset >= fetchable:
        return NO_TIMESTAMP, UNKNOWN_OFFSET
    return found.timestamp, found.offset


def _lookup_each(asked: list[tuple[Any, int]], committed: bool) -> list:
    """`_lookup` of each (part, timestamp), on the I/O thread: its (timestamp, offset), or the
    exception that partition's lookup raised (the others are answered still)."""
    out: list = []
    for part, timestamp in asked:
        try:
            out.append(_lookup(part, timestamp, committed))
        except Exception as exc:  # answered for that partition alone
            out.append(exc)
    return out


def _by_time(part, timestamp: int) -> bool:
    """A lookup by time (or MAX_TIMESTAMP) that reads a bucket partition's closed segments."""
    return part.closed is not None and (timestamp >= 0 or timestamp == MAX_TIMESTAMP)


def _tiered(archive, part, timestamp: int, local: int) -> int:
    """On a reader thread, for a topic whose table is its remote tier (docs/ARCHIVE.md): EARLIEST
    is the first offset the table holds when it is below the log's; LATEST_TIERED the last offset
    the table holds, EARLIEST_PENDING_UPLOAD the first it does not (below the log end). Other
    specs keep the log's answer (a timestamp lookup answers from the local log)."""
    if timestamp == EARLIEST_TIMESTAMP:
        first = archive.first_offset(part.topic, part.index)
        return local if first is None else min(first, local)
    if timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
        end = archive.archived_end(part.topic, part.index)
        if end is None:
            return UNKNOWN_OFFSET
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return end - 1
        return end if end < part.log.log_end_offset else UNKNOWN_OFFSET
    return local


@REGISTRY.route(ApiKey.LIST_OFFSETS, (1, 11))
async def list_offsets(broker: BrokerContext, request: Request[ListOffsetsRequest]):
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    committed = getattr(body, "isolation_level", IsolationLevel.READ_UNCOMMITTED) == IsolationLevel.READ_COMMITTED
    # Every partition's part first, then the lookups of the writer's log state in ONE hop to the
    # I/O thread: a consumer resetting 2,000 partitions asks for them all in one request, and a
    # hop each (in a row) made it ~1 s.
    asked: list[tuple[int, str, Any, Any]] = []  # (topic entry, name, its partition entry, its part or why not)
    for t, topic in enumerate(body.topics):
        for p in topic.partitions:
            part: Any
            try:
                part = await broker.partitions.get(topic.name, p.partition_index)
                part.check_leader_epoch(getattr(p, "current_leader_epoch", NO_LEADER_EPOCH))
            except Exception as exc:  # answered for this partition alone
                part = exc
            asked.append((t, topic.name, p, part))
    local = [(part, p.timestamp) for _t, _name, p, part in asked
             if not isinstance(part, Exception) and not _by_time(part, p.timestamp)]
    found = iter(await broker.partitions.run_io(_lookup_each, local, committed) if local else ())
    results: list[list] = [[] for _topic in body.topics]
    for t, name, p, part in asked:
        try:
            if isinstance(part, Exception):
                raise part
            if _by_time(part, p.timestamp):
                ts, offset = await broker.partitions.run_bucket_read(_lookup, part, p.timestamp, committed)
            else:
                outcome = next(found)
                if isinstance(outcome, Exception):
                    raise outcome
                ts, offset = outcome
            if part.config.remote_storage_enable and broker.archive is not None:
                offset = await broker.partitions.run_read(_tiered, broker.archive, part, p.timestamp, offset)
            code, epoch = ErrorCode.none, part.leader_epoch
        except Exception as exc:
            ts, offset, code, epoch = NO_TIMESTAMP, UNKNOWN_OFFSET, error_code(exc), NO_LEADER_EPOCH
            if code == ErrorCode.unknown_server_error:
                log.error("ListOffsets %s-%d at %d failed", name, p.partition_index, p.timestamp, exc_info=exc)
            else:
                log.debug("ListOffsets %s-%d: %s", name, p.partition_index, error_message(exc))
        results[t].append(make(
            part_cls, partition_index=p.partition_index, error_code=code, timestamp=ts, offset=offset,
            leader_epoch=epoch if offset >= 0 else NO_LEADER_EPOCH))
    topics = [make(topic_cls, name=topic.name, partitions=tuple(rows)) for topic, rows in zip(body.topics, results)]
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))
