"""KIP-848 consumer groups (ConsumerGroupHeartbeat): the broker computes the assignment.

Pure and deterministic like `classic`: no I/O, every call takes `now_ms`, and the topic
metadata comes in as a function (topic -> partition count, None when the topic does not exist).

The model (Kafka's ConsumerGroup / CurrentAssignmentBuilder, simplified to what one broker
and the range assignor need):

- A member subscribes by topic names, a regex, or both. A regex is RE2 (Kafka's RE2J: linear
  time whatever a client sends) matched against whole names (`topic_names` lists the topics it
  may match), again at most every 10 s on a heartbeat, so a topic created later joins the
  subscriptions.
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
- Members may also speak the classic protocol (`consumer_classic`, KIP-848's online
  migration): they carry `classic` metadata, their own session timeout, and join/sync
  deadlines instead of the revocation deadline. When the last consumer-protocol member leaves
  and the migration policy allows a downgrade, the group is listed in `downgrades` (and its
  epoch left as it was) for the coordinator to turn it back into a classic group (`migration`).

Persisted as Kafka's KIP-848 records (key types 3-8 of `__consumer_offsets`, see `records`), by
diffing rather than by emitting from every branch: `take_records` compares each group changed
since its last call with what the log holds for it (`persisted`) and returns the records that
make the log say the same, in Kafka's order (a removed member: tombstones of its current
assignment, target assignment, then member metadata; a deleted group: all of them, group epoch
last). The coordinator appends them before it answers. `replay` applies a record read back on
load; it rebuilds the same groups, and each member's session (and a pending revocation's
rebalance timeout) restarts from the load time, as in Kafka. Topics are names here and ids in
the records: the caller passes the translation both ways. Live only: session/revocation
deadlines and what was last sent to each member.
"""

from __future__ import annotations

import enum
import functools
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable

import re2

from .assignor import AssignorMember, range_assign
from .errors import GroupErrorCode as E
from .recorded import RecordedGroups
from .records import (CG, ClassicMemberMetadata, ConsumerGroupCurrentMemberAssignmentValue, ConsumerGroupKey,
                      ConsumerGroupMemberMetadataValue, ConsumerGroupMetadataValue, ConsumerGroupPartitionMetadataValue,
                      ConsumerGroupTargetAssignmentMemberValue, ConsumerGroupTargetAssignmentMetadataValue,
                      ConsumerGroupValue, CoordinatorRecord, TopicMetadata)
from .modern import (LEAVE_EPOCH, HeartbeatResponse, Partitions, TopicIds, TopicNames, clean,
                     ids, names)

STATIC_LEAVE_EPOCH = -2
SUPPORTED_ASSIGNORS = ("range", "uniform")  # "uniform" is served by range as well (documented)
NO_TOPIC_ID = uuid.UUID(int=0)
REGEX_REFRESH_MS = 10_000  # how often regex subscriptions are matched against new topics
GroupRecords = dict[ConsumerGroupKey, ConsumerGroupValue]


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"

    @property
    def code(self) -> int:
        """Kafka's MemberState byte (the `state` of a current-assignment record)."""
        return _STATE_CODES[self]

    @classmethod
    def from_code(cls, code: int) -> "MemberState":
        for state, c in _STATE_CODES.items():
            if c == code:
                return state
        raise ValueError(f"unknown member state {code}")


_STATE_CODES = {MemberState.STABLE: 0, MemberState.UNREVOKED_PARTITIONS: 1, MemberState.UNRELEASED_PARTITIONS: 2}


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topics: tuple[str, ...] | None = None  # None: unchanged since the last heartbeat
    subscribed_regex: str | None = None  # None: unchanged; "": none any more
    may_describe: Callable[[str], bool] = lambda _topic: True  # which topics its regex may match (ACLs)
    server_assignor: str | None = None
    owned: Partitions | None = None  # None: unchanged since the last heartbeat
    client_id: str = ""
    client_host: str = ""


ConsumerHeartbeatResponse = HeartbeatResponse


@dataclass(eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...]  # by name
    rebalance_timeout_ms: int
    server_assignor: str | None = None
    subscribed_regex: str | None = None
    regex_topics: tuple[str, ...] = ()  # the topics subscribed_regex matched when last resolved
    may_describe: Callable[[str], bool] | None = None  # from its last heartbeat; None: none since a load
    member_epoch: int = 0
    previous_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: dict[str, frozenset[int]] = field(default_factory=dict)
    revoking: dict[str, frozenset[int]] = field(default_factory=dict)
    session_deadline: int = 0
    revocation_deadline: int | None = None
    last_sent: dict[str, frozenset[int]] | None = None
    classic: ClassicMemberMetadata | None = None  # set: the member speaks the classic protocol
    join_deadline: int | None = None  # classic: told to rejoin, must JoinGroup by then
    sync_deadline: int | None = None  # classic: joined, must SyncGroup by then

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    @property
    def topics(self) -> frozenset[str]:
        """Every topic it subscribes to: by name and by its regex."""
        return frozenset(self.subscribed_topics) | frozenset(self.regex_topics)


