"""KIP-848's online migration between classic and consumer groups (Kafka's
GroupMetadataManager: convertToConsumerGroup / convertToClassicGroup, and
`group.consumer.migration.policy`).

- Upgrade: a ConsumerGroupHeartbeat joins (epoch 0) a classic group that has members. If the
  policy allows it and the group uses the consumer embedded protocol, the classic group becomes
  a consumer group: same id, group epoch = assignment epoch = the classic generation, every
  classic member kept (its subscription, last assignment as current and target assignment,
  member epoch = the generation, its classic metadata). Parked JoinGroup/SyncGroup requests are
  answered REBALANCE_IN_PROGRESS; the classic members carry on through `consumer_classic` and
  learn the new assignment on their next heartbeat. Otherwise: GROUP_ID_NOT_FOUND with why.
  An empty classic group is simply replaced (Kafka deletes it, whatever the policy).
- Downgrade: the last consumer-protocol member leaves (or is fenced) while classic members
  remain, and the policy allows it (`ConsumerGroups.remove` lists the group in `downgrades`).
  The group becomes a classic group: generation = the group epoch, members with their
  protocols, each member's target assignment as its classic assignment, then a rebalance, so
  the members rejoin and their leader assigns (heartbeats answer REBALANCE_IN_PROGRESS).
  A classic member joining an empty consumer group replaces it (the coordinator does that).

In the log a conversion is the old form's tombstones followed by the new form's records, in one
batch, so a reload rebuilds exactly the converted group. Committed offsets are untouched: they
belong to the group id, not to its form.

The coordinator calls `consumer_heartbeat` and `join` (where the two cores meet) and passes every
call's Result through `finish`, which adds the KIP-848 records and the downgrades it made due.
"""

from __future__ import annotations

import enum
import logging
from typing import Callable

from topiclake.segments.errors import CorruptRecordError, InvalidConfigError

from . import consumer_classic
from .api import JoinRequest, JoinResponse, Protocol, Result
from .classic import ClassicGroups
from .consumer import (ConsumerGroup, ConsumerGroupError, ConsumerGroups, ConsumerHeartbeatRequest,
                       ConsumerHeartbeatResponse, ConsumerMember, MemberState, TopicIds)
from topiclake.protocol.consumer_protocol import (PROTOCOL_TYPE, ConsumerAssignment, assignment_version_for,
                                                  decode_assignment, decode_subscription, encode_assignment)
from .errors import GroupErrorCode as E
from .records import ClassicMemberMetadata
from .state import ClassicGroup, Member

log = logging.getLogger(__name__)
Metadata = Callable[[str], int | None]  # topic -> partition count; None: no such topic


class MigrationPolicy(enum.Enum):
    """group.consumer.migration.policy: which conversions of non-empty groups are allowed
    (conversions of empty groups always are)."""

    BIDIRECTIONAL = "bidirectional"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    DISABLED = "disabled"

    @property
    def upgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.UPGRADE)

    @property
    def downgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.DOWNGRADE)

    @classmethod
    def parse(cls, value: str) -> "MigrationPolicy":
        try:
            return cls(value.strip().lower())
        except ValueError:
            raise InvalidConfigError(f"[groups] consumer_migration_policy must be one of "
                                     f"{', '.join(p.value for p in cls)}, not {value!r}") from None


# ====================================================== where the two cores meet
def consumer_heartbeat(core: ClassicGroups, groups: ConsumerGroups, req: ConsumerHeartbeatRequest,
                       metadata: Metadata, policy: MigrationPolicy, now_ms: int) -> Result[ConsumerHeartbeatResponse]:
    """ConsumerGroupHeartbeat: a joining member (epoch 0) converts the classic group of that id
    first; a heartbeat of a member of a classic group with members is GROUP_ID_NOT_FOUND."""
    converted = Result(None)
    classic = core.groups.get(req.group_id)
    if classic is not None and req.group_id not in groups.groups:
        try:
            if req.member_epoch == 0:
                converted = upgrade(core, groups, req.group_id, metadata, policy, now_ms)
            elif classic.members:
                raise ConsumerGroupError(E.GROUP_ID_NOT_FOUND, f"group {req.group_id} is a classic group")
        except ConsumerGroupError as exc:
            return Result(ConsumerHeartbeatResponse(exc.code, req.member_id or None, error_message=exc.message))
        if req.group_id in groups.groups:
            log.info("group %s: a consumer-protocol member joined: it is a consumer group now", req.group_id)
    return Result(groups.heartbeat(req, metadata, now_ms), converted.records, converted.completions)


def join(core: ClassicGroups, groups: ConsumerGroups, req: JoinRequest, metadata: Metadata,
         now_ms: int) -> Result[JoinResponse]:
    """JoinGroup: a consumer group with members serves a classic member itself; an empty one
    makes way for the classic group the join creates (Kafka deletes it)."""
    group = groups.groups.get(req.group_id)
    if group is not None and group.members:
        return Result(consumer_classic.join(groups, req, metadata, now_ms))
    if group is not None:
        groups.delete(req.group_id)
    return core.join(req, now_ms)


