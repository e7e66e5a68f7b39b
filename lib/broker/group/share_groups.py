"""Share groups (KIP-932, ShareGroupHeartbeat): membership and assignment, on the group
coordinator of the group's `__consumer_offsets` partition.

Pure and deterministic like `group.consumer`: no I/O, every call takes `now_ms`, topic metadata
comes in as a function (topic -> partition count, None when it does not exist).

The model (Kafka's ShareGroup, on one broker):

- The member id is the client's (ShareGroupHeartbeat v1). Epoch 0 joins, -1 leaves; any other
  epoch must be the member's current one (or its previous one: a lost response).
- The group epoch goes up when membership, a subscription or a subscribed topic's partition
  count or id (a topic deleted and created again) changes; the target assignment
  (`assignor.simple_assign`) is then recomputed.
- Share groups have no revocation: records are locked one by one, not partitions, so a member
  moves to its target at its next heartbeat and several members may share a partition.
- A member silent for the session timeout is removed. Its held records are released by the
  caller (`tick` returns who went).
- The partitions whose share-partition state exists (ShareGroupStatePartitionMetadata) grow
  with the assignment and lose deleted topics.

Persisted as Kafka's share-group records (types 10-15 of `__consumer_offsets`) by diffing, as
`group.consumer` does: `take_records` returns the records that make the log say what memory
says; `replay` rebuilds the groups on load (each session restarts from the load time).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable

from .errors import GroupErrorCode as E
from .modern import JOIN_EPOCH, LEAVE_EPOCH, HeartbeatResponse, TopicIds, TopicNames, clean, ids, names
from .recorded import RecordedGroups
from .records import CoordinatorRecord
from .share_assignor import simple_assign
from .share_records import (SG, ShareGroupCurrentMemberAssignmentValue, ShareGroupKey, ShareGroupMemberMetadataValue,
                            ShareGroupMetadataValue, ShareGroupStatePartitionMetadataValue,
                            ShareGroupTargetAssignmentMemberValue, ShareGroupTargetAssignmentMetadataValue,
                            ShareGroupValue, TopicPartitionsInfo)

ASSIGNOR = "simple"
GroupRecords = dict[ShareGroupKey, ShareGroupValue]


@dataclass(frozen=True, slots=True)
class ShareHeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topics: tuple[str, ...] | None = None  # None: unchanged since the last heartbeat
    client_id: str = ""
    client_host: str = ""


ShareHeartbeatResponse = HeartbeatResponse


@dataclass(eq=False)
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topics: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_epoch: int = 0
    assigned: dict[str, frozenset[int]] = field(default_factory=dict)
    session_deadline: int = 0
    last_sent: dict[str, frozenset[int]] | None = None


@dataclass(eq=False)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, dict[str, frozenset[int]]] = field(default_factory=dict)
    metadata: dict[str, tuple[int, uuid.UUID | None]] = field(default_factory=dict)  # (partitions, id) at the last bump
    initialized: dict[str, frozenset[int]] = field(default_factory=dict)  # partitions with share state

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> frozenset[str]:
        return frozenset(t for m in self.members.values() for t in m.subscribed_topics)


class ShareGroupError(Exception):
    def __init__(self, code: E, message: str = ""):
        super().__init__(message or code.name)
        self.code = code
        self.message = message or None


class ShareGroups(RecordedGroups):
    """The share groups of one `__consumer_offsets` partition."""

    # Kafka's order: a removed member's current assignment, target assignment, then its metadata
    # (a deleted group: the rest, group epoch last); writes of member metadata, group epoch, target
    # assignment (members, then its epoch), current assignments, then the state partition metadata.
    _TOMBSTONE_ORDER = (SG.CURRENT_MEMBER_ASSIGNMENT, SG.TARGET_ASSIGNMENT_MEMBER, SG.TARGET_ASSIGNMENT_METADATA,
                        SG.MEMBER_METADATA, SG.STATE_PARTITION_METADATA, SG.METADATA)
    _WRITE_ORDER = (SG.MEMBER_METADATA, SG.METADATA, SG.TARGET_ASSIGNMENT_MEMBER, SG.TARGET_ASSIGNMENT_METADATA,
                    SG.CURRENT_MEMBER_ASSIGNMENT, SG.STATE_PARTITION_METADATA)

    def __init__(self, session_timeout_ms: Callable[[str], int] = lambda _g: 45_000,
                 heartbeat_interval_ms: Callable[[str], int] = lambda _g: 5_000, max_size: int = 200):
        self._session_timeout_ms = session_timeout_ms  # per group (GROUP configs)
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self.max_size = max_size
        self.groups: dict[str, ShareGroup] = {}
        self.persisted: dict[str, GroupRecords] = {}
        self._dirty: set[str] = set()

    # ======================================================================= heartbeat
    def heartbeat(self, req: ShareHeartbeatRequest, metadata: Callable[[str], int | None], now_ms: int,
                  topic_id: TopicIds = lambda _t: None) -> ShareHeartbeatResponse:
        self._dirty.add(req.group_id)
        try:
            return self._heartbeat(req, metadata, now_ms, topic_id)
        except ShareGroupError as exc:
            return ShareHeartbeatResponse(exc.code, req.member_id or None, error_message=exc.message)

    def _heartbeat(self, req: ShareHeartbeatRequest, metadata: Callable[[str], int | None], now_ms: int,
                   topic_id: TopicIds) -> ShareHeartbeatResponse:
        if not req.group_id:
            raise ShareGroupError(E.INVALID_REQUEST, "GroupId can't be empty.")
        if not req.member_id:
            raise ShareGroupError(E.INVALID_REQUEST, "MemberId can't be empty.")
        interval = self._heartbeat_interval_ms(req.group_id)
        group = self.groups.get(req.group_id)
        if req.member_epoch == LEAVE_EPOCH:
            member = group.members.get(req.member_id) if group else None
            if member is None:
                raise ShareGroupError(E.UNKNOWN_MEMBER_ID, f"group {req.group_id}: no member {req.member_id}")
            self._remove(group, member)
            return ShareHeartbeatResponse(E.NONE, req.member_id, LEAVE_EPOCH, interval)
        bump = False
        if req.member_epoch == JOIN_EPOCH:
            if req.subscribed_topics is None:
                raise ShareGroupError(E.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
            if group is None:
                group = self.groups[req.group_id] = ShareGroup(req.group_id)
            member = group.members.get(req.member_id)
            if member is None:
                if len(group.members) >= self.max_size:
                    raise ShareGroupError(E.GROUP_MAX_SIZE_REACHED,
                                          f"group {req.group_id} has the maximum of {self.max_size} members")
                member = group.members[req.member_id] = ShareMember(req.member_id)
                bump = True
            member.member_epoch = member.previous_epoch = 0
        else:
            member = group.members.get(req.member_id) if group else None
            if member is None:
                raise ShareGroupError(E.UNKNOWN_MEMBER_ID, f"group {req.group_id}: member {req.member_id} is unknown")
            if req.member_epoch not in (member.member_epoch, member.previous_epoch):
                raise ShareGroupError(E.FENCED_MEMBER_EPOCH,
                                      f"group {req.group_id}: member {req.member_id} sent epoch {req.member_epoch}, "
                                      f"its epoch is {member.member_epoch}")
        member.session_deadline = now_ms + self._session_timeout_ms(req.group_id)
        member.client_id, member.client_host = req.client_id, req.client_host
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.subscribed_topics is not None and tuple(sorted(set(req.subscribed_topics))) != member.subscribed_topics:
            member.subscribed_topics = tuple(sorted(set(req.subscribed_topics)))
            bump = True
        counts = {t: (n, topic_id(t)) for t in sorted(group.subscribed_topics()) if (n := metadata(t))}
        if counts != group.metadata:
            group.metadata = counts
            bump = True
        for topic in [t for t in group.initialized if metadata(t) is None]:  # deleted topics
            del group.initialized[topic]
        if bump:
            group.group_epoch += 1
        if group.assignment_epoch < group.group_epoch:
            self._compute_target(group)
        target = group.target.get(member.member_id, {})
        if member.member_epoch != group.assignment_epoch or member.assigned != target:
            member.assigned = dict(target)
            if member.member_epoch != group.assignment_epoch:
                member.previous_epoch, member.member_epoch = member.member_epoch, group.assignment_epoch
        send = None
        # A new epoch resends the assignment: a topic created again has the same name, another id.
        if (req.member_epoch in (JOIN_EPOCH, member.previous_epoch) or req.subscribed_topics is not None
                or member.assigned != member.last_sent):
            send = member.last_sent = dict(member.assigned)
        return ShareHeartbeatResponse(E.NONE, member.member_id, member.member_epoch, interval, send)

    def _compute_target(self, group: ShareGroup) -> None:
        subscriptions = {m.member_id: frozenset(m.subscribed_topics) for m in group.members.values()}
        counts = {t: n for t, (n, _tid) in group.metadata.items()}
        group.target = {mid: clean(parts) for mid, parts in simple_assign(subscriptions, counts).items()}
        group.assignment_epoch = group.group_epoch
        for topic, count in counts.items():
            if any(topic in parts for parts in group.target.values()):
                group.initialized[topic] = group.initialized.get(topic, frozenset()) | frozenset(range(count))

    def _remove(self, group: ShareGroup, member: ShareMember) -> None:
        self._dirty.add(group.group_id)
        del group.members[member.member_id]
        group.target.pop(member.member_id, None)
        group.group_epoch += 1

    # ========================================================================== timers
    def tick(self, now_ms: int) -> list[tuple[str, str]]:
        """Remove members whose session timed out; returns (group, member) removed."""
        removed = []
        for group in self.groups.values():
            for member in list(group.members.values()):
                if now_ms >= member.session_deadline:
                    self._remove(group, member)
                    removed.append((group.group_id, member.member_id))
        return removed

    def next_deadline_ms(self) -> int | None:
        return min((m.session_deadline for g in self.groups.values() for m in g.members.values()), default=None)

    # =========================================================================== admin
    def delete(self, group_id: str) -> E:
        group = self.groups.get(group_id)
        if group is None:
            return E.GROUP_ID_NOT_FOUND
        if group.members:
            return E.NON_EMPTY_GROUP
        del self.groups[group_id]
        self._dirty.add(group_id)
        return E.NONE

    def forget_topics(self, group_id: str, topics: Iterable[str]) -> None:
        """Offsets of these topics were deleted (DeleteShareGroupOffsets): no state left for them."""
        group = self.groups.get(group_id)
        if group is not None:
            for topic in topics:
                group.initialized.pop(topic, None)
            self._dirty.add(group_id)

    def mark_initialized(self, group_id: str, topic: str, partitions: Iterable[int]) -> None:
        """Share state now exists for these partitions (AlterShareGroupOffsets on an empty group)."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ShareGroup(group_id)
        group.initialized[topic] = group.initialized.get(topic, frozenset()) | frozenset(partitions)
        self._dirty.add(group_id)

    # ==================================================================== persistence
    def _records_of(self, group: ShareGroup, topic_id: TopicIds) -> GroupRecords:
        return group_records(group, topic_id)

    def _new_group(self, group_id: str) -> ShareGroup:
        return ShareGroup(group_id)

    def replay(self, record: CoordinatorRecord, now_ms: int, topic_name: TopicNames) -> None:
        """Apply one share-group record read from the log (in log order)."""
        key, value = record.key, record.value
        assert isinstance(key, ShareGroupKey)
        group = self._replayed_group(key, value)
        if group is None:
            return
        if isinstance(value, ShareGroupMetadataValue):
            group.group_epoch = value.epoch
        elif isinstance(value, ShareGroupTargetAssignmentMetadataValue):
            group.assignment_epoch = value.assignment_epoch
        elif isinstance(value, ShareGroupTargetAssignmentMemberValue):
            group.target[key.member_id] = names(value.topic_partitions, topic_name)
        elif isinstance(value, ShareGroupMemberMetadataValue):
            m = self._replayed_member(group, key.member_id, now_ms)
            m.rack_id, m.client_id, m.client_host = value.rack_id, value.client_id, value.client_host
            m.subscribed_topics = tuple(sorted(set(value.subscribed_topic_names)))
        elif isinstance(value, ShareGroupCurrentMemberAssignmentValue):
            m = self._replayed_member(group, key.member_id, now_ms)
            m.member_epoch, m.previous_epoch = value.member_epoch, value.previous_member_epoch
            m.assigned = names(value.assigned_partitions, topic_name)
        elif isinstance(value, ShareGroupStatePartitionMetadataValue):
            group.initialized = {name: frozenset(info.partitions) for info in value.initialized_topics
                                 if (name := topic_name(info.topic_id)) is not None and info.partitions}

    def _replayed_member(self, group: ShareGroup, member_id: str, now_ms: int) -> ShareMember:
        member = group.members.get(member_id)
        if member is None:
            member = group.members[member_id] = ShareMember(member_id)
        member.session_deadline = now_ms + self._session_timeout_ms(group.group_id)
        return member

    def _replay_tombstone(self, group: ShareGroup, key: ShareGroupKey) -> None:
        if key.type == SG.METADATA:
            del self.groups[group.group_id]
        elif key.type == SG.TARGET_ASSIGNMENT_METADATA:
            group.assignment_epoch = 0
        elif key.type == SG.TARGET_ASSIGNMENT_MEMBER:
            group.target.pop(key.member_id, None)
        elif key.type == SG.MEMBER_METADATA:
            group.members.pop(key.member_id, None)
        elif key.type == SG.CURRENT_MEMBER_ASSIGNMENT and key.member_id in group.members:
            m = group.members[key.member_id]
            m.member_epoch = m.previous_epoch = 0
            m.assigned = {}
        elif key.type == SG.STATE_PARTITION_METADATA:
            group.initialized = {}