@dataclass(eq=False)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, dict[str, frozenset[int]]] = field(default_factory=dict)
    metadata: dict[str, int] = field(default_factory=dict)  # partition counts at the last epoch bump
    regexes_resolved_ms: int | None = None  # when the members' regexes were last matched to the topics

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
        return frozenset(t for m in self.members.values() for t in m.topics)

    def owner_of(self, topic: str, partition: int) -> list[str]:
        """Members that own (or are still revoking) a partition: never more than one."""
        return [m.member_id for m in self.members.values()
                if partition in m.assigned.get(topic, ()) or partition in m.revoking.get(topic, ())]


class ConsumerGroupError(Exception):
    def __init__(self, code: E, message: str = ""):
        super().__init__(message or code.name)
        self.code = code
        self.message = message or None


def _minus(a: Partitions, b: Partitions) -> dict[str, frozenset[int]]:
    return clean({t: p - b.get(t, frozenset()) for t, p in a.items()})


def _and(a: Partitions, b: Partitions) -> dict[str, frozenset[int]]:
    return clean({t: p & b.get(t, frozenset()) for t, p in a.items()})


def _union(a: Partitions, b: Partitions) -> dict[str, frozenset[int]]:
    return clean({t: a.get(t, frozenset()) | b.get(t, frozenset()) for t in set(a) | set(b)})


