"""Plain request/response types of the group coordinator core (what the kio handlers map to
and from). Field names follow Kafka's JSON schemas in snake case; defaults are Kafka's."""

from __future__ import annotations

from dataclasses import dataclass

from ..constants import NO_LEADER_EPOCH
from ..coordinator_runtime import Completion as Completion, CoordinatorResult  # Completion: re-exported for the cores
from .errors import GroupErrorCode

E = GroupErrorCode


@dataclass(frozen=True, slots=True)
class Protocol:
    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str  # "" for a member that has none yet
    protocol_type: str
    protocols: tuple[Protocol, ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int = -1  # JoinGroup v0 has none: the session timeout is used
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = False  # JoinGroup v4+: answer MEMBER_ID_REQUIRED first
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResponse:
    error: E
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinMember, ...] = ()  # only the leader gets them
    skip_assignment: bool = False  # v9+: a static leader rejoined a Stable group


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    generation_id: int
    member_id: str
    assignments: tuple[tuple[str, bytes], ...] = ()  # from the leader: (member id, assignment)
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class SyncResponse:
    error: E
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveMemberResult:
    member_id: str
    group_instance_id: str | None
    error: E


@dataclass(frozen=True, slots=True)
class LeaveResponse:
    error: E
    members: tuple[LeaveMemberResult, ...] = ()


@dataclass(frozen=True, slots=True)
class CommitOffset:
    topic: str
    partition: int
    offset: int
    metadata: str | None = ""
    leader_epoch: int = NO_LEADER_EPOCH


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    group_id: str
    offsets: tuple[CommitOffset, ...]
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    retention_time_ms: int = -1  # OffsetCommit v2..v4 only; -1 = the broker's retention


@dataclass(frozen=True, slots=True)
class PartitionResult:
    topic: str
    partition: int
    error: E


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int  # -1 when nothing is committed
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    error: E = E.NONE


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    error: E
    partitions: tuple[FetchedOffset, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetDeleteResponse:
    error: E
    partitions: tuple[PartitionResult, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    error: E
    state: str  # "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"
    protocol_type: str
    protocol: str
    members: tuple[DescribedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class GroupResult:
    group_id: str
    error: E


# What every core call returns (the runtime's CoordinatorResult): `records` are appended to the
# group's `__consumer_offsets` partition before any response (this one or those in
# `completions`) is sent; `response` None parks the request until the rebalance moves on, and its
# answer arrives later as the Completion with this `ticket`, from a later call or from `tick`.
Result = CoordinatorResult
