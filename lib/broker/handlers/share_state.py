"""The share coordinator's APIs (KIP-932), between the brokers of a cluster:
InitializeShareGroupState (83), ReadShareGroupState (84), WriteShareGroupState (85),
DeleteShareGroupState (86) and ReadShareGroupStateSummary (87).

A share-partition leader's persister (`share.persister`) sends them to the broker leading the
key's `__share_group_state` partition when that is another broker; they are served here by the
share coordinator's store (`share.state_store`), key by key, each with its own error: the
coordinator errors (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE) make
the sender look the leader up again and retry; FENCED_LEADER_EPOCH / FENCED_STATE_EPOCH tell a
stale writer to read the state again. As in Kafka's ShareCoordinatorService, a key needs a group
id, a topic id and a partition that exist (DeleteShareGroupState only the first two: it also
cleans up after deleted topics). Inter-broker only: with an authorizer, super users alone (no
policy).
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

from kio.schema.delete_share_group_state.v0.request import DeleteShareGroupStateRequest
from kio.schema.errors import ErrorCode
from kio.schema.initialize_share_group_state.v0.request import InitializeShareGroupStateRequest
from kio.schema.read_share_group_state.v0.request import ReadShareGroupStateRequest
from kio.schema.read_share_group_state_summary.v1.request import ReadShareGroupStateSummaryRequest
from kio.schema.write_share_group_state.v1.request import WriteShareGroupStateRequest

from ..api_keys import ApiKey
from ..context import BrokerContext
from ..errors import BrokerError
from ..share.persisted import UNINITIALIZED, PersistedState
from ..share.state_records import UNKNOWN_COUNT, ShareStateKey, StateBatch
from ..share.state_store import NO_EPOCH
from ..wire import Request, make, nested
from .registry import REGISTRY

log = logging.getLogger(__name__)

Serve = Callable[[ShareStateKey, Any], Awaitable[dict[str, Any]]]


@REGISTRY.route(ApiKey.INITIALIZE_SHARE_GROUP_STATE, (0, 0))
async def initialize_share_group_state(broker: BrokerContext, request: Request[InitializeShareGroupStateRequest]):
    async def serve(key: ShareStateKey, p) -> dict[str, Any]:
        await broker.share.store.initialize(key, p.state_epoch, p.start_offset)
        return {}

    return await _answer(broker, request, serve)


@REGISTRY.route(ApiKey.READ_SHARE_GROUP_STATE, (0, 0))
async def read_share_group_state(broker: BrokerContext, request: Request[ReadShareGroupStateRequest]):
    batch_cls = nested(nested(nested(request.response_type, "results"), "partitions"), "state_batches")

    async def serve(key: ShareStateKey, p) -> dict[str, Any]:
        state = await broker.share.store.read(key, p.leader_epoch)
        if state is None:  # Kafka answers an unknown key as not initialized yet
            return _NO_STATE
        return {"state_epoch": state.state_epoch, "start_offset": state.start_offset, "state_batches": tuple(
            make(batch_cls, first_offset=b.first_offset, last_offset=b.last_offset, delivery_state=b.delivery_state,
                 delivery_count=b.delivery_count) for b in state.batches)}

    return await _answer(broker, request, serve, _NO_STATE)


@REGISTRY.route(ApiKey.WRITE_SHARE_GROUP_STATE, (0, 1))
async def write_share_group_state(broker: BrokerContext, request: Request[WriteShareGroupStateRequest]):
    async def serve(key: ShareStateKey, p) -> dict[str, Any]:
        batches = tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                        for b in p.state_batches)
        await broker.share.store.write_update(
            key, None if p.start_offset == NO_EPOCH else p.start_offset, batches,
            getattr(p, "delivery_complete_count", UNKNOWN_COUNT), state_epoch=p.state_epoch,
            leader_epoch=p.leader_epoch)
        return {}

    return await _answer(broker, request, serve)


@REGISTRY.route(ApiKey.DELETE_SHARE_GROUP_STATE, (0, 0))
async def delete_share_group_state(broker: BrokerContext, request: Request[DeleteShareGroupStateRequest]):
    async def serve(key: ShareStateKey, p) -> dict[str, Any]:
        await broker.share.store.delete([key])
        return {}

    return await _answer(broker, request, serve, topic_must_exist=False)


@REGISTRY.route(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, (0, 1))
async def read_share_group_state_summary(broker: BrokerContext,
                                         request: Request[ReadShareGroupStateSummaryRequest]):
    async def serve(key: ShareStateKey, p) -> dict[str, Any]:
        state: PersistedState | None = broker.share.store.summary(key)
        if state is None:
            return _NO_SUMMARY
        return {"state_epoch": state.state_epoch, "leader_epoch": state.leader_epoch,
                "start_offset": state.start_offset, "delivery_complete_count": state.delivery_complete_count}

    return await _answer(broker, request, serve, _NO_SUMMARY)


_NO_STATE = {"state_epoch": 0, "start_offset": UNINITIALIZED, "state_batches": ()}
_NO_SUMMARY = {"state_epoch": 0, "leader_epoch": 0, "start_offset": UNINITIALIZED,
               "delivery_complete_count": UNKNOWN_COUNT}


async def _answer(broker: BrokerContext, request: Request[Any], serve: Serve, blank: dict[str, Any] | None = None, *,
                  topic_must_exist: bool = True):
    """Serve every (topic id, partition) of the request with `serve(key, partition data)` (the
    partition's response fields beyond its index and error); a refused key answers its error with
    `blank`'s fields."""
    body, cls = request.body, request.response_type
    result_cls = nested(cls, "results")
    part_cls = nested(result_cls, "partitions")
    blank = blank or {}
    results = []
    for topic in body.topics:
        parts = []
        for p in topic.partitions:
            code, message, fields = ErrorCode.none, None, blank
            refused = _refused(broker, body.group_id, topic.topic_id, p.partition, topic_must_exist)
            if refused is not None:
                code, message = refused
            else:
                try:
                    fields = await serve(ShareStateKey(body.group_id, topic.topic_id, p.partition), p)
                except BrokerError as exc:
                    code, message = exc.code, str(exc)
                except Exception as exc:  # logged: a bug, not the sender's fault
                    log.exception("%s of %s:%s:%d failed", type(body).__name__, body.group_id, topic.topic_id,
                                  p.partition)
                    code, message = ErrorCode.unknown_server_error, f"{type(exc).__name__}: {exc}"
            parts.append(make(part_cls, partition=p.partition, error_code=code, error_message=message, **fields))
        results.append(make(result_cls, topic_id=topic.topic_id, partitions=tuple(parts)))
    return make(cls, results=tuple(results))


def _refused(broker: BrokerContext, group_id: str, topic_id, partition: int,
             topic_must_exist: bool) -> tuple[ErrorCode, str] | None:
    """Why a key cannot be served (Kafka's checks of the share coordinator), or None."""
    if not group_id:
        return ErrorCode.invalid_request, "the group id must not be empty"
    if topic_id is None:
        return ErrorCode.invalid_request, "the topic id must not be null"
    if partition < 0:
        return ErrorCode.invalid_request, f"partition {partition} is negative"
    if topic_must_exist:
        meta = broker.partitions.topic_by_id(topic_id)
        if meta is None or partition >= meta.partitions:
            return ErrorCode.unknown_topic_or_partition, f"no partition {partition} of a topic with id {topic_id}"
    return None
