"""Produce (key 0): validate each partition's batch, check idempotent sequences, append.

Validation happens before a byte touches disk, in Kafka's order (UnifiedLog.analyzeAndValidate
Records + LogValidator for v2 client batches): exactly one v2 batch per partition, its size
against max.message.bytes (MESSAGE_TOO_LARGE), size/CRC (CORRUPT_MESSAGE), then the header
rules a client batch must follow (INVALID_RECORD). The checks run once, here, before a byte is
written: in one pass for a batch that passes them all (`_checked_header`), by validate_batch for
the precise error of one that does not. The writer thread then appends it without computing its
CRC again (`Log.append_validated`), which makes the checks that depend on the log's own config
and state. One hop to the writer thread per request appends every partition's batch.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

from crc32c import crc32c
from kio.schema.errors import ErrorCode
from kio.schema.produce.v13.request import ProduceRequest

from topiclake.segments.batch import (ATTRIBUTES_OFFSET, CONTROL_BIT, CURRENT_MAGIC, HEADER, HEADER_SIZE, LOG_OVERHEAD,
                                      MAGIC_OFFSET, BatchHeader, RecordBatch)
from topiclake.segments.errors import CorruptRecordError, RecordTooLargeError
from topiclake.segments.log_results import AppendResult

from ..api_keys import ApiKey
from ..append_policy import check_append, plain_timestamp_bound
from ..context import BrokerContext
from ..encoded import pre_encoding_allowed
from ..errors import BrokerError, CloseConnection, error_code, error_message
from ..later import Later
from ..produce_response import produce_response
from ..producer_state import Duplicate
from ..throttle import PRODUCE, REQUEST
from ..wire import Request, has_field, make, nested
from .registry import REGISTRY

log = logging.getLogger(__name__)


class InvalidRecord(BrokerError):
    code = ErrorCode.invalid_record


def validate_batch(data: bytes | None, max_message_bytes: int, where: str) -> BatchHeader:
    """The header of the one valid v2 batch in `data`, or the error Kafka would answer with."""
    if not data:
        raise InvalidRecord(f"{where}: produce request has no record batch")
    if len(data) < HEADER_SIZE:
        raise CorruptRecordError(f"{len(data)} bytes cannot hold a record batch header", source=where, position=0)
    magic = data[MAGIC_OFFSET]
    if magic != CURRENT_MAGIC:
        raise InvalidRecord(f"{where}: produce requests v3+ may only carry magic v2 batches, got magic {magic}")
    header = BatchHeader(*HEADER.unpack_from(data, 0))
    if header.size > max_message_bytes:
        raise RecordTooLargeError(
            f"{where}: batch of {header.size} bytes is larger than max.message.bytes={max_message_bytes}")
    if header.size > len(data):
        raise CorruptRecordError(f"batch declares {header.size} bytes, the request holds {len(data)}",
                                 source=where, position=0)
    if header.size < len(data):
        raise InvalidRecord(f"{where}: a produce request must carry exactly one record batch per partition "
                            f"({len(data) - header.size} bytes follow the first batch)")
    RecordBatch(header, data, 0, where).ensure_valid()
    if header.is_control:
        raise InvalidRecord(f"{where}: clients may not write control batches")
    if header.records_count != header.last_offset_delta + 1:
        raise InvalidRecord(f"{where}: batch declares {header.records_count} records but its offsets span "
                            f"{header.last_offset_delta + 1}")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecord(f"{where}: producer {header.producer_id} sent sequence {header.base_sequence}")
    return header


def _checked_header(data: bytes | None, max_message_bytes: int) -> BatchHeader | None:
    """The header when `data` passes every check of `validate_batch`, in one pass that builds no
    message; None: ask validate_batch, which raises the error Kafka would answer with."""
    if not data or len(data) < HEADER_SIZE or data[MAGIC_OFFSET] != CURRENT_MAGIC:
        return None
    fields = HEADER.unpack_from(data, 0)
    # fields 1, 5, 6, 9, 11, 12: length, attributes, last offset delta, producer id, base
    # sequence, records count; size == len(data) >= HEADER_SIZE implies ensure_valid's minimum length
    size = fields[1] + LOG_OVERHEAD
    if (size != len(data) or size > max_message_bytes
            or fields[5] & CONTROL_BIT or fields[12] != fields[6] + 1 or (fields[9] >= 0 and fields[11] < 0)):
        return None
    if crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]) != fields[4]:
        return None
    return tuple.__new__(BatchHeader, fields)  # BatchHeader(*fields) without its __new__'s argument parsing


def _where(topic: Any, index: int) -> str:
    """A partition's name in messages: made only for one that needs it (an error, a duplicate)."""
    return f"produce to {topic}-{index}"


