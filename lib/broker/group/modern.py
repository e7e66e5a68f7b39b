"""What KIP-848 consumer groups and KIP-932 share groups share (Kafka's `coordinator.group.modern`):
partitions by topic name in memory and by topic id in their records, and the one heartbeat
response both protocols answer with."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from .errors import GroupErrorCode as E

Partitions = Mapping[str, frozenset[int]]  # topic -> partitions
# (topic id, partitions) per topic, as records hold them
TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]
TopicIds = Callable[[str], uuid.UUID | None]  # topic name -> id; None: no such topic
TopicNames = Callable[[uuid.UUID], str | None]  # topic id -> name; None: no such topic
JOIN_EPOCH = 0
LEAVE_EPOCH = -1


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    """ConsumerGroupHeartbeat's and ShareGroupHeartbeat's answer, in the cores' terms."""

    error: E
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Partitions | None = None  # None: unchanged
    error_message: str | None = None


def clean(parts: Mapping[str, Iterable[int]]) -> dict[str, frozenset[int]]:
    """Frozen sets, topics without partitions left out."""
    return {t: frozenset(p) for t, p in parts.items() if p}


def ids(parts: Partitions, topic_id: TopicIds) -> TopicPartitions:
    """Names -> ids, sorted by topic id; a topic without an id (deleted) is left out."""
    pairs = [(tid, tuple(sorted(ps))) for t, ps in parts.items() if ps and (tid := topic_id(t)) is not None]
    return tuple(sorted(pairs, key=lambda pair: pair[0].bytes))


def names(parts: TopicPartitions, topic_name: TopicNames) -> dict[str, frozenset[int]]:
    """Ids -> names; partitions of a topic that no longer exists are dropped."""
    return clean({name: frozenset(ps) for tid, ps in parts if (name := topic_name(tid)) is not None})
