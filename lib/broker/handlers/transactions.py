"""Transactions (KIP-98): AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
WriteTxnMarkers (27, between brokers of a cluster), TxnOffsetCommit (28). InitProducerId (22)
lives in producer_ids.py; FindCoordinator with CoordinatorType.TRANSACTION in groups.py (the
leader of the id's __transaction_state partition coordinates it).

Thin: each calls the TransactionCoordinator (broker.txn) and turns its TxnError into the
response's code. Transactions v2 (KIP-890 part 2; the transaction.version feature at level 2,
advertised in ApiVersions): EndTxn v5 bumps the producer epoch of every transaction and returns
the producer id and epoch to use next; such a client sends no AddPartitionsToTxn nor
AddOffsetsToTxn: Produce v12+ (produce.py) and TxnOffsetCommit v5 add the partition themselves
(what Kafka's partition leaders and group coordinator do with AddPartitionsToTxn v5).

Kafka renamed the fencing error in KIP-588: clients older than these versions only know
INVALID_PRODUCER_EPOCH, so PRODUCER_FENCED is translated for them (as KafkaApis does).
"""

from __future__ import annotations

import functools
import logging

from kio.schema.add_offsets_to_txn.v4.request import AddOffsetsToTxnRequest
from kio.schema.add_partitions_to_txn.v5.request import AddPartitionsToTxnRequest
from kio.schema.end_txn.v5.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.txn_offset_commit.v5.request import TxnOffsetCommitRequest
from kio.schema.write_txn_markers.v1.request import WriteTxnMarkersRequest

from ..api_keys import ApiKey
from ..constants import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from ..context import BrokerContext
from ..errors import error_code
from ..group.errors import GroupCoordinatorError
from ..markers import write_marker
from ..txn.coordinator import OFFSETS_TOPIC
from ..txn.state import TxnError
from ..wire import Request, make, nested
from ._common import NO_THROTTLE
from ._coordinators import commit_offsets_of, txn_error
from .registry import REGISTRY

log = logging.getLogger(__name__)


# ================================================================= AddPartitionsToTxn
async def _add_partitions(broker, txn_id: str, producer_id: int, epoch: int, topics, verify_only: bool,
                          request, tv2: bool = False) -> dict[tuple[str, int], ErrorCode]:
    """Per-partition codes: unknown partitions fail alone and the rest is OPERATION_NOT_ATTEMPTED,
    as Kafka answers (nothing is added unless every partition exists)."""
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    unknown = set()
    for topic, index in wanted:
        try:
            meta = broker.partitions.topic(topic)
            if not 0 <= index < meta.partitions:
                unknown.add((topic, index))
        except Exception:
            unknown.add((topic, index))
    if unknown:
        log.info("AddPartitionsToTxn for %r: unknown partitions %s", txn_id,
                 ", ".join(f"{t}-{p}" for t, p in sorted(unknown)))
        return {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
                for tp in wanted}
    try:
        if verify_only:
            return await broker.txn.verify_partitions(txn_id, producer_id, epoch, wanted)
        await broker.txn.add_partitions(txn_id, producer_id, epoch, wanted, tv2=tv2)
        code = ErrorCode.none
    except Exception as exc:
        code = txn_error(exc, request, fenced_since=2)
    return {tp: code for tp in wanted}


def _topic_results(topic_cls, codes: dict[tuple[str, int], ErrorCode]):
    part_cls = nested(topic_cls, "results_by_partition")
    by_topic: dict[str, list] = {}
    for (topic, index), code in codes.items():
        by_topic.setdefault(topic, []).append(make(part_cls, partition_index=index, partition_error_code=code))
    return tuple(make(topic_cls, name=name, results_by_partition=tuple(parts)) for name, parts in by_topic.items())


@REGISTRY.route(ApiKey.ADD_PARTITIONS_TO_TXN, (0, 5))
async def add_partitions_to_txn(broker: BrokerContext, request: Request[AddPartitionsToTxnRequest]):
    body, cls = request.body, request.response_type
    if request.api_version <= 3:
        codes = await _add_partitions(broker, body.v3_and_below_transactional_id, body.v3_and_below_producer_id,
                                      body.v3_and_below_producer_epoch, body.v3_and_below_topics, False, request)
        return make(cls, throttle_time=NO_THROTTLE, results_by_topic_v3_and_below=_topic_results(
            nested(cls, "results_by_topic_v3_and_below"), codes))
    # v4+: the broker-to-broker form, several transactions per request (KIP-890 verification);
    # v5 is what a broker sends for a transactions-v2 client (the partition is added for it).
    result_cls = nested(cls, "results_by_transaction")
    topic_cls = nested(result_cls, "topic_results")
    results = []
    for txn in body.transactions:
        codes = await _add_partitions(broker, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
                                      txn.verify_only, request, tv2=request.api_version >= 5)
        results.append(make(result_cls, transactional_id=txn.transactional_id,
                            topic_results=_topic_results(topic_cls, codes)))
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results_by_transaction=tuple(results))


# ==================================================================== AddOffsetsToTxn
@REGISTRY.route(ApiKey.ADD_OFFSETS_TO_TXN, (0, 4))
async def add_offsets_to_txn(broker: BrokerContext, request: Request[AddOffsetsToTxnRequest]):
    body, cls = request.body, request.response_type
    try:
        await broker.txn.add_offsets(body.transactional_id, body.producer_id, body.producer_epoch, body.group_id)
        code = ErrorCode.none
    except Exception as exc:
        code = txn_error(exc, request, fenced_since=2)
    return make(cls, throttle_time=NO_THROTTLE, error_code=code)


