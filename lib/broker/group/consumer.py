"""KIP-848 consumer groups (ConsumerGroupHeartbeat): the broker computes the assignment.

Pure and deterministic like `classic`: no I/O, every call takes `now_ms`, and the topic
metadata comes in as a function (topic -> partition count, None when the topic does not exist).

The model (Kafka's ConsumerGroup / CurrentAssignmentBuilder, simplified to what one broker
and the range assignor need):

- The group epoch goes up whenever membership, a subscription or the subscribed topics'
  partition counts change. The target assignment is then recomputed with
  `assignor.range_assign` and stamped with that epoch (the assignment epoch).
- Each member moves to the target on its own heartbeats. Partitions it owns but must give up
  are *revoked first*: the member keeps its epoch, is told its reduced assignment, and only
  when a heartbeat shows it no longer owns them (its `topic_partitions`) does it move to the new
  epoch. A partition still owned (or being revoked) by another member is never handed out:
  the receiving member waits in UNRELEASED_PARTITIONS until it is free. So no partition is
  ever owned by two members at once.
- A member that stops heartbeating for the session timeout, or does not finish a revocation
  within its rebalance timeout, is removed and its partitions released.

Not persisted: the KIP-848 records (key types 3-8) are not written to `__consumer_offsets`;
these groups live in memory, and after a broker restart members get UNKNOWN_MEMBER_ID and
rejoin with epoch 0 (their committed offsets, ordinary OffsetCommit records, do survive).
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from .assignor import AssignorMember, range_assign
from .errors import GroupErrorCode as E

Partitions = Mapping[str, frozenset[int]]  # topic -> partitions
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
SUPPORTED_ASSIGNORS = ("range", "uniform")  # "uniform" is served by range as well (documented)


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topics: tuple[str, ...] | None = None  # None: unchanged since the last heartbeat
    server_assignor: str | None = None
    owned: Partitions | None = None  # None: unchanged since the last heartbeat
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeatResponse:
    error: E
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Partitions | None = None  # None: unchanged
    error_message: str | None = None


@dataclass(eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...]
    rebalance_timeout_ms: int
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: dict[str, frozenset[int]] = field(default_factory=dict)
    revoking: dict[str, frozenset[int]] = field(default_factory=dict)
    session_deadline: int = 0
    revocation_deadline: int | None = None
    last_sent: dict[str, frozenset[int]] | None = None


@dataclass(eq=False)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, dict[str, frozenset[int]]] = field(default_factory=dict)
    metadata: dict[str, int] = field(default_factory=dict)  # partition counts at the last epoch bump

    @property
    def state(self) -> str:
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.group_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def subscribed_topics(self) -> frozenset[str]:
        return frozenset(t for m in self.members.values() for t in m.subscribed_topics)

    def owner_of(self, topic: str, partition: int) -> list[str]:
        """Members that own (or are still revoking) a partition: never more than one."""
        return [m.member_id for m in self.members.values()
                if partition in m.assigned.get(topic, ()) or partition in m.revoking.get(topic, ())]


class ConsumerGroupError(Exception):
    def __init__(self, code: E, message: str = ""):
        super().__init__(message or code.name)
        self.code = code
        self.message = message or None


def _clean(parts: Mapping[str, Iterable[int]]) -> dict[str, frozenset[int]]:
    return {t: frozenset(p) for t, p in parts.items() if p}


def _minus(a: Partitions, b: Partitions) -> dict[str, frozenset[int]]:
    return _clean({t: p - b.get(t, frozenset()) for t, p in a.items()})


def _and(a: Partitions, b: Partitions) -> dict[str, frozenset[int]]:
    return _clean({t: p & b.get(t, frozenset()) for t, p in a.items()})


def _union(a: Partitions, b: Partitions) -> dict[str, frozenset[int]]:
    return _clean({t: a.get(t, frozenset()) | b.get(t, frozenset()) for t in set(a) | set(b)})


class ConsumerGroups:
    """The KIP-848 groups of one `__consumer_offsets` partition."""

    def __init__(self, session_timeout_ms: int = 45_000, heartbeat_interval_ms: int = 5_000,
                 new_member_id: Callable[[], str] = lambda: str(uuid.uuid4())):
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.groups: dict[str, ConsumerGroup] = {}
        self._new_member_id = new_member_id

    # ======================================================================= heartbeat
    def heartbeat(self, req: ConsumerHeartbeatRequest, metadata: Callable[[str], int | None],
                  now_ms: int) -> ConsumerHeartbeatResponse:
        try:
            return self._heartbeat(req, metadata, now_ms)
        except ConsumerGroupError as exc:
            return ConsumerHeartbeatResponse(exc.code, req.member_id or None, error_message=exc.message)

    def _heartbeat(self, req: ConsumerHeartbeatRequest, metadata: Callable[[str], int | None],
                   now_ms: int) -> ConsumerHeartbeatResponse:
        if not req.group_id:
            raise ConsumerGroupError(E.INVALID_GROUP_ID, "group id must not be empty")
        if req.server_assignor is not None and req.server_assignor not in SUPPORTED_ASSIGNORS:
            raise ConsumerGroupError(E.UNSUPPORTED_ASSIGNOR, f"assignor {req.server_assignor!r} is not served "
                                     f"(only {', '.join(SUPPORTED_ASSIGNORS)})")
        group = self.groups.get(req.group_id)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            member = group.members.get(req.member_id) if group else None
            if member is None:
                raise ConsumerGroupError(E.UNKNOWN_MEMBER_ID, f"group {req.group_id}: no member {req.member_id}")
            self._remove(group, member)
            return ConsumerHeartbeatResponse(E.NONE, req.member_id, req.member_epoch, self.heartbeat_interval_ms)
        bump = False
        if req.member_epoch == 0:
            if req.subscribed_topics is None:
                raise ConsumerGroupError(E.INVALID_REQUEST, "a joining member must send its subscription")
            if group is None:
                group = self.groups[req.group_id] = ConsumerGroup(req.group_id)
            member_id = req.member_id or self._new_member_id()
            member = group.members.get(member_id)
            if member is None:
                member = group.members[member_id] = ConsumerMember(
                    member_id, req.instance_id, req.rack_id, req.client_id, req.client_host, (), -1)
                bump = True
            else:  # it lost its state (fenced, restarted): it owns nothing until reassigned
                member.assigned, member.revoking, member.state = {}, {}, MemberState.STABLE
                member.member_epoch = member.previous_epoch = 0
                member.revocation_deadline = None
        else:
            member = group.members.get(req.member_id) if group else None
            if member is None:
                raise ConsumerGroupError(E.UNKNOWN_MEMBER_ID,
                                         f"group {req.group_id}: member {req.member_id} is unknown")
            self._check_epoch(group, member, req)
        member.session_deadline = now_ms + self.session_timeout_ms
        if req.rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.server_assignor is not None:
            member.server_assignor = req.server_assignor
        if req.subscribed_topics is not None and tuple(sorted(set(req.subscribed_topics))) != member.subscribed_topics:
            member.subscribed_topics = tuple(sorted(set(req.subscribed_topics)))
            bump = True
        counts = {t: n for t in sorted(group.subscribed_topics()) if (n := metadata(t))}
        if counts != group.metadata:
            group.metadata = counts
            bump = True
        if bump:
            group.group_epoch += 1
        if group.assignment_epoch < group.group_epoch:
            self._compute_target(group)
        self._reconcile(group, member, req.owned, now_ms)
        send = None
        if req.member_epoch == 0 or req.owned is not None or member.assigned != member.last_sent:
            send = member.last_sent = dict(member.assigned)
        return ConsumerHeartbeatResponse(E.NONE, member.member_id, member.member_epoch, self.heartbeat_interval_ms,
                                         send)

    @staticmethod
    def _check_epoch(group: ConsumerGroup, member: ConsumerMember, req: ConsumerHeartbeatRequest) -> None:
        if req.member_epoch == member.member_epoch:
            return
        # The member missed our last answer: it may still use the previous epoch as long as it
        # does not claim partitions it no longer has (Kafka's throwIfMemberEpochIsInvalid).
        if (req.member_epoch == member.previous_epoch and req.owned is not None
                and not _minus(req.owned, _union(member.assigned, member.revoking))):
            return
        raise ConsumerGroupError(E.FENCED_MEMBER_EPOCH,
                                 f"group {group.group_id}: member {member.member_id} sent epoch {req.member_epoch}, "
                                 f"its epoch is {member.member_epoch}")

    def _compute_target(self, group: ConsumerGroup) -> None:
        members = [AssignorMember(m.member_id, frozenset(m.subscribed_topics), m.instance_id)
                   for m in group.members.values()]
        assignment = range_assign(members, group.metadata)
        group.target = {mid: _clean(parts) for mid, parts in assignment.items()}
        group.assignment_epoch = group.group_epoch

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember, owned: Partitions | None,
                   now_ms: int) -> None:
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if owned is None or _and(owned, member.revoking):
                return  # still revoking
            member.revoking, member.revocation_deadline = {}, None
            member.state = MemberState.STABLE
        elif member.member_epoch == group.assignment_epoch and member.state is MemberState.STABLE:
            return
        target = group.target.get(member.member_id, {})
        keep = _and(member.assigned, target)
        revoke = _minus(member.assigned, target)
        if revoke:
            member.assigned, member.revoking = keep, revoke
            member.state = MemberState.UNREVOKED_PARTITIONS
            member.revocation_deadline = now_ms + max(member.rebalance_timeout_ms, 0)
            return
        taken: dict[str, frozenset[int]] = {}
        for other in group.members.values():
            if other is not member:
                taken = _union(taken, _union(other.assigned, other.revoking))
        member.assigned = _union(keep, _minus(_minus(target, keep), taken))
        if member.member_epoch != group.assignment_epoch:
            member.previous_epoch, member.member_epoch = member.member_epoch, group.assignment_epoch
        member.state = (MemberState.UNRELEASED_PARTITIONS if _minus(target, member.assigned)
                        else MemberState.STABLE)

    def _remove(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        del group.members[member.member_id]
        group.target.pop(member.member_id, None)
        group.group_epoch += 1

    # ========================================================================== timers
    def tick(self, now_ms: int) -> list[tuple[str, str]]:
        """Remove members whose session or revocation timed out; returns (group, member) removed."""
        removed = []
        for group in self.groups.values():
            for member in list(group.members.values()):
                late_revocation = member.revocation_deadline is not None and now_ms >= member.revocation_deadline
                if now_ms >= member.session_deadline or late_revocation:
                    self._remove(group, member)
                    removed.append((group.group_id, member.member_id))
        return removed

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for g in self.groups.values() for m in g.members.values()
                     for d in (m.session_deadline, m.revocation_deadline) if d is not None]
        return min(deadlines, default=None)

    # ============================================================== offsets and admin
    def validate_offset_commit(self, group_id: str, member_id: str, member_epoch: int) -> E | None:
        """None when `group_id` is not a KIP-848 group (the classic core decides), else the answer."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if member_epoch < 0 and not member_id:
            # An admin/standalone commit: only while nobody consumes.
            return E.NONE if not group.members else E.UNKNOWN_MEMBER_ID
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return E.STALE_MEMBER_EPOCH
        return E.NONE

    def subscriptions(self) -> dict[str, frozenset[str]]:
        return {gid: g.subscribed_topics() for gid, g in self.groups.items()}

    def delete(self, group_id: str) -> E:
        group = self.groups.get(group_id)
        if group is None:
            return E.GROUP_ID_NOT_FOUND
        if group.members:
            return E.NON_EMPTY_GROUP
        del self.groups[group_id]
        return E.NONE