def finish(core: ClassicGroups, groups: ConsumerGroups, result: Result, topic_id: TopicIds,
           now_ms: int) -> Result:
    """What a coordinator call leaves to append before answering: its own records, the records
    of the KIP-848 groups it changed, then the conversions to classic groups it made due."""
    downgraded = []
    for gid in sorted(groups.downgrades):
        log.info("group %s: only classic members are left: it is a classic group again", gid)
        downgraded.append(downgrade(core, groups, gid, now_ms))
    records = (*result.records, *groups.take_records(topic_id), *(r for d in downgraded for r in d.records))
    completions = (*result.completions, *(c for d in downgraded for c in d.completions))
    return Result(result.response, records, completions, result.ticket)


# ========================================================================= upgrade
def upgrade(core: ClassicGroups, groups: ConsumerGroups, group_id: str, metadata: Callable[[str], int | None],
            policy: MigrationPolicy, now_ms: int) -> Result[None]:
    """Make way for a consumer-protocol member joining `group_id`, which the classic core holds.
    Raises ConsumerGroupError(GROUP_ID_NOT_FOUND) when the group may not be converted."""
    classic = core.groups[group_id]
    if not classic.members:
        if classic.protocol_type is None:
            return Result(None)  # a simple group: only offsets, which stay
        _, released = core.release(group_id, now_ms)
        return released
    why = _upgrade_refused(classic, policy)
    if why:
        raise ConsumerGroupError(E.GROUP_ID_NOT_FOUND, f"cannot upgrade classic group {group_id} to a consumer "
                                 f"group: {why}")
    converted = _from_classic(classic, metadata, now_ms)  # before any change: it may refuse
    _, released = core.release(group_id, now_ms)
    groups.adopt(converted)
    return released


def _upgrade_refused(classic: ClassicGroup, policy: MigrationPolicy) -> str:
    if not policy.upgrade_enabled:
        return f"group.consumer.migration.policy is {policy.value}"
    if classic.protocol_type != PROTOCOL_TYPE:
        return f"it does not use the consumer embedded protocol (protocol type {classic.protocol_type!r})"
    return ""


def _from_classic(classic: ClassicGroup, metadata: Callable[[str], int | None], now_ms: int) -> ConsumerGroup:
    """Kafka's ConsumerGroup.fromClassicGroup."""
    generation = classic.generation
    group = ConsumerGroup(classic.group_id, group_epoch=generation, assignment_epoch=generation)
    for m in classic.members.values():
        try:
            subscription = decode_subscription(m.metadata(classic.protocol) or m.protocols[0].metadata)
            assignment = decode_assignment(m.assignment).partitions if m.assignment else ()
        except (CorruptRecordError, IndexError):
            raise ConsumerGroupError(E.GROUP_ID_NOT_FOUND, f"cannot upgrade classic group {classic.group_id} to a "
                                     f"consumer group: member {m.member_id}'s embedded consumer protocol is "
                                     f"malformed") from None
        assigned: dict[str, frozenset[int]] = {}
        for topic, partitions in assignment:
            count = metadata(topic)  # partitions of topics deleted since are dropped
            kept = frozenset(p for p in partitions if count is not None and 0 <= p < count)
            if kept:
                assigned[topic] = assigned.get(topic, frozenset()) | kept
        member = ConsumerMember(
            m.member_id, m.group_instance_id, subscription.rack_id, m.client_id, m.client_host,
            tuple(sorted(set(subscription.topics))), m.rebalance_timeout_ms, member_epoch=generation,
            previous_epoch=generation, state=MemberState.STABLE, assigned=assigned,
            session_deadline=now_ms + m.session_timeout_ms,
            classic=ClassicMemberMetadata(m.session_timeout_ms, tuple((p.name, p.metadata) for p in m.protocols)))
        group.members[m.member_id] = member
        group.target[m.member_id] = dict(assigned)
    return group


# ======================================================================= downgrade
def downgrade(core: ClassicGroups, groups: ConsumerGroups, group_id: str, now_ms: int) -> Result[None]:
    """Turn consumer group `group_id`, whose members all speak the classic protocol now, into a
    classic group that rebalances at once (Kafka's ClassicGroup.fromConsumerGroup)."""
    consumer = groups.release(group_id)
    classic = ClassicGroup(group_id, protocol_type=PROTOCOL_TYPE, generation=consumer.group_epoch,
                           state_timestamp=now_ms)
    for m in consumer.members.values():
        assert m.classic is not None
        classic.add(Member(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                           m.classic.session_timeout_ms, PROTOCOL_TYPE,
                           tuple(Protocol(name, data) for name, data in m.classic.supported_protocols),
                           heartbeat_deadline=now_ms + m.classic.session_timeout_ms))
    classic.protocol = classic.select_protocol()
    assignments = {}
    for member in classic.members.values():
        target = consumer.target.get(member.member_id, {})
        version = assignment_version_for(member.metadata(classic.protocol))
        assignments[member.member_id] = encode_assignment(ConsumerAssignment(tuple(
            (t, tuple(sorted(ps))) for t, ps in sorted(target.items()))), version)
    return core.adopt(classic, assignments, now_ms)
