"""The share groups' "simple" assignor (KIP-932): every subscribed partition goes to at least
one member, and every subscribed member gets at least one partition; when there are more members
than partitions, several members share one (share groups allow it: records are locked one by
one, not partitions).

Deterministic: partitions are taken in (topic, partition) order and each goes to the least
loaded of its topic's subscribers (the first by member id on ties); then each member left
without a partition joins the least shared partition it may take.
"""

from __future__ import annotations

from typing import Mapping

Assignment = dict[str, dict[str, frozenset[int]]]  # member -> topic -> partitions


def simple_assign(subscriptions: Mapping[str, frozenset[str]], partition_counts: Mapping[str, int]) -> Assignment:
    """`subscriptions`: member -> subscribed topics; `partition_counts`: topic -> partitions
    (topics missing here do not exist yet and get no assignment)."""
    members = sorted(subscriptions)
    load = {m: 0 for m in members}
    holders: dict[tuple[str, int], list[str]] = {}
    for topic in sorted(partition_counts):
        eligible = [m for m in members if topic in subscriptions[m]]
        for p in range(partition_counts[topic] if eligible else 0):
            chosen = min(eligible, key=lambda m: load[m])
            holders[(topic, p)] = [chosen]
            load[chosen] += 1
    for member in members:
        if load[member]:
            continue
        options = [tp for tp in holders if tp[0] in subscriptions[member]]
        if options:
            tp = min(options, key=lambda t: len(holders[t]))
            holders[tp].append(member)
            load[member] += 1
    out: dict[str, dict[str, set[int]]] = {m: {} for m in members}
    for (topic, p), owners in holders.items():
        for m in owners:
            out[m].setdefault(topic, set()).add(p)
    return {m: {t: frozenset(ps) for t, ps in parts.items()} for m, parts in out.items()}
