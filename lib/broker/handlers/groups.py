"""Classic group membership: FindCoordinator (10), JoinGroup (11), Heartbeat (12),
LeaveGroup (13), SyncGroup (14), DescribeGroups (15), ListGroups (16), DeleteGroups (42).

Thin: decode the kio request into the coordinator's plain types, call the GroupCoordinator
(broker.groups), build the response for the request's version. Whole-request errors of the
service (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE) become the response's error.
"""

from __future__ import annotations

from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_groups.v6.request import DescribeGroupsRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v6.request import FindCoordinatorRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest as KioHeartbeatRequest
from kio.schema.join_group.v9.request import JoinGroupRequest
from kio.schema.leave_group.v5.request import LeaveGroupRequest
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.sync_group.v5.request import SyncGroupRequest

from ..api_keys import ApiKey
from ..constants import AUTHORIZED_OPERATIONS_OMITTED, CoordinatorType
from ..context import BrokerContext
from ..group.api import HeartbeatRequest, JoinRequest, MemberIdentity, Protocol, SyncRequest
from ..group.errors import GroupCoordinatorError
from ..wire import Request, has_field, make, nested
from ._common import NO_THROTTLE, code, ms
from .registry import REGISTRY

_COORDINATOR_TYPES = frozenset(CoordinatorType)


# ================================================================== FindCoordinator
@REGISTRY.route(ApiKey.FIND_COORDINATOR, (0, 6))
async def find_coordinator(broker: BrokerContext, request: Request[FindCoordinatorRequest]):
    """The leader of the key's internal-topic partition coordinates it: `__consumer_offsets` for
    a group, `__transaction_state` for a transactional id, `__share_group_state` for a
    share-partition's state (v4+: batched keys). One broker alone answers itself."""
    body, cls = request.body, request.response_type
    key_type = getattr(body, "key_type", CoordinatorType.GROUP)
    keys = body.coordinator_keys if has_field(type(body), "coordinator_keys") else (body.key,)
    nodes = {b.broker_id: b for b in broker.leadership.brokers(request.session.listener)}
    if key_type == CoordinatorType.GROUP:
        broker.groups.ensure_loading()  # creates __consumer_offsets on first use, as Kafka does
    elif key_type in _COORDINATOR_TYPES and broker.leadership.clustered:
        _runtime(broker, key_type).ensure_topic()  # the key's partition needs a leader to be found
    results = []
    for key in keys:
        node, error, message = None, ErrorCode.none, None
        if key_type not in _COORDINATOR_TYPES:
            error, message = ErrorCode.invalid_request, f"unknown coordinator key type {key_type}"
        elif key_type == CoordinatorType.GROUP and not key:
            error, message = ErrorCode.invalid_request, "group id must not be empty"
        else:
            topic, index = _coordinator_partition(broker, key_type, key)
            current = broker.leadership.leader(topic, index)
            node = nodes.get(current.leader) if current is not None else None
            if node is None:
                error, message = ErrorCode.coordinator_not_available, f"{topic}-{index} has no leader yet"
        results.append((key, node, error, message))
    if has_field(cls, "coordinators"):
        entry = nested(cls, "coordinators")
        return make(cls, throttle_time=NO_THROTTLE, coordinators=tuple(
            make(entry, key=key, node_id=node.broker_id if node else -1, host=node.host if node else "",
                 port=node.port if node else -1, error_code=err, error_message=msg)
            for key, node, err, msg in results))
    _key, node, err, msg = results[0]
    return make(cls, throttle_time=NO_THROTTLE, error_code=err, error_message=msg,
                node_id=node.broker_id if node else -1, host=node.host if node else "", port=node.port if node else -1)


def _runtime(broker: BrokerContext, key_type: int):
    if key_type == CoordinatorType.GROUP:
        return broker.groups.runtime
    if key_type == CoordinatorType.TRANSACTION:
        return broker.txn.runtime
    return broker.share.store.runtime


def _coordinator_partition(broker: BrokerContext, key_type: int, key: str) -> tuple[str, int]:
    """(internal topic, partition) whose leader coordinates `key`."""
    if key_type == CoordinatorType.GROUP:
        return broker.groups.topic.name, broker.groups.partition_for(key)
    if key_type == CoordinatorType.TRANSACTION:
        return broker.txn.topic.name, broker.txn.partition_for(key)
    return broker.share.store.topic.name, broker.share.store.partition_for_coordinator_key(key)


# ========================================================================= JoinGroup
@REGISTRY.route(ApiKey.JOIN_GROUP, (0, 9))
async def join_group(broker: BrokerContext, request: Request[JoinGroupRequest]):
    body, cls = request.body, request.response_type
    req = JoinRequest(
        group_id=body.group_id, member_id=body.member_id, protocol_type=body.protocol_type,
        protocols=tuple(Protocol(p.name, p.metadata) for p in body.protocols),
        session_timeout_ms=ms(body.session_timeout), rebalance_timeout_ms=ms(getattr(body, "rebalance_timeout", None)),
        group_instance_id=getattr(body, "group_instance_id", None), client_id=request.client_id or "",
        client_host=request.client_host, require_known_member_id=request.api_version >= 4,
        reason=getattr(body, "reason", None))
    try:
        resp = await broker.groups.join(req)
    except GroupCoordinatorError as exc:
        return make(cls, throttle_time=NO_THROTTLE, error_code=code(exc.code), generation_id=-1, protocol_type=None,
                    protocol_name=None if request.api_version >= 7 else "", leader="", skip_assignment=False,
                    member_id=body.member_id, members=())
    member_cls = nested(cls, "members")
    members = tuple(make(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata)
                    for m in resp.members)
    protocol_name = resp.protocol_name if resp.protocol_name is not None or request.api_version >= 7 else ""
    return make(cls, throttle_time=NO_THROTTLE, error_code=code(resp.error), generation_id=resp.generation_id,
                protocol_type=resp.protocol_type, protocol_name=protocol_name, leader=resp.leader,
                skip_assignment=resp.skip_assignment, member_id=resp.member_id, members=members)


