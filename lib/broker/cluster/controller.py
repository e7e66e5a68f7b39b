"""The controller's decisions (Kafka's KafkaController / PartitionStateMachine, for storage that
every broker shares): which broker leads each partition. Pure functions over the cluster's
state; `node.ClusterNode` applies what they return, each change by compare-and-set on the
partition state's version, fenced by the controller epoch.

With shared storage any live broker can lead any partition: a partition's replicas (as many as
its replication factor) hold no copy, they are the brokers that should lead it, in order of
preference (Kafka's preferred replica first). A partition whose leader is not live gets the first
live broker of its failover order, with the leader epoch raised: its replicas first, then, when
all of them are down, the other live brokers in the partition's preferred order over all brokers
(the storage is shared, so any of them can). A partition led by another broker while its
preferred one is live again (for `preferred_delay_ms`) moves back, as Kafka's
auto.leader.rebalance does.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Iterable, Mapping

from .coordination import NO_LEADER, PartitionState, Versioned


@dataclass(frozen=True, slots=True)
class LeaderChange:
    topic: str
    partition: int
    state: PartitionState  # the new state
    expected_version: int  # the version it replaces (compare-and-set)
    reason: str


def preferred_order(topic: str, partition: int, brokers: Iterable[int]) -> tuple[int, ...]:
    """The brokers in this partition's order of preference (Kafka's assignReplicasToBrokers): the
    first rotates by one per partition from a start index per topic, and the rest follow at a
    shift that changes every len(brokers) partitions, so that the partitions of a broker that
    dies spread over all the others instead of all falling to its neighbour."""
    ids = sorted(brokers)
    n = len(ids)
    if n == 0:
        return ()
    seed = zlib.crc32(topic.encode())
    first = (seed + partition) % n
    if n <= 2:
        return tuple(ids[first:] + ids[:first])
    shift = (seed // n + partition // n) % (n - 1)
    return (ids[first],) + tuple(ids[(first + 1 + (shift + j) % (n - 1)) % n] for j in range(n - 1))


def initial_states(topic: str, partitions: Iterable[int], brokers: Iterable[int], controller_epoch: int = 0, *,
                   factor: int | None = None,
                   assignments: Mapping[int, tuple[int, ...]] | None = None) -> dict[int, PartitionState]:
    """A new topic's partition states, each led by its preferred broker at epoch 0: its replicas
    are `assignments[p]` when given, else the first `factor` brokers of its preferred order
    (every live broker when `factor` is None)."""
    live = sorted(brokers)
    out = {}
    for p in partitions:
        order = tuple(assignments[p]) if assignments is not None else preferred_order(topic, p, live)[:factor]
        out[p] = PartitionState(order[0] if order else NO_LEADER, 0, order, controller_epoch)
    return out


def failover_order(topic: str, partition: int, replicas: tuple[int, ...], live: Iterable[int]) -> list[int]:
    """The live brokers in the order they should lead the partition: its live replicas, then the
    other live brokers in the partition's preferred order (so that the partitions of brokers that
    are all down spread over the others instead of all falling to one)."""
    live = set(live)
    rest = [b for b in preferred_order(topic, partition, live) if b not in replicas]
    return [b for b in replicas if b in live] + rest


def elect(topic: str, partition: int, current: Versioned[PartitionState], live: Mapping[int, int], now_ms: int,
          *, preferred_delay_ms: int, controller_epoch: int) -> LeaderChange | None:
    """The change one partition needs, if any. `live`: broker id -> when it registered (ms)."""
    state = current.value
    order = state.replicas or tuple(sorted(live))
    if state.leader not in live:
        candidates = failover_order(topic, partition, order, live)
        if not candidates:
            return None  # no broker at all: nothing can lead (the controller itself is one, so never)
        new = candidates[0]
        return LeaderChange(topic, partition, PartitionState(new, state.leader_epoch + 1, order, controller_epoch),
                            current.version, f"leader {state.leader} is not live")
    preferred = order[0] if order else state.leader
    if preferred != state.leader and preferred in live and now_ms - live[preferred] >= preferred_delay_ms:
        return LeaderChange(topic, partition,
                            PartitionState(preferred, state.leader_epoch + 1, order, controller_epoch),
                            current.version, f"preferred leader {preferred} is back")
    return None


def elect_preferred(topic: str, partition: int, current: Versioned[PartitionState], live: Iterable[int],
                    controller_epoch: int) -> LeaderChange | None:
    """ElectLeaders (PREFERRED): the preferred broker leads now, if it is live and does not yet."""
    state = current.value
    if not state.replicas or state.replicas[0] == state.leader or state.replicas[0] not in set(live):
        return None
    return LeaderChange(topic, partition,
                        PartitionState(state.replicas[0], state.leader_epoch + 1, state.replicas, controller_epoch),
                        current.version, "preferred leader election")


def reassign(topic: str, partition: int, current: Versioned[PartitionState], replicas: tuple[int, ...],
             controller_epoch: int) -> LeaderChange | None:
    """AlterPartitionReassignments to live brokers: they become the partition's replicas (nothing
    is copied: the storage is shared, so the reassignment completes as it is written) and the
    first leads, with the epoch raised if the leader changes; None when that is the state already."""
    state = current.value
    if not replicas or (replicas == state.replicas and state.leader == replicas[0]):
        return None
    moves = state.leader != replicas[0]
    return LeaderChange(topic, partition,
                        PartitionState(replicas[0], state.leader_epoch + (1 if moves else 0), replicas,
                                       controller_epoch),
                        current.version, f"reassigned to brokers {list(replicas)}")