class ConsumerGroups(RecordedGroups):
    """The KIP-848 groups of one `__consumer_offsets` partition (classic-protocol members'
    requests: `consumer_classic`, through `advance`, `remove` and `touch`)."""

    # Kafka's order: tombstones of a member's current assignment, target assignment, then its
    # metadata (a deleted group: the target epoch between, partition metadata and epoch last);
    # writes of member metadata, subscription metadata, group epoch, then the target assignment
    # (members, then its epoch), then current assignments.
    _TOMBSTONE_ORDER = (CG.CURRENT_MEMBER_ASSIGNMENT, CG.TARGET_ASSIGNMENT_MEMBER, CG.TARGET_ASSIGNMENT_METADATA,
                        CG.MEMBER_METADATA, CG.PARTITION_METADATA, CG.METADATA)
    _WRITE_ORDER = (CG.MEMBER_METADATA, CG.PARTITION_METADATA, CG.METADATA, CG.TARGET_ASSIGNMENT_MEMBER,
                    CG.TARGET_ASSIGNMENT_METADATA, CG.CURRENT_MEMBER_ASSIGNMENT)

    def __init__(self, session_timeout_ms: int = 45_000, heartbeat_interval_ms: int = 5_000,
                 new_member_id: Callable[[], str] = lambda: str(uuid.uuid4()),
                 group_timeouts: Callable[[str], tuple[int, int]] | None = None,
                 downgrade_enabled: bool = True, topic_names: Callable[[], Iterable[str]] = tuple):
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        # A group's (session timeout, heartbeat interval) when it has GROUP configs of its own.
        self._group_timeouts = group_timeouts or (lambda _gid: (self.session_timeout_ms, self.heartbeat_interval_ms))
        self.groups: dict[str, ConsumerGroup] = {}
        self._new_member_id = new_member_id
        self.persisted: dict[str, GroupRecords] = {}  # what the log holds, per group
        self._dirty: set[str] = set()  # groups changed since the last take_records
        self.downgrade_enabled = downgrade_enabled  # group.consumer.migration.policy allows it
        self._topic_names = topic_names  # every topic, for regex subscriptions
        self.downgrades: set[str] = set()  # groups to turn into classic groups (by the coordinator)

    # ======================================================================= heartbeat
    def heartbeat(self, req: ConsumerHeartbeatRequest, metadata: Callable[[str], int | None],
                  now_ms: int) -> ConsumerHeartbeatResponse:
        self._dirty.add(req.group_id)
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
            self.remove(group, member)
            return ConsumerHeartbeatResponse(E.NONE, req.member_id, req.member_epoch,
                                             self._group_timeouts(req.group_id)[1])
        bump = False
        if req.member_epoch == 0:
            if req.subscribed_topics is None and not req.subscribed_regex:
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
        session_timeout_ms, heartbeat_interval_ms = self._group_timeouts(req.group_id)
        member.session_deadline = now_ms + session_timeout_ms
        if req.rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.server_assignor is not None:
            member.server_assignor = req.server_assignor
        if req.subscribed_topics is not None and tuple(sorted(set(req.subscribed_topics))) != member.subscribed_topics:
            member.subscribed_topics = tuple(sorted(set(req.subscribed_topics)))
            bump = True
        member.may_describe = req.may_describe
        if req.subscribed_regex is not None and (req.subscribed_regex or None) != member.subscribed_regex:
            member.subscribed_regex = req.subscribed_regex or None
            group.regexes_resolved_ms = None  # at once, not at the next refresh
        bump |= self._resolve_regexes(group, now_ms)
        member.classic = member.join_deadline = member.sync_deadline = None  # it speaks this protocol now
        self.advance(group, member, bump, req.owned, metadata, now_ms)
        send = None
        if req.member_epoch == 0 or req.owned is not None or member.assigned != member.last_sent:
            send = member.last_sent = dict(member.assigned)
        return ConsumerHeartbeatResponse(E.NONE, member.member_id, member.member_epoch, heartbeat_interval_ms,
                                         send)

    def _resolve_regexes(self, group: ConsumerGroup, now_ms: int) -> bool:
        """Match the members' regexes against the topics (at most every REGEX_REFRESH_MS, as
        Kafka's coordinator does, or at once after a regex changed): so a topic created later
        joins the subscriptions. Whether a member's topics changed."""
        regexes = {m.subscribed_regex for m in group.members.values() if m.subscribed_regex}
        if not regexes and not any(m.regex_topics for m in group.members.values()):
            return False
        if group.regexes_resolved_ms is not None and now_ms - group.regexes_resolved_ms < REGEX_REFRESH_MS:
            return False
        group.regexes_resolved_ms = now_ms
        every_topic = list(self._topic_names()) if regexes else []
        matches = {r: tuple(sorted(t for t in every_topic if compiled_regex(r).fullmatch(t))) for r in regexes}
        changed = False
        for m in group.members.values():
            if not m.subscribed_regex:
                topics: tuple[str, ...] = ()
            elif m.may_describe is None:  # loaded, not heard from since: what it was given still stands
                topics = _given_regex_topics(group, m)
            else:
                topics = tuple(t for t in matches[m.subscribed_regex] if m.may_describe(t))
            if topics != m.regex_topics:
                m.regex_topics, changed = topics, True
        return changed

    def advance(self, group: ConsumerGroup, member: ConsumerMember, bump: bool, owned: Partitions | None,
                 metadata: Callable[[str], int | None], now_ms: int) -> None:
        """Bump the group epoch if membership, a subscription or a partition count changed,
        recompute the target if the epoch moved, and move `member` towards it."""
        counts = {t: n for t in sorted(group.subscribed_topics()) if (n := metadata(t))}
        if counts != group.metadata:
            group.metadata = counts
            bump = True
        if bump:
            group.group_epoch += 1
        if group.assignment_epoch < group.group_epoch:
            self._compute_target(group)
        self._reconcile(group, member, owned, now_ms)

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
        members = [AssignorMember(m.member_id, m.topics, m.instance_id)
                   for m in group.members.values()]
        assignment = range_assign(members, group.metadata)
        group.target = {mid: clean(parts) for mid, parts in assignment.items()}
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
        if revoke and (owned is None or _and(owned, revoke)):
            # Kafka's CurrentAssignmentBuilder: only wait for a revocation the member may still
            # act on; one that says it no longer owns them moves on at once.
            member.assigned, member.revoking = keep, revoke
            member.state = MemberState.UNREVOKED_PARTITIONS
            if not member.uses_classic_protocol:  # classic members have join/sync deadlines instead
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

    def remove(self, group: ConsumerGroup, *members: ConsumerMember) -> None:
        """Members leave (or are fenced): one epoch bump for all of them, or a downgrade."""
        self._dirty.add(group.group_id)
        for member in members:
            del group.members[member.member_id]
            group.target.pop(member.member_id, None)
        if (self.downgrade_enabled and group.members
                and all(m.uses_classic_protocol for m in group.members.values())):
            # Kafka's validateOnlineDowngradeWithFencedMembers: the classic group that replaces
            # this one takes the epoch as it is and rebalances.
            self.downgrades.add(group.group_id)
        else:
            group.group_epoch += 1

    # ========================================================================== timers
    def tick(self, now_ms: int) -> list[tuple[str, str]]:
        """Remove members whose session or revocation timed out; returns (group, member) removed."""
        removed = []
        for group in self.groups.values():
            for member in list(group.members.values()):
                if group.group_id in self.downgrades:
                    break  # already a classic group in all but name: the coordinator converts it
                late = [d for d in (member.revocation_deadline, member.join_deadline, member.sync_deadline)
                        if d is not None and now_ms >= d]
                if now_ms >= member.session_deadline or late:
                    self.remove(group, member)
                    removed.append((group.group_id, member.member_id))
        return removed

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for g in self.groups.values() for m in g.members.values()
                     for d in (m.session_deadline, m.revocation_deadline, m.join_deadline, m.sync_deadline)
                     if d is not None]
        return min(deadlines, default=None)

    # ============================================================== offsets and admin
    def validate_offset_commit(self, group_id: str, member_id: str, member_epoch: int, *,
                               transactional: bool = False) -> E | None:
        """None when `group_id` is not a KIP-848 group (the classic core decides), else the answer
        (Kafka's ConsumerGroup.validateOffsetCommit)."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if member_epoch < 0 and not member_id:
            # An admin/standalone commit: only while nobody consumes. A transactional one names no
            # member in TxnOffsetCommit v0-v2: the producer epoch fences it instead, as in Kafka.
            return E.NONE if not group.members or transactional else E.UNKNOWN_MEMBER_ID
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            # A classic member sends its generation, which is its member epoch.
            return E.ILLEGAL_GENERATION if member.uses_classic_protocol else E.STALE_MEMBER_EPOCH
        return E.NONE

    def subscriptions(self) -> dict[str, frozenset[str]]:
        return {gid: g.subscribed_topics() for gid, g in self.groups.items()}

    def touch(self, group_id: str) -> None:
        """`group_id` changes in this call: its records are taken at the end of it."""
        self._dirty.add(group_id)

    def new_member_id(self) -> str:
        return self._new_member_id()

    def adopt(self, group: ConsumerGroup) -> None:
        """A group converted from a classic group joins this core (its records follow)."""
        self.groups[group.group_id] = group
        self._dirty.add(group.group_id)

    def release(self, group_id: str) -> ConsumerGroup:
        """Take a group out of this core for a conversion (its tombstones follow)."""
        self.downgrades.discard(group_id)
        self._dirty.add(group_id)
        return self.groups.pop(group_id)

    def delete(self, group_id: str) -> E:
        group = self.groups.get(group_id)
        if group is None:
            return E.GROUP_ID_NOT_FOUND
        if group.members:
            return E.NON_EMPTY_GROUP
        del self.groups[group_id]
        self._dirty.add(group_id)
        return E.NONE

    # ==================================================================== persistence
    def _records_of(self, group: ConsumerGroup, topic_id: TopicIds) -> GroupRecords:
        return group_records(group, topic_id)

    def _new_group(self, group_id: str) -> ConsumerGroup:
        return ConsumerGroup(group_id)

    def replay(self, record: CoordinatorRecord, now_ms: int, topic_name: TopicNames) -> None:
        """Apply one KIP-848 record read from the log (in log order)."""
        key, value = record.key, record.value
        assert isinstance(key, ConsumerGroupKey)
        group = self._replayed_group(key, value)
        if group is None:
            return
        if isinstance(value, ConsumerGroupMetadataValue):
            group.group_epoch = value.epoch
        elif isinstance(value, ConsumerGroupPartitionMetadataValue):
            group.metadata = {t.topic_name: t.num_partitions for t in value.topics}
        elif isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
            group.assignment_epoch = value.assignment_epoch
        elif isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
            group.target[key.member_id] = names(value.topic_partitions, topic_name)
            if key.member_id in group.members:
                member = group.members[key.member_id]
                member.regex_topics = _given_regex_topics(group, member)
        elif isinstance(value, ConsumerGroupMemberMetadataValue):
            m = self._replayed_member(group, key.member_id, now_ms)
            m.instance_id, m.rack_id = value.instance_id, value.rack_id
            m.client_id, m.client_host = value.client_id, value.client_host
            m.subscribed_topics = tuple(sorted(set(value.subscribed_topic_names)))
            m.subscribed_regex = value.subscribed_topic_regex or None
            m.regex_topics = _given_regex_topics(group, m)
            group.regexes_resolved_ms = None  # matched again at the group's next heartbeat
            m.rebalance_timeout_ms, m.server_assignor = value.rebalance_timeout_ms, value.server_assignor
            m.classic = value.classic_member_metadata
            m.session_deadline = now_ms + self.session_timeout_of(group.group_id, m)
        elif isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
            m = self._replayed_member(group, key.member_id, now_ms)
            m.member_epoch, m.previous_epoch = value.member_epoch, value.previous_member_epoch
            m.state = MemberState.from_code(value.state)
            m.assigned = names(value.assigned_partitions, topic_name)
            m.regex_topics = _given_regex_topics(group, m)
            m.revoking = names(value.partitions_pending_revocation, topic_name)
            m.revocation_deadline = (now_ms + max(m.rebalance_timeout_ms, 0)
                                     if m.state is MemberState.UNREVOKED_PARTITIONS and not m.uses_classic_protocol
                                     else None)

    def _replayed_member(self, group: ConsumerGroup, member_id: str, now_ms: int) -> ConsumerMember:
        member = group.members.get(member_id)
        if member is None:
            member = group.members[member_id] = ConsumerMember(member_id, None, None, "", "", (), -1)
        member.session_deadline = now_ms + self.session_timeout_of(group.group_id, member)
        return member

    def session_timeout_of(self, group_id: str, member: ConsumerMember) -> int:
        """A classic member keeps the session timeout it joined with; the others the group's."""
        if member.classic is not None:
            return member.classic.session_timeout_ms
        return self._group_timeouts(group_id)[0]

    def _replay_tombstone(self, group: ConsumerGroup, key: ConsumerGroupKey) -> None:
        if key.type == CG.METADATA:
            del self.groups[group.group_id]
        elif key.type == CG.PARTITION_METADATA:
            group.metadata = {}
        elif key.type == CG.TARGET_ASSIGNMENT_METADATA:
            group.assignment_epoch = 0
        elif key.type == CG.TARGET_ASSIGNMENT_MEMBER:
            group.target.pop(key.member_id, None)
        elif key.type == CG.MEMBER_METADATA:
            group.members.pop(key.member_id, None)
        elif key.type == CG.CURRENT_MEMBER_ASSIGNMENT and key.member_id in group.members:
            m = group.members[key.member_id]
            m.member_epoch = m.previous_epoch = 0
            m.state, m.assigned, m.revoking, m.revocation_deadline = MemberState.STABLE, {}, {}, None


