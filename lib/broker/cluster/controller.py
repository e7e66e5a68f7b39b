"""The controller's decisions (Kafka's KafkaController / PartitionStateMachine, for storage that
every broker shares): which broker leads each partition. Pure functions over the cluster's
state; `node.ClusterNode` applies what they return, each change by compare-and-set on the
partition state's version, fenced by the controller epoch.

With shared storage any live broker can lead any partition: a "replica" list here is only the
order of preference (Kafka's preferred replica first). A partition whose leader is not live gets
the first live broker of that order, with the leader epoch raised; a partition led by another
broker while its preferred one is live again (for `preferred_delay_ms`) moves back, as Kafka's
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


def initial_states(topic: str, partitions: Iterable[int], brokers: Iterable[int],
                   controller_epoch: int = 0) -> dict[int, PartitionState]:
    """A new topic's partition states: each led by its preferred broker, at epoch 0."""
    live = sorted(brokers)
    out = {}
    for p in partitions:
        order = preferred_order(topic, p, live)
        out[p] = PartitionState(order[0] if order else NO_LEADER, 0, order, controller_epoch)
    return out


def elect(topic: str, partition: int, current: Versioned[PartitionState], live: Mapping[int, int], now_ms: int,
          *, preferred_delay_ms: int, controller_epoch: int) -> LeaderChange | None:
    """The change one partition needs, if any. `live`: broker id -> when it registered (ms)."""
    state = current.value
    order = state.replicas or tuple(sorted(live))
    if state.leader not in live:
        candidates = [b for b in order if b in live] or sorted(live)
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


def reassign(topic: str, partition: int, current: Versioned[PartitionState], broker_id: int, live: Iterable[int],
             controller_epoch: int) -> LeaderChange | None:
    """AlterPartitionReassignments to one broker: it goes first in the order of preference (the
    others keep theirs behind it) and leads, with the epoch raised if the leader changes; None
    when that is the state already."""
    state = current.value
    order = (broker_id,) + tuple(b for b in (state.replicas or sorted(live)) if b != broker_id)
    if order == state.replicas and state.leader == broker_id:
        return None
    moves = state.leader != broker_id
    return LeaderChange(topic, partition,
                        PartitionState(broker_id, state.leader_epoch + (1 if moves else 0), order, controller_epoch),
                        current.version, f"reassigned to broker {broker_id}")
