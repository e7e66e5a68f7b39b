"""Cluster features (KIP-584) this broker reports in ApiVersions: each feature's supported range
and the level it runs at (finalized). Clients read them to decide what to use: a Kafka 4.x
producer uses transactions v2 (KIP-890 part 2) only when transaction.version is finalized at 2;
group.version 1 is KIP-848's consumer protocol. The finalized levels are fixed (one broker, no
UpdateFeatures), so their epoch never moves."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Feature:
    name: str
    min_version: int
    max_version: int
    finalized: int


FEATURES = (
    Feature("group.version", 0, 1, 1),
    Feature("transaction.version", 0, 2, 2),
)
FINALIZED_EPOCH = 0