def group_records(group: ShareGroup, topic_id: TopicIds) -> GroupRecords:
    """Every record (key -> value) that describes `group` as it stands."""
    gid = group.group_id
    out: GroupRecords = {
        ShareGroupKey(SG.METADATA, gid): ShareGroupMetadataValue(group.group_epoch),
        ShareGroupKey(SG.TARGET_ASSIGNMENT_METADATA, gid):
            ShareGroupTargetAssignmentMetadataValue(group.assignment_epoch),
        ShareGroupKey(SG.STATE_PARTITION_METADATA, gid): ShareGroupStatePartitionMetadataValue(
            initialized_topics=tuple(TopicPartitionsInfo(tid, name, tuple(sorted(ps)))
                                     for name, ps in sorted(group.initialized.items())
                                     if (tid := topic_id(name)) is not None)),
    }
    for mid, m in group.members.items():
        out[ShareGroupKey(SG.MEMBER_METADATA, gid, mid)] = ShareGroupMemberMetadataValue(
            m.rack_id, m.client_id, m.client_host, m.subscribed_topics)
        out[ShareGroupKey(SG.CURRENT_MEMBER_ASSIGNMENT, gid, mid)] = ShareGroupCurrentMemberAssignmentValue(
            m.member_epoch, m.previous_epoch, 0, ids(m.assigned, topic_id))
    for mid, parts in group.target.items():
        out[ShareGroupKey(SG.TARGET_ASSIGNMENT_MEMBER, gid, mid)] = ShareGroupTargetAssignmentMemberValue(
            ids(parts, topic_id))
    return out