def _append(part, data: bytes, header: BatchHeader, confirm: bool = True):
    """On the I/O thread: the idempotence check and the append are one step per partition. The
    batch was checked on the event loop (_checked_header / validate_batch): its CRC is not
    computed again (Log.append_validated)."""
    duplicate = part.producers.check(header)
    if duplicate is not None:
        part.confirm_through(duplicate.last_offset)  # cluster mode: only what passed the fence counts
        return duplicate
    return part.append_batch(data, header, confirm=confirm, validated=True)


def _append_all(partitions, batches: list[tuple[Any, bytes, BatchHeader]], deferred: bool) -> list:
    """On the I/O thread, in the request's order: every batch appended, then (cluster mode) the
    appends confirmed together (fsync, fence). One hop to the I/O thread per request, not one per
    partition and another for the confirmation: under load each hop waits for a CPU, and an
    idempotent producer has at most 5 requests in flight per broker, so the round trip bounds
    its throughput. Per batch: its append result (or Duplicate), or the exception that refused it."""
    outcomes: list = []
    for part, data, header in batches:
        try:
            outcomes.append(_append(part, data, header, not deferred))
        except Exception as exc:  # answered for this partition alone
            outcomes.append(exc)
    if deferred and partitions.bucket is None:  # a bucket root's flush tick confirms (await_stored)
        appended = [i for i, o in enumerate(outcomes) if not isinstance(o, (BaseException, Duplicate))]
        for i, failure in zip(appended, partitions.confirm_appends([batches[i][0] for i in appended])):
            if failure is not None:
                outcomes[i] = failure
    return outcomes


async def await_stored(bucket, batches: list, outcomes: list, timeout_s: float) -> list:
    """A bucket root: each appended (or duplicate) batch's outcome once its offsets are in an object
    that passed the fence, or why not (REQUEST_TIMED_OUT at the request's timeout, the store
    down; NOT_LEADER_OR_FOLLOWER when another broker took the root over)."""
    async def stored(part, outcome):
        if isinstance(outcome, BaseException):
            return outcome
        try:
            await bucket.wait_flushed(part, outcome.last_offset + 1, timeout_s)
        except Exception as exc:  # answered for this partition alone
            return exc
        return outcome

    # a client that keeps one request in flight held these records back while the last one waited
    bucket.schedule.records_waiting([header.base_timestamp for (_p, _d, header), outcome in zip(batches, outcomes)
                                     if not isinstance(outcome, (BaseException, Duplicate))])
    return list(await asyncio.gather(*(stored(part, outcome) for (part, _d, _h), outcome in zip(batches, outcomes))))


def _datetime(ms: int | None):
    if ms is None or ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)


def _name_of(broker, topic_id) -> str | None:
    meta = broker.partitions.topic_by_id(topic_id)
    return None if meta is None else meta.name


TXN_V2_PRODUCE_VERSION = 12  # KIP-890 part 2: the partition joins the transaction on its first batch


