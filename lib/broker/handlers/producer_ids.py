"""InitProducerId (22): a fresh id for an idempotent producer, or, with a transactional id, the
transaction coordinator's id and (bumped) epoch for it, which fences older instances."""

from __future__ import annotations

import datetime
import logging

from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v5.request import InitProducerIdRequest

from ..api_keys import ApiKey
from ..constants import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from ..context import BrokerContext
from ..wire import Request, make
from ._common import NO_THROTTLE
from ._coordinators import txn_error
from .registry import REGISTRY

log = logging.getLogger(__name__)


def _ms(value) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return int(value)


@REGISTRY.route(ApiKey.INIT_PRODUCER_ID, (0, 5))
async def init_producer_id(broker: BrokerContext, request: Request[InitProducerIdRequest]):
    body, cls = request.body, request.response_type
    if body.transactional_id is None:
        # A fresh id each time: an idempotent producer that restarts (or bumps its epoch after an
        # error, KIP-360) starts a new sequence space, which a new id gives it for free.
        producer_id = await broker.partitions.run_io(broker.producer_ids.next_id)
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, producer_id=producer_id,
                    producer_epoch=0)
    producer_id = getattr(body, "producer_id", NO_PRODUCER_ID)
    producer_epoch = getattr(body, "producer_epoch", NO_PRODUCER_EPOCH)
    # v3+ (KIP-360): a producer that already holds an id asks for a bump of that id's epoch.
    expected = (producer_id, producer_epoch) if producer_id != NO_PRODUCER_ID else None
    try:
        m = await broker.txn.init_producer_id(body.transactional_id, _ms(body.transaction_timeout), expected)
    except Exception as exc:
        return make(cls, throttle_time=NO_THROTTLE, error_code=txn_error(exc, request, fenced_since=4),
                    producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH)
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, producer_id=m.producer_id,
                producer_epoch=m.producer_epoch)
