"""Kafka's range assignor (`RangeAssignor.java`), used by the broker-side (KIP-848) protocol.

For each topic on its own: its partitions in number order, its subscribed members sorted
(`MemberInfo.compareTo`: members with a group.instance.id first, by instance id, then the rest
by member id, both in Java `String.compareTo` order), and member i takes the next contiguous
range of P // C partitions plus one while i < P % C — so the first P mod C members get one
extra (7 partitions over 3 members: 3, 2, 2). Topics without metadata are skipped; members
subscribed to nothing assignable get an empty assignment. The rack-aware pass is not done
(it needs client racks and replica racks, which topiclake's single broker does not have).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from .java import compare_key

Assignment = dict[str, dict[str, tuple[int, ...]]]  # member id -> topic -> partitions


@dataclass(frozen=True, slots=True)
class AssignorMember:
    member_id: str
    topics: frozenset[str]
    group_instance_id: str | None = None


def member_sort_key(m: AssignorMember) -> tuple:
    if m.group_instance_id is not None:
        return (0, compare_key(m.group_instance_id))
    return (1, compare_key(m.member_id))


def range_assign(members: Iterable[AssignorMember], partitions_per_topic: Mapping[str, int]) -> Assignment:
    """`partitions_per_topic` maps each topic with metadata to its partition count."""
    members = sorted(members, key=member_sort_key)
    result: Assignment = {m.member_id: {} for m in members}
    topics = {t for m in members for t in m.topics}
    for topic in sorted(topics):
        count = partitions_per_topic.get(topic)
        if count is None:
            continue
        consumers = [m for m in members if topic in m.topics]
        per, extra = divmod(count, len(consumers))
        start = 0
        for i, m in enumerate(consumers):
            size = per + (1 if i < extra else 0)
            if size:
                result[m.member_id][topic] = tuple(range(start, start + size))
            start += size
    return result
