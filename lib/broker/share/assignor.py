"""The share groups' "simple" assignor (KIP-932): every subscribed partition goes to at least
one member, and a member gets at least one partition when there are more members than
partitions (several members then share a partition: share groups allow it, their records are
locked one by one, not their partitions).

Deterministic: topics and members are taken in sorted order and one round-robin runs across the
topics, so with many one-partition topics the members still take turns.
"""

from __future__ import annotations

from typing import Mapping

Assignment = dict[str, dict[str, frozenset[int]]]  # member -> topic -> partitions


def simple_assign(subscriptions: Mapping[str, frozenset[str]], partition_counts: Mapping[str, int]) -> Assignment:
    """`subscriptions`: member -> subscribed topics; `partition_counts`: topic -> partitions
    (topics missing here do not exist yet and get no assignment)."""
    out: dict[str, dict[str, set[int]]] = {m: {} for m in subscriptions}
    turn = 0
    for topic in sorted(partition_counts):
        count = partition_counts[topic]
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members or count < 1:
            continue
        if len(members) <= count:
            for p in range(count):
                out[members[(turn + p) % len(members)]].setdefault(topic, set()).add(p)
            turn += count
        else:
            for i, member in enumerate(members):
                out[member].setdefault(topic, set()).add((turn + i) % count)
            turn += len(members)
    return {m: {t: frozenset(ps) for t, ps in parts.items()} for m, parts in out.items()}