# ========================================================================= SyncGroup
@REGISTRY.route(ApiKey.SYNC_GROUP, (0, 5))
async def sync_group(broker: BrokerContext, request: Request[SyncGroupRequest]):
    body, cls = request.body, request.response_type
    req = SyncRequest(body.group_id, body.generation_id, body.member_id,
                      tuple((a.member_id, a.assignment) for a in body.assignments),
                      getattr(body, "group_instance_id", None), getattr(body, "protocol_type", None),
                      getattr(body, "protocol_name", None))
    try:
        resp = await broker.groups.sync(req)
        return make(cls, throttle_time=NO_THROTTLE, error_code=code(resp.error), protocol_type=resp.protocol_type,
                    protocol_name=resp.protocol_name, assignment=resp.assignment)
    except GroupCoordinatorError as exc:
        return make(cls, throttle_time=NO_THROTTLE, error_code=code(exc.code), protocol_type=None,
                    protocol_name=None, assignment=b"")


# ========================================================================= Heartbeat
@REGISTRY.route(ApiKey.HEARTBEAT, (0, 4))
async def heartbeat(broker: BrokerContext, request: Request[KioHeartbeatRequest]):
    body, cls = request.body, request.response_type
    req = HeartbeatRequest(body.group_id, body.generation_id, body.member_id, getattr(body, "group_instance_id", None))
    try:
        error = await broker.groups.heartbeat(req)
    except GroupCoordinatorError as exc:
        error = exc.code
    return make(cls, throttle_time=NO_THROTTLE, error_code=code(error))


# ======================================================================== LeaveGroup
@REGISTRY.route(ApiKey.LEAVE_GROUP, (0, 5))
async def leave_group(broker: BrokerContext, request: Request[LeaveGroupRequest]):
    body, cls = request.body, request.response_type
    batched = has_field(type(body), "members")
    members = (tuple(MemberIdentity(m.member_id, m.group_instance_id) for m in body.members) if batched
               else (MemberIdentity(body.member_id),))
    try:
        resp = await broker.groups.leave(body.group_id, members)
    except GroupCoordinatorError as exc:
        return make(cls, throttle_time=NO_THROTTLE, error_code=code(exc.code), members=())
    if not batched:  # v0-v2: the one member's error is the response's error
        error = resp.error if resp.error or not resp.members else resp.members[0].error
        return make(cls, throttle_time=NO_THROTTLE, error_code=code(error))
    member_cls = nested(cls, "members")
    return make(cls, throttle_time=NO_THROTTLE, error_code=code(resp.error), members=tuple(
        make(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=code(m.error))
        for m in resp.members))


# ==================================================================== DescribeGroups
@REGISTRY.route(ApiKey.DESCRIBE_GROUPS, (0, 6))
async def describe_groups(broker: BrokerContext, request: Request[DescribeGroupsRequest]):
    body, cls = request.body, request.response_type
    group_cls = nested(cls, "groups")
    member_cls = nested(group_cls, "members")
    groups = []
    for d in broker.groups.describe(body.groups):
        members = tuple(make(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id,
                             client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                             member_assignment=m.assignment) for m in d.members)
        error, message = code(d.error), None
        if request.api_version >= 6 and error == ErrorCode.none and d.state == "Dead":  # KIP-1043
            error, message = ErrorCode.group_id_not_found, f"Group {d.group_id} not found."
        groups.append(make(group_cls, error_code=error, error_message=message, group_id=d.group_id,
                           group_state=d.state, protocol_type=d.protocol_type, protocol_data=d.protocol,
                           members=members, authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
    return make(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))


# ======================================================================== ListGroups
@REGISTRY.route(ApiKey.LIST_GROUPS, (0, 5))
async def list_groups(broker: BrokerContext, request: Request[ListGroupsRequest]):
    body, cls = request.body, request.response_type
    group_cls = nested(cls, "groups")
    listed = broker.groups.list_groups(getattr(body, "states_filter", ()), getattr(body, "types_filter", ()))
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=tuple(
        make(group_cls, group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state, group_type=kind)
        for g, kind in listed))


# ====================================================================== DeleteGroups
@REGISTRY.route(ApiKey.DELETE_GROUPS, (0, 2))
async def delete_groups(broker: BrokerContext, request: Request[DeleteGroupsRequest]):
    body, cls = request.body, request.response_type
    result_cls = nested(cls, "results")
    results = await broker.groups.delete_groups(body.groups_names)
    return make(cls, throttle_time=NO_THROTTLE, results=tuple(
        make(result_cls, group_id=r.group_id, error_code=code(r.error)) for r in results))
