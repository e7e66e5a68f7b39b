"""Classic-protocol members of a KIP-848 consumer group (KIP-848's online migration; Kafka's
GroupMetadataManager classicGroup{Join,Sync,Heartbeat,Leave}ToConsumerGroup).

A consumer that still speaks JoinGroup/SyncGroup/Heartbeat may sit in a consumer group beside
members that use ConsumerGroupHeartbeat. The broker's assignor serves both kinds; a classic
member only sees the result through the old requests:

- JoinGroup: the member is created or updated from its embedded subscription (topics, rack, the
  partitions it still owns), the group epoch moves as for a heartbeat, and the member is
  reconciled at once. The answer comes straight away (nothing is parked): generation = its
  member epoch, protocol = its first protocol, no leader work (leader "" and no members).
- SyncGroup: answers the partitions the member owns now, in the assignment version of its
  subscription; REBALANCE_IN_PROGRESS if the group moved on meanwhile.
- Heartbeat: REBALANCE_IN_PROGRESS whenever the member must rejoin to make progress: the group
  epoch moved, it must give partitions up, or the partitions it waits for are free now.
- LeaveGroup: removes it (possibly turning the group back into a classic group: `migration`).

Deadlines, as Kafka's timers: the member's own session timeout; after being told to rejoin it
must JoinGroup within its rebalance timeout, after a JoinGroup it must SyncGroup within it.
"""

from __future__ import annotations

from typing import Callable, Iterable

from topiclake.segments.errors import CorruptRecordError

from .api import (HeartbeatRequest, JoinRequest, JoinResponse, LeaveMemberResult, LeaveResponse, MemberIdentity,
                  SyncRequest, SyncResponse)
from .consumer import ConsumerGroup, ConsumerGroupError, ConsumerGroups, ConsumerMember, MemberState, _minus
from topiclake.protocol.consumer_protocol import (PROTOCOL_TYPE, ConsumerAssignment, assignment_version_for,
                                                  decode_subscription, encode_assignment)
from .errors import GroupErrorCode as E
from .records import ClassicMemberMetadata

Metadata = Callable[[str], int | None]


# ======================================================================== JoinGroup
def join(groups: ConsumerGroups, req: JoinRequest, metadata: Metadata, now_ms: int) -> JoinResponse:
    groups.touch(req.group_id)
    try:
        return _join(groups, groups.groups[req.group_id], req, metadata, now_ms)
    except ConsumerGroupError as exc:
        return JoinResponse(exc.code, req.member_id)


def _join(groups: ConsumerGroups, group: ConsumerGroup, req: JoinRequest, metadata: Metadata,
          now_ms: int) -> JoinResponse:
    if not _supports(group, req):
        raise ConsumerGroupError(E.INCONSISTENT_GROUP_PROTOCOL,
                                 f"group {group.group_id}: member {req.member_id or '(new)'}'s protocols are not "
                                 f"supported by the group's classic members")
    member_id = req.member_id
    if not member_id:
        member_id = groups.new_member_id()
        if req.require_known_member_id and req.group_instance_id is None:
            return JoinResponse(E.MEMBER_ID_REQUIRED, member_id)
    try:
        subscription = decode_subscription(req.protocols[0].metadata)
    except CorruptRecordError as exc:
        raise ConsumerGroupError(E.INCONSISTENT_GROUP_PROTOCOL, f"malformed consumer subscription: {exc}") from None
    member, bump = _member_for_join(group, member_id, req)
    if req.rebalance_timeout_ms >= 0:
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
    elif member.rebalance_timeout_ms < 0:
        member.rebalance_timeout_ms = req.session_timeout_ms  # JoinGroup v0 has no rebalance timeout
    member.instance_id = req.group_instance_id
    member.rack_id = subscription.rack_id
    member.client_id, member.client_host = req.client_id, req.client_host
    member.classic = ClassicMemberMetadata(req.session_timeout_ms,
                                           tuple((p.name, p.metadata) for p in req.protocols))
    topics = tuple(sorted(set(subscription.topics)))
    if topics != member.subscribed_topics:
        member.subscribed_topics, bump = topics, True
    # An eager member gave everything up before joining; a cooperative one lists what it kept.
    owned = {t: frozenset(ps) for t, ps in subscription.owned_partitions if ps}
    groups.advance(group, member, bump, owned, metadata, now_ms)
    member.join_deadline = None
    member.sync_deadline = now_ms + max(member.rebalance_timeout_ms, 0)
    member.session_deadline = now_ms + req.session_timeout_ms
    return JoinResponse(E.NONE, member.member_id, member.member_epoch, PROTOCOL_TYPE, req.protocols[0].name)


def _supports(group: ConsumerGroup, req: JoinRequest) -> bool:
    """Kafka's ConsumerGroup.supportsClassicProtocols: the consumer protocol type, and one
    protocol every other classic member supports too."""
    names = {p.name for p in req.protocols}
    if req.protocol_type != PROTOCOL_TYPE or not names:
        return False
    for m in group.members.values():
        if m.classic is not None and m.member_id != req.member_id:
            names &= {name for name, _ in m.classic.supported_protocols}
    return bool(names)


