"""The in-memory model of one classic group (Kafka's `ClassicGroup` / `GroupMetadata`).

Mutable on purpose: the coordinator changes it in place, one call at a time. The persistent
part (generation, protocol, leader, members with their subscription and assignment) is what a
GroupMetadataValue record carries; the rest (parked requests, deadlines, pending members) is
live only and rebuilt as empty on load, as in Kafka.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from topiclake.segments.batch import NO_TIMESTAMP
from topiclake.segments.errors import CorruptRecordError

from .api import Protocol
from topiclake.protocol.consumer_protocol import PROTOCOL_TYPE, decode_subscription
from .java import hashmap_order
from .records import GroupMetadataValue, MemberMetadata, OffsetCommitValue


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[Protocol, ...]
    assignment: bytes = b""
    join_ticket: int | None = None  # a parked JoinGroup
    sync_ticket: int | None = None  # a parked SyncGroup
    is_new: bool = False  # joined, never completed a join phase
    heartbeat_deadline: int = 0

    def metadata(self, protocol: str | None) -> bytes:
        for p in self.protocols:
            if p.name == protocol:
                return p.metadata
        return b""

    def vote(self, candidates: set[str]) -> str:
        return next(p.name for p in self.protocols if p.name in candidates)

    def matches(self, protocols: tuple[Protocol, ...]) -> bool:
        return self.protocols == protocols


@dataclass(eq=False)
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp: int | None = None
    protocol_type: str | None = None  # None: a "simple" group that only stores offsets
    generation: int = 0
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    offsets: dict[tuple[str, int], OffsetCommitValue] = field(default_factory=dict)
    subscribed_topics: frozenset[str] | None = None
    # live only
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> expiry
    pending_sync: set[str] = field(default_factory=set)
    join_deadline: int | None = None
    initial_delay: bool = False  # the join phase is the first one's delayed start
    delay_remaining_ms: int = 0
    new_member_added: bool = False
    sync_deadline: int | None = None

    # ---------------------------------------------------------------- membership
    def transition(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise AssertionError(f"group {self.group_id}: illegal transition {self.state} -> {state}")
        self.state = state
        self.state_timestamp = now_ms

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if self.leader is None:
            self.leader = member.member_id

    def remove(self, member_id: str) -> Member:
        member = self.members.pop(member_id)
        self.pending_sync.discard(member_id)
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        return member

    def static_member_id(self, group_instance_id: str | None) -> str | None:
        if group_instance_id is None:
            return None
        return next((m.member_id for m in self.members.values()
                     if m.group_instance_id == group_instance_id), None)

    def is_static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        existing = self.static_member_id(group_instance_id)
        return existing is not None and existing != member_id

    def replace_member_id(self, old_id: str, new_id: str) -> Member:
        """A static member came back with a new member id; everything else is kept."""
        self.members = {(new_id if k == old_id else k): m for k, m in self.members.items()}
        member = self.members[new_id]
        member.member_id = new_id
        if self.leader == old_id:
            self.leader = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.join_ticket is not None for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # --------------------------------------------------------------- protocols
    def candidate_protocols(self) -> set[str]:
        members = list(self.members.values())
        if not members:
            return set()
        common = {p.name for p in members[0].protocols}
        for m in members[1:]:
            common &= {p.name for p in m.protocols}
        return common

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """Each member votes for its first protocol that all members support; most votes wins.
        Kafka counts votes in a HashMap and takes the first maximum in its iteration order."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            name = m.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        best = None
        for name in hashmap_order(votes):
            if best is None or votes[name] > votes[best]:
                best = name
        assert best is not None
        return best

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """Topics the members subscribe to, when the group uses the consumer protocol and
        every subscription parses (Kafka reads them as v0, the prefix of all versions)."""
        if self.protocol_type != PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol is None:
            return None
        topics: set[str] = set()
        try:
            for m in self.members.values():
                topics.update(decode_subscription(m.metadata(self.protocol)).topics)
        except CorruptRecordError:
            return None
        return frozenset(topics)

    def is_subscribed_to(self, topic: str) -> bool:
        if self.subscribed_topics is None:
            return self.protocol_type == PROTOCOL_TYPE
        return topic in self.subscribed_topics

    # ----------------------------------------------------------------- records
    def to_value(self, now_ms: int, assignments: dict[str, bytes] | None = None) -> GroupMetadataValue:
        """The GroupMetadataValue of the group as it stands (with `assignments` if given)."""
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=self.protocol,
            leader=self.leader,
            current_state_timestamp=now_ms,
            members=tuple(
                MemberMetadata(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host,
                    m.rebalance_timeout_ms, m.session_timeout_ms, m.metadata(self.protocol),
                    m.assignment if assignments is None else assignments.get(m.member_id, b""))
                for m in self.members.values()),
        )

    def apply_value(self, value: GroupMetadataValue, now_ms: int) -> None:
        """Make the persistent part of the group what `value` says. Members already present
        (the live path) keep their live fields and full protocol list; members only in the
        record (the load path) are created with the one protocol the record knows."""
        self.protocol_type = value.protocol_type or None
        self.generation = value.generation
        self.protocol = value.protocol
        self.leader = value.leader
        members: dict[str, Member] = {}
        for mm in value.members:
            member = self.members.get(mm.member_id)
            if member is None:
                protocols = (Protocol(value.protocol, mm.subscription),) if value.protocol else ()
                member = Member(
                    mm.member_id, mm.group_instance_id, mm.client_id, mm.client_host,
                    mm.rebalance_timeout, mm.session_timeout, value.protocol_type, protocols,
                    heartbeat_deadline=now_ms + mm.session_timeout)
            member.assignment = mm.assignment
            members[mm.member_id] = member
        self.members = members
        self.pending_sync &= members.keys()
        self.state = GroupState.STABLE if members else GroupState.EMPTY
        ts = value.current_state_timestamp
        self.state_timestamp = None if ts == NO_TIMESTAMP else ts
        self.subscribed_topics = self.compute_subscribed_topics()