@REGISTRY.route(ApiKey.PRODUCE, (3, 13))
async def produce(broker: BrokerContext, request: Request[ProduceRequest]):
    body, cls = request.body, request.response_type
    acks = body.acks
    failed = False
    # Cluster mode: the request's appends are confirmed (fsync, fence) together once all are
    # written; until then none is acknowledged or readable.
    # A bucket root: appended now, acknowledged once the flush tick stored them (await_stored).
    bucket = broker.partitions.bucket
    deferred = broker.leadership.clustered or bucket is not None
    batches: list[tuple[Any, bytes, BatchHeader]] = []  # (partition, batch, header) to append, in order
    appending: list[tuple[dict, Any]] = []  # their (response fields, topic as messages name it)
    partitions = broker.partitions
    bound_config, timestamp_bound = None, None  # plain_timestamp_bound of the last partition's config
    produced = 0  # record bytes, for the produce quota
    answers: list[tuple[Any, list[dict]]] = []  # per topic: (its response fields, its partitions')
    if len(body.topic_data) > 1 or (body.topic_data and len(body.topic_data[0].partition_data) > 1):
        # Opened together (librdkafka's usual request, one partition, has nothing to overlap).
        await broker.partitions.open_many(
            (name, pdata.index) for topic in body.topic_data
            if (name := topic.name if getattr(topic, "topic_id", None) is None else _name_of(broker, topic.topic_id))
            for pdata in topic.partition_data)
    # The time the timestamp bounds are judged at: read again after anything this handler awaits.
    now_ms = partitions.clock()
    for topic in body.topic_data:
        topic_id = getattr(topic, "topic_id", None)  # v13+ (KIP-516) names topics by id only
        name = topic.name if topic_id is None else _name_of(broker, topic_id)
        label = name or topic_id
        results = []
        for pdata in topic.partition_data:
            index, data = pdata.index, pdata.records
            if data:
                produced += len(data)
            fields = {"index": index, "error_code": ErrorCode.none, "base_offset": -1, "log_append_time_ms": -1,
                      "log_start_offset": -1, "record_errors": (), "error_message": None}
            results.append(fields)
            try:
                if acks not in (0, 1, -1):
                    raise BrokerError(f"{_where(label, index)}: acks={acks} is not one of 0, 1, -1",
                                      ErrorCode.invalid_required_acks)
                if name is None:
                    raise BrokerError(f"{_where(label, index)}: unknown topic id", ErrorCode.unknown_topic_id)
                # an open partition without a coroutine's await (what `get` returns first too)
                part = partitions.opened(name, index)
                if part is None:
                    part = await partitions.get(name, index)
                    now_ms, bound_config = partitions.clock(), None
                config = part.config
                header = _checked_header(data, config.max_message_bytes) or \
                    validate_batch(data, config.max_message_bytes, _where(label, index))
                if config is not bound_config:  # a topic's partitions share their config object
                    bound_config, timestamp_bound = config, plain_timestamp_bound(config, acks, now_ms)
                if timestamp_bound is None or header.max_timestamp > timestamp_bound:
                    check_append(config, header, data, acks, now_ms, _where(label, index))
                # Only into a partition of the producer's ongoing transaction. In a cluster, once this
                # partition holds the producer's open transaction the coordinator (maybe another
                # broker) was asked already: Kafka's verification guard, asked for a transaction's
                # first batch of a partition only.
                if header.is_transactional and not (broker.leadership.clustered
                                                    and part.txns.is_ongoing(header.producer_id)):
                    if request.api_version >= TXN_V2_PRODUCE_VERSION and body.transactional_id is not None:
                        # A transactions-v2 client adds no partitions itself: Kafka's leader asks
                        # the coordinator (AddPartitionsToTxn v5), here it is one call.
                        await broker.txn.add_partitions(body.transactional_id, header.producer_id,
                                                        header.producer_epoch, [(name, pdata.index)], tv2=True)
                    await broker.txn.verify_produce(body.transactional_id, header.producer_id,
                                                    header.producer_epoch, name, pdata.index)
                    now_ms, bound_config = partitions.clock(), None
            except Exception as exc:
                failed = True
                _refused(fields, exc, _where(label, index))
                continue
            batches.append((part, data, header))
            appending.append((fields, label))
        answers.append((dict(name=name, topic_id=topic_id), results))
    user = request.session.user
    quota = broker.throttle.limits(PRODUCE, user, request.client_id) or \
        broker.throttle.limits(REQUEST, user, request.client_id)
    pipelined = bool(batches) and bucket is None and acks != 0 and not quota
    if pipelined:
        # Queued on the writer thread now, in request order; answered once appended, while the
        # connection reads and queues the next Produce (later.py). A client with a quota is
        # answered before its next request is read, so a throttle mutes it as it always did.
        # A connection cancelled at shutdown leaves its queued appends to run (queue_io), so the
        # log holds a prefix of its requests, never a later one without an earlier one.
        queued = broker.partitions.queue_io(_append_all, broker.partitions, batches, deferred)
    else:
        outcomes = await broker.partitions.run_io(_append_all, broker.partitions, batches, deferred) if batches else []

    # Asked now: a policy that merges refusals into the answer (objects_wanted) is only around
    # while this handler runs, and a later answer is made after that.
    pre_encoded = pre_encoding_allowed()

    def answer(outcomes: list) -> Any:
        failed_append = False
        for (part, _data, header), (fields, label), outcome in zip(batches, appending, outcomes):
            if outcome.__class__ is AppendResult:  # the usual outcome first: one class compare
                part.notify()
                part.messages_in += outcome.record_count
                part.bytes_in += outcome.size
                fields["log_append_time_ms"] = outcome.log_append_time
            elif isinstance(outcome, Duplicate):
                log.info("%s: duplicate batch from producer %d (sequence %d) answered with offset %d",
                         _where(label, fields["index"]), header.producer_id, header.base_sequence,
                         outcome.first_offset)
            else:
                failed_append = True
                _refused(fields, outcome, _where(label, fields["index"]))
                continue
            fields["base_offset"] = outcome.first_offset
            fields["log_start_offset"] = part.log_start_offset
        if acks == 0:
            # No response at all; an error closes the connection, the only signal such a client
            # gets (KafkaApis does the same).
            if failed or failed_append:
                raise CloseConnection(f"acks=0 produce from {request.client_id} failed")
            return None
        # The connection mutes while throttled; the quota's user is the authenticated principal.
        throttle_ms = broker.throttle.record(PRODUCE, user, request.client_id, produced)
        if pre_encoded:  # no policy merges refusals into it: bytes straight from the answers
            return produce_response(request.api_version, [(t["name"] if t["topic_id"] is None else t["topic_id"], parts)
                                                          for t, parts in answers], throttle_ms)
        return _response(cls, answers, throttle_ms)

    if pipelined:
        return Later(queued, answer, appends_pending=True)
    if bucket is not None and acks != 0 and batches:
        # Appended in request order now; answered once stored, while the connection reads on.
        return Later(asyncio.ensure_future(await_stored(bucket, batches, outcomes, body.timeout.total_seconds())),
                     answer)
    return answer(outcomes)


