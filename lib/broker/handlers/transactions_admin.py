"""DescribeTransactions (65) and ListTransactions (66): the transaction coordinator's state, read.

Both read the coordinator's cache of `__transaction_state` (broker.txn), which holds only states
already on disk. Dead ids (expiring) are neither listed nor described, as in Kafka.
"""

from __future__ import annotations

import datetime
import re

from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.list_transactions.v2.request import ListTransactionsRequest

from topiclake.segments.batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_TIMESTAMP

from ..api_keys import ApiKey
from ..context import BrokerContext
from ..txn.state import TxnError, TxnMetadata, TxnState
from ..wire import Request, make, nested
from ._common import NO_THROTTLE
from .registry import REGISTRY

_STATES = {s.label: s for s in TxnState}


def _datetime(ms: int) -> datetime.datetime:
    """A kio timestamp; Kafka sends -1 for "none" (kio writes the millisecond before the epoch as -1)."""
    return datetime.datetime.fromtimestamp(max(ms, NO_TIMESTAMP) / 1000, tz=datetime.timezone.utc)


# ============================================================== DescribeTransactions
@REGISTRY.route(ApiKey.DESCRIBE_TRANSACTIONS, (0, 0))
async def describe_transactions(broker: BrokerContext, request: Request[DescribeTransactionsRequest]):
    body, cls = request.body, request.response_type
    state_cls = nested(cls, "transaction_states")
    topic_cls = nested(state_cls, "topics")
    states = []
    for txn_id in body.transactional_ids:
        try:
            m, error = await broker.txn.lookup(txn_id), ErrorCode.transactional_id_not_found
        except TxnError as exc:  # its __transaction_state partition is not served here now
            m, error = None, exc.code
        if m is None or m.state is TxnState.DEAD:
            states.append(make(state_cls, error_code=error, transactional_id=txn_id,
                               transaction_state="", transaction_timeout=datetime.timedelta(0),
                               transaction_start_time=_datetime(NO_TIMESTAMP), producer_id=NO_PRODUCER_ID,
                               producer_epoch=NO_PRODUCER_EPOCH, topics=()))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(m.partitions):
            by_topic.setdefault(topic, []).append(index)
        states.append(make(state_cls, error_code=ErrorCode.none, transactional_id=txn_id,
                           transaction_state=m.state.label,
                           transaction_timeout=datetime.timedelta(milliseconds=m.timeout_ms),
                           transaction_start_time=_datetime(m.start_ms), producer_id=m.producer_id,
                           producer_epoch=m.producer_epoch,
                           topics=tuple(make(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items())))
    return make(cls, throttle_time=NO_THROTTLE, transaction_states=tuple(states))


# ================================================================= ListTransactions
def _listed(m: TxnMetadata, states: set[TxnState], producer_ids: set[int], min_duration_ms: int,
            pattern: re.Pattern | None, now_ms: int) -> bool:
    """Kafka's listTransactionStates filters; the duration counts from the transaction's start."""
    return (m.state is not TxnState.DEAD
            and (not producer_ids or m.producer_id in producer_ids)
            and (not states or m.state in states)
            and (min_duration_ms < 0 or now_ms - m.start_ms > min_duration_ms)
            and (pattern is None or pattern.fullmatch(m.transactional_id) is not None))


@REGISTRY.route(ApiKey.LIST_TRANSACTIONS, (0, 2))
async def list_transactions(broker: BrokerContext, request: Request[ListTransactionsRequest]):
    body, cls = request.body, request.response_type
    state_cls = nested(cls, "transaction_states")
    unknown = tuple(name for name in body.state_filters if name not in _STATES)
    states = {_STATES[name] for name in body.state_filters if name in _STATES}
    if body.state_filters and not states:  # only unknown states asked for: nothing can match
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, unknown_state_filters=unknown,
                    transaction_states=())
    pattern = None
    text = getattr(body, "transactional_id_pattern", None)
    if text:
        try:
            pattern = re.compile(text)
        except re.error:
            return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.invalid_regular_expression,
                        unknown_state_filters=unknown, transaction_states=())
    now_ms = broker.txn.clock()
    producer_ids = set(body.producer_id_filters)
    duration = getattr(body, "duration_filter", -1)
    listed = [m for m in (await broker.txn.transactions()).values()
              if _listed(m, states, producer_ids, duration, pattern, now_ms)]
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, unknown_state_filters=unknown,
                transaction_states=tuple(make(state_cls, transactional_id=m.transactional_id, producer_id=m.producer_id,
                                              transaction_state=m.state.label)
                                         for m in sorted(listed, key=lambda m: m.transactional_id)))
