"""What the admin functions answer: small frozen dataclasses, never raw kio responses."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

TP = tuple[str, int]  # (topic, partition)
LATEST, EARLIEST = -1, -2  # ListOffsets timestamps: the log end offset, the log start offset
EARLIEST_LOCAL = -4  # the local log's start (differs from EARLIEST when the topic's table is its remote tier)


@dataclass(frozen=True)
class Node:
    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class ClusterInfo:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[Node, ...]  # sorted by id


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    start: int = -1  # log start offset (-1: not asked, or its leader did not answer)
    end: int = -1  # log end offset
    local_start: int = -1  # the local log's start: above `start` where the topic's table is its remote tier

    @property
    def records(self) -> int:
        return max(self.end - self.start, 0)


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    internal: bool
    partitions: tuple[PartitionInfo, ...]  # sorted by partition

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)


@dataclass(frozen=True)
class CreatedTopic:
    name: str
    partitions: int
    topic_id: uuid.UUID


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None  # None: sensitive (hidden) or unset
    is_override: bool  # a dynamic topic config (kafka-topics --describe's Configs)


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    group_type: str  # classic, consumer, share
    state: str


@dataclass(frozen=True)
class Member:
    member_id: str
    client_id: str
    host: str
    assignment: tuple[TP, ...]  # sorted


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None  # a share group: the share-partition start offset
    end: int  # -1: the partition's leader did not answer
    lag: int | None
    owners: tuple[str, ...]  # member ids


@dataclass(frozen=True)
class GroupDetail:
    """A group as its coordinator describes it; `lags` once per partition (committed offsets,
    or a share group's share-partition starts, against each partition's leader's log end)."""

    group_id: str
    group_type: str
    state: str
    protocol_type: str  # classic groups: "consumer", "connect", ... ("" for the others)
    protocol: str  # a classic group's protocol (the assignor), else the group's assignor
    epoch: int  # KIP-848 and share groups' epoch; -1 for classic groups
    members: tuple[Member, ...]
    lags: tuple[PartitionLag, ...] = ()

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.lags)


@dataclass(frozen=True)
class GroupReport:
    """One group of a listing: described (`detail`), or why it could not be (`problem`)."""

    listing: GroupListing
    detail: GroupDetail | None
    problem: str | None


@dataclass(frozen=True)
class ScramCredential:
    mechanism: str  # SCRAM-SHA-256, SCRAM-SHA-512
    iterations: int