def _response(cls, answers: list[tuple[dict, list[dict]]], throttle_ms: int) -> Any:
    """The answer as kio objects (an authorization policy merges its refusals into them)."""
    topic_cls = nested(cls, "responses")
    part_cls = nested(topic_cls, "partition_responses")
    record_error_cls = nested(part_cls, "record_errors") if has_field(part_cls, "record_errors") else None

    def partition(p: dict) -> Any:
        record_errors = () if record_error_cls is None else tuple(
            make(record_error_cls, batch_index=i, batch_index_error_message=m) for i, m in p["record_errors"])
        return make(part_cls, index=p["index"], error_code=p["error_code"], base_offset=p["base_offset"],
                    log_append_time=_datetime(p["log_append_time_ms"]), log_start_offset=p["log_start_offset"],
                    record_errors=record_errors, error_message=p["error_message"])

    topics = tuple(make(topic_cls, **fields, partition_responses=tuple(partition(p) for p in parts))
                   for fields, parts in answers)
    return make(cls, responses=topics, throttle_time=datetime.timedelta(milliseconds=throttle_ms))


def _refused(fields: dict, exc: BaseException, where: str) -> None:
    """A partition's batch was not appended (or not confirmed): its answer is the error (v8+
    also lists the rejected records)."""
    code = error_code(exc)
    fields.update(error_code=code, error_message=error_message(exc), base_offset=-1, log_append_time_ms=-1,
                  record_errors=tuple(getattr(exc, "record_errors", ())))
    if code == ErrorCode.unknown_server_error:
        log.error("%s failed: %s", where, exc, exc_info=exc)
    elif code != ErrorCode.unknown_topic_or_partition:
        log.info("%s rejected: %s (%s)", where, code.name, error_message(exc))