# ============================================================================= EndTxn
@REGISTRY.route(ApiKey.END_TXN, (0, 5))
async def end_txn(broker: BrokerContext, request: Request[EndTxnRequest]):
    body, cls = request.body, request.response_type
    producer_id, producer_epoch = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
    try:
        producer_id, producer_epoch = await broker.txn.end_transaction(
            body.transactional_id, body.producer_id, body.producer_epoch, bool(body.committed),
            tv2=request.api_version >= 5)
        code = ErrorCode.none
    except Exception as exc:
        code = txn_error(exc, request, fenced_since=2)
    return make(cls, throttle_time=NO_THROTTLE, error_code=code, producer_id=producer_id,
                producer_epoch=producer_epoch)


# ==================================================================== TxnOffsetCommit
@REGISTRY.route(ApiKey.TXN_OFFSET_COMMIT, (0, 5))
async def txn_offset_commit(broker: BrokerContext, request: Request[TxnOffsetCommitRequest]):
    """The offsets go to the group coordinator as a transactional batch of the producer; they
    become visible when EndTxn's COMMIT marker reaches the group's `__consumer_offsets` partition.
    First the transaction must hold that partition (AddOffsetsToTxn), which KIP-890 checks too;
    v5 (transactions v2) adds it here, the client sends no AddOffsetsToTxn."""
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    offsets = commit_offsets_of(body)
    codes: dict[tuple[str, int], ErrorCode] = {}
    try:
        if request.api_version >= 5:
            await broker.txn.add_offsets(body.transactional_id, body.producer_id, body.producer_epoch,
                                         body.group_id, tv2=True)
        await broker.txn.verify_produce(body.transactional_id, body.producer_id, body.producer_epoch,
                                        OFFSETS_TOPIC, broker.groups.partition_for(body.group_id))
    except TxnError as exc:
        code = exc.code
        if code == ErrorCode.invalid_producer_id_mapping:
            code = ErrorCode.invalid_txn_state  # the offsets partition is not in any transaction of it
        log.info("TxnOffsetCommit for group %s from %r: %s (%s)", body.group_id, body.transactional_id,
                 code.name, exc)
        codes = {(o.topic, o.partition): code for o in offsets}
    if not codes:
        try:
            results = await broker.groups.commit_transactional_offsets(
                body.group_id, body.producer_id, body.producer_epoch, offsets,
                generation_id=getattr(body, "generation_id", -1), member_id=getattr(body, "member_id", ""),
                group_instance_id=getattr(body, "group_instance_id", None))
            codes = {(r.topic, r.partition): ErrorCode(int(r.error)) for r in results}
        except GroupCoordinatorError as exc:
            codes = {(o.topic, o.partition): ErrorCode(int(exc.code)) for o in offsets}
    by_topic: dict[str, list] = {}
    for (topic, index), code in codes.items():
        by_topic.setdefault(topic, []).append(make(part_cls, partition_index=index, error_code=code))
    return make(cls, throttle_time=NO_THROTTLE,
                topics=tuple(make(topic_cls, name=name, partitions=tuple(parts)) for name, parts in by_topic.items()))


# =================================================================== WriteTxnMarkers
@REGISTRY.route(ApiKey.WRITE_TXN_MARKERS, (1, 1))
async def write_txn_markers(broker: BrokerContext, request: Request[WriteTxnMarkersRequest]):
    """A transaction coordinator on another broker (cluster mode) ends a transaction on the
    partitions this broker leads: the COMMIT/ABORT marker is appended here (into
    `__consumer_offsets` through the group coordinator, which applies it to the pending
    offsets). Per partition: NOT_LEADER_OR_FOLLOWER when it moved, so the coordinator retries
    with its new leader. Inter-broker only: with an authorizer, super users alone (no policy)."""
    body, cls = request.body, request.response_type
    result_cls = nested(cls, "markers")
    topic_cls = nested(result_cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    results = []
    for marker in body.markers:
        topics = []
        for topic in marker.topics:
            parts = []
            for index in topic.partition_indexes:
                try:
                    await _write_marker(broker, marker, topic.name, index)
                    code = ErrorCode.none
                except Exception as exc:
                    code = error_code(exc) if not isinstance(exc, GroupCoordinatorError) else ErrorCode(int(exc.code))
                    if code == ErrorCode.unknown_server_error:
                        log.exception("WriteTxnMarkers to %s-%d failed", topic.name, index)
                parts.append(make(part_cls, partition_index=index, error_code=code))
            topics.append(make(topic_cls, name=topic.name, partitions=tuple(parts)))
        results.append(make(result_cls, producer_id=marker.producer_id, topics=tuple(topics)))
    return make(cls, markers=tuple(results))


async def _write_marker(broker: BrokerContext, marker, topic: str, index: int) -> None:
    commit = bool(marker.transaction_result)
    if topic == OFFSETS_TOPIC:
        await broker.groups.complete_transaction(marker.producer_id, marker.producer_epoch, commit,
                                                 coordinator_epoch=marker.coordinator_epoch, partitions=[index])
        return
    part = await broker.partitions.get(topic, index)
    await broker.partitions.run_io(functools.partial(
        write_marker, part, marker.producer_id, marker.producer_epoch, commit, broker.partitions.clock(),
        coordinator_epoch=marker.coordinator_epoch))
    part.notify()
