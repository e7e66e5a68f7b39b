"""Share-group membership (KIP-932): ShareGroupHeartbeat (76) and ShareGroupDescribe (77).
Topics travel as ids on the wire and as names in the coordinator; this handler translates with
the topic registry."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ..api_keys import ApiKey
from ..constants import AUTHORIZED_OPERATIONS_OMITTED
from ..group.errors import GroupCoordinatorError
from ..group.share_groups import ASSIGNOR, ShareHeartbeatRequest
from ..wire import make, nested
from ._common import NO_THROTTLE, code, partition_count, topic_id_of
from ._coordinators import heartbeat_answer, refused_heartbeat
from .registry import REGISTRY


@REGISTRY.route(ApiKey.SHARE_GROUP_HEARTBEAT, (1, 1))
async def share_group_heartbeat(broker, request):
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
async def share_group_describe(broker, request):
    body, cls = request.body, request.response_type
    group_cls = nested(cls, "groups")
    member_cls = nested(group_cls, "members")
    assignment_cls = nested(member_cls, "assignment")
    tp_cls = nested(assignment_cls, "topic_partitions")

    def assignment(parts):
        return make(assignment_cls, topic_partitions=tuple(
            make(tp_cls, topic_id=topic_id_of(broker, name), topic_name=name, partitions=tuple(sorted(ps)))
            for name, ps in sorted(parts.items())))

    groups = []
    for gid, group, error in broker.groups.share_groups(body.group_ids):
        if group is None:
            groups.append(make(group_cls, error_code=code(error), error_message=f"Group {gid} not found.",
                               group_id=gid, group_state="Dead", group_epoch=-1, assignment_epoch=-1,
                               assignor_name="", members=(), authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
            continue
        members = tuple(make(member_cls, member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                             client_id=m.client_id, client_host=m.client_host,
                             subscribed_topic_names=m.subscribed_topics, assignment=assignment(m.assigned))
                        for m in group.members.values())
        groups.append(make(group_cls, error_code=ErrorCode.none, error_message=None, group_id=gid,
                           group_state=group.state, group_epoch=group.group_epoch,
                           assignment_epoch=group.assignment_epoch, assignor_name=ASSIGNOR, members=members,
                           authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
    return make(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))
