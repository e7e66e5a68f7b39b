"""The broker-side consumer protocol (KIP-848): ConsumerGroupHeartbeat (68) and
ConsumerGroupDescribe (69). Topics travel as ids on the wire and as names in the coordinator;
this handler translates with the topic registry."""

from __future__ import annotations

import re2

from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.errors import ErrorCode

from topiclake.security.acls import Operation, ResourceType

from ..api_keys import ApiKey
from ..context import BrokerContext
from ..group.consumer import ConsumerHeartbeatRequest, compiled_regex
from ..group.errors import GroupCoordinatorError, GroupErrorCode as E
from ..security.gate import authorize
from ..wire import Request
from ._common import code, ms, partition_count
from ._coordinators import describe_answer, heartbeat_answer, refused_heartbeat
from .registry import REGISTRY

_CLASSIC_MEMBER, _CONSUMER_MEMBER = 0, 1  # ConsumerGroupDescribe v1 MemberType


def _regex(body) -> str | None:
    """The subscribed regex (None: unchanged, "": none), checked before the coordinator sees it."""
    regex = getattr(body, "subscribed_topic_regex", None)
    if regex:
        compiled_regex(regex)
    return regex


@REGISTRY.route(ApiKey.CONSUMER_GROUP_HEARTBEAT, (0, 1))
async def consumer_group_heartbeat(broker: BrokerContext, request: Request[ConsumerGroupHeartbeatRequest]):
    body, cls = request.body, request.response_type
    owned = None
    if body.topic_partitions is not None:
        owned = {}
        for tp in body.topic_partitions:
            meta = broker.partitions.topic_by_id(tp.topic_id)
            if meta is not None:  # partitions of a deleted topic are simply no longer owned
                owned[meta.name] = frozenset(tp.partitions)
    try:
        req = ConsumerHeartbeatRequest(
            group_id=body.group_id, member_id=body.member_id, member_epoch=body.member_epoch,
            instance_id=body.instance_id, rack_id=body.rack_id, rebalance_timeout_ms=ms(body.rebalance_timeout),
            subscribed_topics=body.subscribed_topic_names, subscribed_regex=_regex(body),
            may_describe=lambda topic: authorize(broker, request, Operation.DESCRIBE, ResourceType.TOPIC, topic),
            server_assignor=body.server_assignor, owned=owned,
            client_id=request.client_id or "", client_host=request.client_host)
        resp = await broker.groups.consumer_heartbeat(req, lambda t: partition_count(broker, t))
    except re2.error as exc:
        return refused_heartbeat(cls, ErrorCode.invalid_regular_expression, str(exc))
    except GroupCoordinatorError as exc:
        return refused_heartbeat(cls, code(exc.code), str(exc))
    return heartbeat_answer(broker, cls, resp)


@REGISTRY.route(ApiKey.CONSUMER_GROUP_DESCRIBE, (0, 1))
async def consumer_group_describe(broker: BrokerContext, request: Request[ConsumerGroupDescribeRequest]):
    def member_fields(group, m, assignment) -> dict:
        return dict(instance_id=m.instance_id, subscribed_topic_regex=m.subscribed_regex,
                    target_assignment=assignment(group.target.get(m.member_id, {})),
                    member_type=_CLASSIC_MEMBER if m.uses_classic_protocol else _CONSUMER_MEMBER)

    def missing_message(gid, error) -> str | None:
        return f"group {gid} is not a consumer group" if error is E.GROUP_ID_NOT_FOUND else None

    return describe_answer(broker, request.response_type, broker.groups.consumer_groups(request.body.group_ids),
                           assignor="range", missing_message=missing_message, member_fields=member_fields)