@functools.lru_cache(maxsize=256)
def compiled_regex(pattern: str):
    """A subscription regex as RE2 compiles it (re2.error when it is not one)."""
    return re2.compile(pattern)


def _given_regex_topics(group: ConsumerGroup, member: ConsumerMember) -> tuple[str, ...]:
    """The topics of a member's target and assignment that its regex matches: what the regex
    stands for after a load, until the member is heard from (so nothing is taken from it meanwhile)."""
    if not member.subscribed_regex:
        return ()
    given = set(group.target.get(member.member_id, {})) | set(member.assigned)
    return tuple(sorted(t for t in given if compiled_regex(member.subscribed_regex).fullmatch(t)))


def group_records(group: ConsumerGroup, topic_id: TopicIds) -> GroupRecords:
    """Every record (key -> value) that describes `group` as it stands."""
    gid = group.group_id
    out: GroupRecords = {
        ConsumerGroupKey(CG.METADATA, gid): ConsumerGroupMetadataValue(group.group_epoch),
        ConsumerGroupKey(CG.PARTITION_METADATA, gid): ConsumerGroupPartitionMetadataValue(tuple(
            TopicMetadata(topic_id(t) or NO_TOPIC_ID, t, n) for t, n in sorted(group.metadata.items()))),
        ConsumerGroupKey(CG.TARGET_ASSIGNMENT_METADATA, gid):
            ConsumerGroupTargetAssignmentMetadataValue(group.assignment_epoch),
    }
    for mid, m in group.members.items():
        out[ConsumerGroupKey(CG.MEMBER_METADATA, gid, mid)] = ConsumerGroupMemberMetadataValue(
            m.instance_id, m.rack_id, m.client_id, m.client_host, m.subscribed_topics, m.subscribed_regex,
            m.rebalance_timeout_ms, m.server_assignor, m.classic)
        out[ConsumerGroupKey(CG.CURRENT_MEMBER_ASSIGNMENT, gid, mid)] = ConsumerGroupCurrentMemberAssignmentValue(
            m.member_epoch, m.previous_epoch, m.state.code, ids(m.assigned, topic_id), ids(m.revoking, topic_id))
    for mid, parts in group.target.items():
        out[ConsumerGroupKey(CG.TARGET_ASSIGNMENT_MEMBER, gid, mid)] = \
            ConsumerGroupTargetAssignmentMemberValue(ids(parts, topic_id))
    return out
