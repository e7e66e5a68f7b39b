"""The classic-protocol group coordinator (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit/Fetch/Delete, DescribeGroups, ListGroups, DeleteGroups), pure and deterministic:
no I/O, no clock — every call takes `now_ms`. One instance serves the groups of one
`__consumer_offsets` partition (Kafka's coordinator shard).

How a handler uses it (the asyncio side stays trivial):

    result = coordinator.join(request, now_ms)          # every call returns a Result
    if result.response is None:                         # parked until the rebalance moves on
        waiters[result.ticket] = loop.create_future()   # register before awaiting anything
    await append(partition, result.records)             # records first ...
    for c in result.completions:                        # ... then answers, incl. earlier parked
        waiters.pop(c.ticket).set_result(c.response)
    return result.response or await waiters[result.ticket]

and a timer task calls `tick(now_ms)` (heartbeat expiry, rebalance and sync timeouts; sleep
until `next_deadline_ms()`) and `expire_offsets(now_ms)` (offsets.retention.check.interval.ms)
and handles their Results the same way. Calls must not interleave with an append in flight
(one asyncio.Lock per partition), so no answer goes out before its records are in the log. If
an append fails, reload the partition: state is only what the log says.

One path for "do" and "recover": every persistent change (offset commits and tombstones, the
group metadata written when a generation's assignment is set, when a group becomes Empty, when
a static member is replaced, when a group is deleted) is made by building the record and
passing it to `replay`; loading `__consumer_offsets` is `replay_bytes` over its records from
the start. Transient state (a rebalance in progress) is never written, as in Kafka: after a
reload such a group is back at its last persisted generation.

Kafka behaviour kept (GroupCoordinator / GroupMetadataManager): MEMBER_ID_REQUIRED for v4+
joins, static membership replacing the old member id (fencing its parked requests), the
initial rebalance delay for a group that was Empty, the join phase completing when every
member rejoined or the rebalance timeout passed (members that did not rejoin are removed),
generation + 1, protocol chosen by vote, leader = first member joined, the pending-sync
timeout, session expiry of members not parked in a join/sync, offset retention rules.
One deviation: a member that sends a second JoinGroup while its first is parked gets
REBALANCE_IN_PROGRESS for the first (Kafka drops that future unanswered).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Callable, Iterable

from topiclake.segments.batch import NO_PRODUCER_ID

from .api import (DescribedMember, GroupDescription, GroupResult, HeartbeatRequest, JoinMember, JoinRequest,
                  JoinResponse, LeaveMemberResult, LeaveResponse, ListedGroup, MemberIdentity, Result, SyncRequest,
                  SyncResponse)
from .errors import GroupCoordinatorError, GroupErrorCode as E
from .offsets import OffsetsMixin
from .op import Op
from .records import (CoordinatorRecord, GroupMetadataKey, OffsetCommitKey, UnknownKey, decode_record,
                      group_metadata_record, offset_commit_record)
from .state import ClassicGroup, GroupState, Member

S = GroupState


@dataclass(frozen=True, slots=True)
class ClassicGroupSettings:
    """The broker-wide settings the classic core applies (from `[groups]`: Kafka's group.* and
    offsets.* broker properties). Per-group overrides are `group_configs.GroupConfigs`."""

    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    max_size: int = 2**31 - 1
    new_member_join_timeout_ms: int = 300_000  # GroupCoordinator.NewMemberJoinTimeoutMs
    offsets_retention_ms: int = 10080 * 60_000
    offset_metadata_max_bytes: int = 4096


class ClassicGroups(OffsetsMixin):
    """The classic groups and the offsets of one `__consumer_offsets` partition (a pure core);
    the offset calls come from OffsetsMixin."""

    def __init__(self, config: ClassicGroupSettings = ClassicGroupSettings(),
                 new_member_suffix: Callable[[], str] = lambda: str(uuid.uuid4())):
        self.config = config
        self.groups: dict[str, ClassicGroup] = {}
        self._init_offsets()
        self._new_member_suffix = new_member_suffix
        self._next_ticket = 0

    def _ticket(self) -> int:
        self._next_ticket += 1
        return self._next_ticket

    # ============================================================== replay (live + load)
    def replay(self, record: CoordinatorRecord, now_ms: int, producer_id: int = NO_PRODUCER_ID) -> None:
        """Apply one record; `producer_id` >= 0 when it came in a transactional batch."""
        key, value = record.key, record.value
        if isinstance(key, OffsetCommitKey):
            self._replay_offset(record, now_ms, producer_id)
        elif isinstance(key, GroupMetadataKey):
            if value is None:
                group = self.groups.pop(key.group, None)
                if group is not None:
                    group.state = S.DEAD
                    if group.offsets:
                        # Offsets outlive the group's metadata (Kafka keeps them apart): after a
                        # conversion to a KIP-848 group they stay here, as a simple group's.
                        self.groups[key.group] = ClassicGroup(key.group, offsets=group.offsets)
                return
            group = self.groups.get(key.group)
            if group is None:
                group = self.groups[key.group] = ClassicGroup(key.group)
            group.apply_value(value, now_ms)

    def replay_bytes(self, key: bytes | None, value: bytes | None, now_ms: int,
                     producer_id: int = NO_PRODUCER_ID) -> None:
        """Load one record of the partition (in log order); unknown record types are skipped."""
        record = decode_record(key, value)
        if not isinstance(record, UnknownKey):
            self.replay(record, now_ms, producer_id)

    # ======================================================================== JoinGroup
    def join(self, req: JoinRequest, now_ms: int) -> Result[JoinResponse]:
        op, ticket = Op(self, now_ms), self._ticket()
        created = req.group_id not in self.groups
        try:
            group = self._join(op, ticket, req)
            self._maybe_complete_join(op, group)
        except GroupCoordinatorError as exc:
            if created:
                self._drop_if_unused(req.group_id)
            op.complete(ticket, JoinResponse(exc.code, req.member_id))
        return op.result(ticket=ticket)

    def _join(self, op: Op, ticket: int, req: JoinRequest) -> ClassicGroup:
        cfg = self.config
        if not req.group_id:
            raise GroupCoordinatorError(E.INVALID_GROUP_ID)
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            raise GroupCoordinatorError(E.INVALID_SESSION_TIMEOUT)
        new_member = req.member_id == ""
        group = self.groups.get(req.group_id)
        if group is None:
            if not new_member:
                raise GroupCoordinatorError(E.UNKNOWN_MEMBER_ID)
            group = self.groups[req.group_id] = ClassicGroup(req.group_id, state_timestamp=op.now)
        if group.state is S.DEAD:
            raise GroupCoordinatorError(E.COORDINATOR_NOT_AVAILABLE)
        if not group.supports_protocols(req.protocol_type, {p.name for p in req.protocols}):
            raise GroupCoordinatorError(E.INCONSISTENT_GROUP_PROTOCOL)
        if new_member:
            self._join_new_member(op, ticket, group, req)
        else:
            self._join_known_member(op, ticket, group, req)
        return group

    def _join_new_member(self, op: Op, ticket: int, group: ClassicGroup, req: JoinRequest) -> None:
        old_id = group.static_member_id(req.group_instance_id)
        if old_id is None and len(group.members) + len(group.pending_members) >= self.config.max_size:
            raise GroupCoordinatorError(E.GROUP_MAX_SIZE_REACHED)
        new_id = f"{req.group_instance_id or req.client_id}-{self._new_member_suffix()}"
        if old_id is not None:
            self._rejoin_static_member(op, ticket, group, req, old_id, new_id)
        elif req.group_instance_id is None and req.require_known_member_id:
            # The client must come back with this id; until then it only holds a place.
            group.pending_members[new_id] = op.now + req.session_timeout_ms
            op.complete(ticket, JoinResponse(E.MEMBER_ID_REQUIRED, new_id))
        else:
            self._add_member_and_rebalance(op, ticket, group, req, new_id)

    def _join_known_member(self, op: Op, ticket: int, group: ClassicGroup, req: JoinRequest) -> None:
        if req.member_id in group.pending_members:
            del group.pending_members[req.member_id]
            self._add_member_and_rebalance(op, ticket, group, req, req.member_id)
            return
        if group.is_static_member_fenced(req.member_id, req.group_instance_id):
            raise GroupCoordinatorError(E.FENCED_INSTANCE_ID)
        member = group.members.get(req.member_id)
        if member is None or group.state in (S.EMPTY, S.DEAD):
            raise GroupCoordinatorError(E.UNKNOWN_MEMBER_ID)
        unchanged = member.matches(req.protocols)
        if group.state is S.COMPLETING_REBALANCE and unchanged:
            # A retry of a join that already completed: answer it again.
            op.complete(ticket, self._join_response(group, member, with_members=group.leader == member.member_id))
        elif group.state is S.STABLE and unchanged and group.leader != member.member_id:
            op.complete(ticket, self._join_response(group, member, with_members=False))
        else:
            # The leader rejoining a Stable group asks for a new assignment (e.g. metadata changed).
            self._update_member_and_rebalance(op, ticket, group, member, req)

    def _rejoin_static_member(self, op: Op, ticket: int, group: ClassicGroup, req: JoinRequest,
                              old_id: str, new_id: str) -> None:
        old = group.members[old_id]
        changed = (group.protocol is not None
                   and old.metadata(group.protocol) != next((p.metadata for p in req.protocols
                                                             if p.name == group.protocol), None))
        # Fence whoever still waits under the old id (a zombie with the same instance id).
        self._fail_parked(op, old, E.FENCED_INSTANCE_ID)
        member = group.replace_member_id(old_id, new_id)
        if group.state is S.STABLE and not changed:
            self._update_member(member, req)
            op.emit(group_metadata_record(group.group_id, group.to_value(op.now)))
            is_leader = group.leader == new_id
            op.complete(ticket, self._join_response(group, member, with_members=is_leader, skip=is_leader))
        else:
            self._update_member_and_rebalance(op, ticket, group, member, req)

    def _add_member_and_rebalance(self, op: Op, ticket: int, group: ClassicGroup, req: JoinRequest,
                                  member_id: str) -> None:
        member = Member(
            member_id, req.group_instance_id, req.client_id, req.client_host,
            self._rebalance_timeout(req), req.session_timeout_ms, req.protocol_type, req.protocols,
            join_ticket=ticket, is_new=True,
            heartbeat_deadline=op.now + self.config.new_member_join_timeout_ms)
        if group.state is S.PREPARING_REBALANCE and group.generation == 0:
            group.new_member_added = True  # extends the initial delay
        group.add(member)
        self._maybe_prepare_rebalance(op, group)

    @staticmethod
    def _rebalance_timeout(req: JoinRequest) -> int:
        return req.session_timeout_ms if req.rebalance_timeout_ms < 0 else req.rebalance_timeout_ms

    def _update_member(self, member: Member, req: JoinRequest) -> None:
        member.protocols = req.protocols
        member.rebalance_timeout_ms = self._rebalance_timeout(req)
        member.session_timeout_ms = req.session_timeout_ms

    def _update_member_and_rebalance(self, op: Op, ticket: int, group: ClassicGroup, member: Member,
                                     req: JoinRequest) -> None:
        if member.join_ticket is not None:
            op.complete(member.join_ticket, JoinResponse(E.REBALANCE_IN_PROGRESS, member.member_id))
        self._update_member(member, req)
        member.join_ticket = ticket
        self._maybe_prepare_rebalance(op, group)

    def _join_response(self, group: ClassicGroup, member: Member, *, with_members: bool,
                       skip: bool = False) -> JoinResponse:
        members = tuple(JoinMember(m.member_id, m.group_instance_id, m.metadata(group.protocol))
                        for m in group.members.values()) if with_members else ()
        return JoinResponse(E.NONE, member.member_id, group.generation, group.protocol_type, group.protocol,
                            group.leader or "", members, skip)

    # ============================================================= rebalance mechanics
    def _maybe_prepare_rebalance(self, op: Op, group: ClassicGroup) -> None:
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY):
            self._prepare_rebalance(op, group)

    def _prepare_rebalance(self, op: Op, group: ClassicGroup) -> None:
        if group.state is S.COMPLETING_REBALANCE:
            # The assignment of this generation will never be used.
            for m in group.members.values():
                m.assignment = b""
                if m.sync_ticket is not None:
                    op.complete(m.sync_ticket, SyncResponse(E.REBALANCE_IN_PROGRESS))
                    m.sync_ticket = None
        group.pending_sync.clear()
        group.sync_deadline = None
        timeout = group.rebalance_timeout_ms()
        if group.state is S.EMPTY:
            delay = min(self.config.initial_rebalance_delay_ms, timeout)
            group.initial_delay, group.new_member_added = True, False
            group.delay_remaining_ms = max(timeout - self.config.initial_rebalance_delay_ms, 0)
            group.join_deadline = op.now + delay
        else:
            group.initial_delay = False
            group.join_deadline = op.now + timeout
        group.transition(S.PREPARING_REBALANCE, op.now)

    def _maybe_complete_join(self, op: Op, group: ClassicGroup) -> None:
        if group.state is not S.PREPARING_REBALANCE or group.join_deadline is None:
            return
        if group.initial_delay:
            if op.now < group.join_deadline:
                return
            if group.new_member_added and group.delay_remaining_ms > 0:
                delay = min(self.config.initial_rebalance_delay_ms, group.delay_remaining_ms)
                group.new_member_added = False
                group.delay_remaining_ms = max(group.delay_remaining_ms - delay, 0)
                group.join_deadline = op.now + delay
                return
        elif not group.all_joined() and op.now < group.join_deadline:
            return
        self._complete_join(op, group)

    def _complete_join(self, op: Op, group: ClassicGroup) -> None:
        group.join_deadline, group.initial_delay = None, False
        for member in [m for m in group.members.values() if m.join_ticket is None]:
            self._fail_parked(op, member, E.UNKNOWN_MEMBER_ID)
            group.remove(member.member_id)  # did not rejoin within the rebalance timeout
        leader = group.members.get(group.leader) if group.leader else None
        if leader is None or leader.join_ticket is None:
            group.leader = next(iter(group.members), None)
        if not group.members:
            group.generation += 1
            group.protocol = None
            op.emit(group_metadata_record(group.group_id, group.to_value(op.now)))  # -> Empty
            return
        group.generation += 1
        group.protocol = group.select_protocol()
        group.subscribed_topics = group.compute_subscribed_topics()
        group.transition(S.COMPLETING_REBALANCE, op.now)
        for m in group.members.values():
            op.complete(m.join_ticket, self._join_response(group, m, with_members=m.member_id == group.leader))
            m.join_ticket, m.is_new = None, False
            m.heartbeat_deadline = op.now + m.session_timeout_ms
        group.pending_sync = set(group.members)
        group.sync_deadline = op.now + group.rebalance_timeout_ms()

    def _fail_parked(self, op: Op, member: Member, error: E) -> None:
        if member.join_ticket is not None:
            op.complete(member.join_ticket, JoinResponse(error, member.member_id))
        if member.sync_ticket is not None:
            op.complete(member.sync_ticket, SyncResponse(error))
        member.join_ticket = member.sync_ticket = None

    def _remove_member_and_rebalance(self, op: Op, group: ClassicGroup, member: Member) -> None:
        self._fail_parked(op, member, E.UNKNOWN_MEMBER_ID)
        group.remove(member.member_id)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(op, group)
        # Kafka's DelayedJoin is tried at once: with the last member gone the group is Empty now.
        self._maybe_complete_join(op, group)

    # ======================================================================== SyncGroup
    def sync(self, req: SyncRequest, now_ms: int) -> Result[SyncResponse]:
        op, ticket = Op(self, now_ms), self._ticket()
        try:
            self._sync(op, ticket, req)
        except GroupCoordinatorError as exc:
            op.complete(ticket, SyncResponse(exc.code))
        return op.result(ticket=ticket)

    def _sync(self, op: Op, ticket: int, req: SyncRequest) -> None:
        group, member = self._validate_member(req.group_id, req.member_id, req.group_instance_id,
                                              req.generation_id)
        if ((req.protocol_type is not None and req.protocol_type != group.protocol_type)
                or (req.protocol_name is not None and req.protocol_name != group.protocol)):
            raise GroupCoordinatorError(E.INCONSISTENT_GROUP_PROTOCOL)
        if group.state is S.EMPTY:
            raise GroupCoordinatorError(E.UNKNOWN_MEMBER_ID)
        if group.state is S.PREPARING_REBALANCE:
            raise GroupCoordinatorError(E.REBALANCE_IN_PROGRESS)
        group.pending_sync.discard(member.member_id)
        if group.state is S.STABLE:
            member.heartbeat_deadline = op.now + member.session_timeout_ms
            op.complete(ticket, self._sync_response(group, member))
            return
        if member.sync_ticket is not None:
            op.complete(member.sync_ticket, SyncResponse(E.REBALANCE_IN_PROGRESS))
        member.sync_ticket = ticket
        if member.member_id == group.leader:
            given = dict(req.assignments)
            assignments = {mid: given.get(mid, b"") for mid in group.members}
            op.emit(group_metadata_record(group.group_id, group.to_value(op.now, assignments)))  # -> Stable
            for m in group.members.values():
                if m.sync_ticket is not None:
                    op.complete(m.sync_ticket, self._sync_response(group, m))
                    m.sync_ticket = None
                    m.heartbeat_deadline = op.now + m.session_timeout_ms

    @staticmethod
    def _sync_response(group: ClassicGroup, member: Member) -> SyncResponse:
        return SyncResponse(E.NONE, member.assignment, group.protocol_type, group.protocol)

    def _validate_member(self, group_id: str, member_id: str, group_instance_id: str | None,
                         generation_id: int) -> tuple[ClassicGroup, Member]:
        """The checks shared by SyncGroup and Heartbeat, in Kafka's order."""
        group = self.groups.get(group_id)
        if group is None:
            raise GroupCoordinatorError(E.UNKNOWN_MEMBER_ID)
        if group.state is S.DEAD:
            raise GroupCoordinatorError(E.COORDINATOR_NOT_AVAILABLE)
        if group.is_static_member_fenced(member_id, group_instance_id):
            raise GroupCoordinatorError(E.FENCED_INSTANCE_ID)
        member = group.members.get(member_id)
        if member is None:
            raise GroupCoordinatorError(E.UNKNOWN_MEMBER_ID)
        if generation_id != group.generation:
            raise GroupCoordinatorError(E.ILLEGAL_GENERATION)
        return group, member

    # ======================================================================== Heartbeat
    def heartbeat(self, req: HeartbeatRequest, now_ms: int) -> Result[E]:
        try:
            group, member = self._validate_member(req.group_id, req.member_id, req.group_instance_id,
                                                  req.generation_id)
        except GroupCoordinatorError as exc:
            return Result(exc.code)
        if group.state is S.EMPTY:
            return Result(E.UNKNOWN_MEMBER_ID)
        member.heartbeat_deadline = now_ms + member.session_timeout_ms
        return Result(E.REBALANCE_IN_PROGRESS if group.state is S.PREPARING_REBALANCE else E.NONE)

    # ======================================================================= LeaveGroup
    def leave(self, group_id: str, members: Iterable[MemberIdentity], now_ms: int) -> Result[LeaveResponse]:
        op = Op(self, now_ms)
        members = tuple(members)
        group = self.groups.get(group_id)
        if group is None:
            return op.result(LeaveResponse(E.NONE, tuple(
                LeaveMemberResult(m.member_id, m.group_instance_id, E.UNKNOWN_MEMBER_ID) for m in members)))
        if group.state is S.DEAD:
            return op.result(LeaveResponse(E.COORDINATOR_NOT_AVAILABLE))
        results = [LeaveMemberResult(m.member_id, m.group_instance_id, self._leave_one(op, group, m))
                   for m in members]
        return op.result(LeaveResponse(E.NONE, tuple(results)))

    def _leave_one(self, op: Op, group: ClassicGroup, who: MemberIdentity) -> E:
        member_id = who.member_id
        if who.group_instance_id is not None:
            member_id = group.static_member_id(who.group_instance_id)
            if member_id is None:
                return E.UNKNOWN_MEMBER_ID
            if who.member_id and who.member_id != member_id:
                return E.FENCED_INSTANCE_ID
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            self._maybe_complete_join(op, group)
            return E.NONE
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        self._remove_member_and_rebalance(op, group, member)
        return E.NONE

    # ============================================================================ timers
    def tick(self, now_ms: int) -> Result[None]:
        """Expire pending members, sessions, pending syncs, rebalance delays and timeouts."""
        op = Op(self, now_ms)
        for group in list(self.groups.values()):
            for member_id, deadline in list(group.pending_members.items()):
                if now_ms >= deadline:
                    del group.pending_members[member_id]
            for member in list(group.members.values()):
                if member.member_id in group.members and self._session_expired(member, now_ms):
                    self._remove_member_and_rebalance(op, group, member)
            if group.sync_deadline is not None and now_ms >= group.sync_deadline:
                group.sync_deadline = None
                stragglers = [group.members[mid] for mid in group.pending_sync if mid in group.members]
                if stragglers and group.state in (S.COMPLETING_REBALANCE, S.STABLE):
                    for member in stragglers:
                        self._fail_parked(op, member, E.UNKNOWN_MEMBER_ID)
                        group.remove(member.member_id)
                    self._prepare_rebalance(op, group)
            self._maybe_complete_join(op, group)
        return op.result()

    @staticmethod
    def _session_expired(member: Member, now_ms: int) -> bool:
        if now_ms < member.heartbeat_deadline:
            return False
        if member.is_new:
            return True  # joined but never completed a join phase within the new-member timeout
        # A member parked in JoinGroup/SyncGroup cannot heartbeat: the rebalance timeout governs it.
        return member.join_ticket is None and member.sync_ticket is None

    def next_deadline_ms(self) -> int | None:
        """The earliest time `tick` has something to do (None: nothing scheduled)."""
        deadlines = []
        for g in self.groups.values():
            deadlines += g.pending_members.values()
            deadlines += (m.heartbeat_deadline for m in g.members.values())
            deadlines += (d for d in (g.join_deadline, g.sync_deadline) if d is not None)
        return min(deadlines, default=None)

    # ======================================================= KIP-848 online migration
    def release(self, group_id: str, now_ms: int) -> tuple[ClassicGroup, Result[None]]:
        """The group becomes a consumer group (`migration.upgrade`): parked JoinGroup/SyncGroup
        requests get REBALANCE_IN_PROGRESS (the members rejoin the new group) and its metadata is
        tombstoned; its offsets stay. Returns the group as it was, to convert from."""
        op = Op(self, now_ms)
        group = self.groups[group_id]
        for member in group.members.values():
            self._fail_parked(op, member, E.REBALANCE_IN_PROGRESS)
        op.emit(group_metadata_record(group_id, None))
        return group, op.result()

    def adopt(self, group: ClassicGroup, assignments: dict[str, bytes], now_ms: int) -> Result[None]:
        """A consumer group became this classic group (`migration.downgrade`): persist it with the
        assignments its members hold, then rebalance so they rejoin as a classic group. The
        offsets of the group id are kept."""
        op = Op(self, now_ms)
        held = self.groups.get(group.group_id)
        if held is not None:
            group.offsets = held.offsets
        self.groups[group.group_id] = group
        op.emit(group_metadata_record(group.group_id, group.to_value(now_ms, assignments)))
        self._prepare_rebalance(op, group)
        return op.result()

    # ===================================================== Describe, List, DeleteGroups
    def describe(self, group_ids: Iterable[str]) -> tuple[GroupDescription, ...]:
        return tuple(self._describe(gid) for gid in group_ids)

    def _describe(self, group_id: str) -> GroupDescription:
        group = self.groups.get(group_id)
        if group is None:
            return GroupDescription(group_id, E.NONE, S.DEAD.value, "", "")
        stable = group.state is S.STABLE
        members = tuple(
            DescribedMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            m.metadata(group.protocol) if stable else b"", m.assignment if stable else b"")
            for m in group.members.values())
        return GroupDescription(group_id, E.NONE, group.state.value, group.protocol_type or "",
                                (group.protocol or "") if stable else "", members)

    def list_groups(self, states: Iterable[str] = ()) -> tuple[ListedGroup, ...]:
        wanted = {s.lower() for s in states}
        return tuple(ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
                     for g in self.groups.values() if not wanted or g.state.value.lower() in wanted)

    def delete_groups(self, group_ids: Iterable[str], now_ms: int) -> Result[tuple[GroupResult, ...]]:
        op = Op(self, now_ms)
        results = []
        for gid in group_ids:
            group = self.groups.get(gid)
            if group is None or group.state is S.DEAD:
                error = E.GROUP_ID_NOT_FOUND
            elif group.state is not S.EMPTY:
                error = E.NON_EMPTY_GROUP
            else:
                error = E.NONE
                self._delete_group(op, group)
            results.append(GroupResult(gid, error))
        return op.result(tuple(results))

    def _delete_group(self, op: Op, group: ClassicGroup) -> None:
        for topic, partition in list(group.offsets):
            op.emit(offset_commit_record(group.group_id, topic, partition, None))
        op.emit(group_metadata_record(group.group_id, None))

    def _drop_if_unused(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None and not group.members and not group.pending_members and not group.offsets:
            del self.groups[group_id]
