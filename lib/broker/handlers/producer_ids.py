"""InitProducerId (22) for idempotent producers (no transactional id).

Transactions (a transactional id, hence the transaction coordinator) are a later issue; such a
request gets INVALID_REQUEST and a log line naming why, instead of a silently wrong answer.
"""

from __future__ import annotations

import datetime
import logging

from kio.schema.errors import ErrorCode

from ..wire import make
from .registry import REGISTRY

log = logging.getLogger(__name__)

_NO_THROTTLE = datetime.timedelta(0)


@REGISTRY.route(22, (0, 5))
async def init_producer_id(broker, request):
    body, cls = request.body, request.response_type
    if body.transactional_id is not None:
        log.warning("InitProducerId with transactional id %r from %s: transactions are not supported yet",
                    body.transactional_id, request.client_id)
        return make(cls, throttle_time=_NO_THROTTLE, error_code=ErrorCode.invalid_request,
                    producer_id=-1, producer_epoch=-1)
    # A fresh id each time: an idempotent producer that restarts (or bumps its epoch after an
    # error, KIP-360) starts a new sequence space, which a new id gives it for free.
    producer_id = await broker.partitions.run_io(broker.producer_ids.next_id)
    return make(cls, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, producer_id=producer_id,
                producer_epoch=0)
