"""Share-group membership (KIP-932): ShareGroupHeartbeat (76) and ShareGroupDescribe (77).
Topics travel as ids on the wire and as names in the coordinator; this handler translates with
the topic registry."""

from __future__ import annotations

from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest

from ..api_keys import ApiKey
from ..context import BrokerContext
from ..group.errors import GroupCoordinatorError
from ..group.share_groups import ASSIGNOR, ShareHeartbeatRequest
from ..wire import Request
from ._common import code, partition_count
from ._coordinators import describe_answer, heartbeat_answer, refused_heartbeat
from .registry import REGISTRY


@REGISTRY.route(ApiKey.SHARE_GROUP_HEARTBEAT, (1, 1))
async def share_group_heartbeat(broker: BrokerContext, request: Request[ShareGroupHeartbeatRequest]):
    body, cls = request.body, request.response_type
    req = ShareHeartbeatRequest(
        group_id=body.group_id, member_id=body.member_id, member_epoch=body.member_epoch, rack_id=body.rack_id,
        subscribed_topics=None if body.subscribed_topic_names is None else tuple(body.subscribed_topic_names),
        client_id=request.client_id or "", client_host=request.client_host)
    try:
        resp = await broker.groups.share_heartbeat(req, lambda t: partition_count(broker, t))
    except GroupCoordinatorError as exc:
        return refused_heartbeat(cls, code(exc.code), str(exc))
    return heartbeat_answer(broker, cls, resp)


@REGISTRY.route(ApiKey.SHARE_GROUP_DESCRIBE, (1, 1))
async def share_group_describe(broker: BrokerContext, request: Request[ShareGroupDescribeRequest]):
    return describe_answer(broker, request.response_type, broker.groups.share_groups(request.body.group_ids),
                           assignor=ASSIGNOR, missing_message=lambda gid, _error: f"Group {gid} not found.")