def _member_for_join(group: ConsumerGroup, member_id: str, req: JoinRequest) -> tuple[ConsumerMember, bool]:
    """The joining member (created, or the static member it replaces); True if it is new."""
    member = group.members.get(member_id)
    static = next((m for m in group.members.values()
                   if req.group_instance_id is not None and m.instance_id == req.group_instance_id), None)
    if static is not None and static is not member:
        if req.member_id:
            raise ConsumerGroupError(E.FENCED_INSTANCE_ID, f"group {group.group_id}: instance "
                                     f"{req.group_instance_id} belongs to member {static.member_id}")
        # A static member came back under a new id: it takes the old one's place and assignment.
        del group.members[static.member_id]
        if static.member_id in group.target:
            group.target[member_id] = group.target.pop(static.member_id)
        static.member_id = member_id
        group.members[member_id] = static
        return static, False
    if member is None:
        member = group.members[member_id] = ConsumerMember(member_id, req.group_instance_id, None, req.client_id,
                                                           req.client_host, (), req.rebalance_timeout_ms)
        return member, True
    return member, False


# ======================================================================== SyncGroup
def sync(groups: ConsumerGroups, req: SyncRequest, now_ms: int) -> SyncResponse:
    try:
        group, member = _classic_member(groups, req.group_id, req.member_id, req.group_instance_id,
                                        req.generation_id)
        first_protocol = member.classic.supported_protocols[0]
        if req.protocol_type is not None and req.protocol_type != PROTOCOL_TYPE:
            raise ConsumerGroupError(E.INCONSISTENT_GROUP_PROTOCOL)
        if req.protocol_name is not None and req.protocol_name != first_protocol[0]:
            raise ConsumerGroupError(E.INCONSISTENT_GROUP_PROTOCOL)
        if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            _must_rejoin(member, now_ms)
            raise ConsumerGroupError(E.REBALANCE_IN_PROGRESS)
    except ConsumerGroupError as exc:
        return SyncResponse(exc.code)
    member.sync_deadline = None
    member.session_deadline = now_ms + member.classic.session_timeout_ms
    assignment = ConsumerAssignment(tuple((t, tuple(sorted(ps))) for t, ps in sorted(member.assigned.items())))
    return SyncResponse(E.NONE, encode_assignment(assignment, assignment_version_for(first_protocol[1])),
                        req.protocol_type, req.protocol_name)


# ======================================================================== Heartbeat
def heartbeat(groups: ConsumerGroups, req: HeartbeatRequest, now_ms: int) -> E:
    try:
        group, member = _classic_member(groups, req.group_id, req.member_id, req.group_instance_id,
                                        req.generation_id)
    except ConsumerGroupError as exc:
        return exc.code
    member.session_deadline = now_ms + member.classic.session_timeout_ms
    if (member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS
            or (member.state is MemberState.UNRELEASED_PARTITIONS and not _waiting_on_others(group, member))):
        _must_rejoin(member, now_ms)
        return E.REBALANCE_IN_PROGRESS
    return E.NONE


def _waiting_on_others(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """Whether a partition the member waits for is still held by another member."""
    pending = _minus(group.target.get(member.member_id, {}), member.assigned)
    return any(group.owner_of(t, p) for t, ps in pending.items() for p in ps)


def _must_rejoin(member: ConsumerMember, now_ms: int) -> None:
    if member.join_deadline is None:
        member.join_deadline = now_ms + max(member.rebalance_timeout_ms, 0)


def _classic_member(groups: ConsumerGroups, group_id: str, member_id: str, instance_id: str | None,
                    generation_id: int) -> tuple[ConsumerGroup, ConsumerMember]:
    group = groups.groups.get(group_id)
    member = _find(group, member_id, instance_id) if group is not None else None
    if member is None or member.classic is None:
        raise ConsumerGroupError(E.UNKNOWN_MEMBER_ID, f"group {group_id}: no classic member {member_id}")
    if generation_id != member.member_epoch:
        raise ConsumerGroupError(E.ILLEGAL_GENERATION, f"group {group_id}: generation {generation_id} is not "
                                 f"member {member_id}'s epoch {member.member_epoch}")
    return group, member


def _find(group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember | None:
    """The member a request names (by instance id for a static member: another member id with
    that instance id is fenced)."""
    if instance_id is None:
        return group.members.get(member_id)
    member = next((m for m in group.members.values() if m.instance_id == instance_id), None)
    if member is not None and member_id and member.member_id != member_id:
        raise ConsumerGroupError(E.FENCED_INSTANCE_ID, f"group {group.group_id}: instance {instance_id} belongs "
                                 f"to member {member.member_id}")
    return member


# ======================================================================= LeaveGroup
def leave(groups: ConsumerGroups, group_id: str, who: Iterable[MemberIdentity]) -> LeaveResponse:
    groups.touch(group_id)
    group = groups.groups[group_id]
    results, leaving = [], []
    for identity in who:
        try:
            member = _find(group, identity.member_id, identity.group_instance_id)
            if member is None or member.classic is None:
                raise ConsumerGroupError(E.UNKNOWN_MEMBER_ID)
            if member not in leaving:
                leaving.append(member)
            error = E.NONE
        except ConsumerGroupError as exc:
            error = exc.code
        results.append(LeaveMemberResult(identity.member_id, identity.group_instance_id, error))
    if leaving:
        groups.remove(group, *leaving)
    return LeaveResponse(E.NONE, tuple(results))
