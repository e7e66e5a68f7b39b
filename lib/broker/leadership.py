"""Who leads each partition, as the request paths ask it (Kafka's MetadataCache plus the leader
check of ReplicaManager).

A broker alone on its storage root leads every partition at epoch 0, is the controller, and is
the only broker (`SingleBrokerLeadership`: today's behaviour, unchanged). In cluster mode the
answers come from ZooKeeper's partition states and live-broker registrations
(`cluster.ClusterLeadership`); `leads` is True only once this broker finished taking a partition
over (fenced the old leader in storage and recovered the log).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Mapping, Protocol

from .constants import LEADER_EPOCH

NO_LEADER = -1  # Kafka's LeaderAndIsr.NoLeader
NO_CONTROLLER = -1  # Kafka's MetadataResponse.NO_CONTROLLER_ID
# A preferred-leader election's outcome (ElectLeaders): the preferred broker was made leader; it
# leads already; it is not live (or the state moved meanwhile); the partition is not known.
Election = Literal["elected", "not needed", "not available", "unknown"]
# A reassignment's outcome (AlterPartitionReassignments): the partition's preferred broker is now
# the one named, and leads it if live; it was so already; the partition is not known; its state
# changed while the reassignment was written (ask again).
Reassignment = Literal["moved", "not needed", "unknown", "conflict"]


@dataclass(frozen=True, slots=True)
class BrokerNode:
    """A live broker as Metadata describes it, on one listener."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class Controller:
    """The broker holding the controller role and the controller epoch it was elected at."""

    broker_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Replication:
    """A new topic's replicas: `factor` brokers per partition in Kafka's preferred order (None:
    the configured default), or `assignments` naming each partition's brokers (preferred first)."""

    factor: int | None = None
    assignments: Mapping[int, tuple[int, ...]] | None = None


DEFAULT_REPLICATION = Replication()


@dataclass(frozen=True, slots=True)
class ClusterHealth:
    """What /metrics reports about the cluster from one broker (docs/METRICS.md, "Cluster
    health"). The cluster-wide counts are the controller's view, zero on every other broker (as
    Kafka's controller gauges), so a sum over the brokers counts each once."""

    active_controller: bool  # this broker holds the controller role
    session: str  # its ZooKeeper session: connected, suspended or lost (SessionState's values)
    zookeeper_disconnects: int  # connection losses (suspended) since start
    zookeeper_expires: int  # sessions expired (lost) since start
    elections: int  # leader changes this broker wrote (as controller or for ElectLeaders, reassignments)
    leaders: int  # partitions this broker leads and serves
    replicas: int  # partitions that name this broker among their replicas
    under_replicated: int  # partitions it leads with a replica that is not live
    # the controller's view, 0 elsewhere
    live_brokers: int = 0
    topics: int = 0
    partitions: int = 0
    offline: int = 0  # partitions without a live leader
    preferred_imbalance: int = 0  # partitions led by another broker than their preferred one

    @classmethod
    def alone(cls, topics: int, partitions: int) -> "ClusterHealth":
        """A broker alone: the controller, the leader and only replica of every partition."""
        return cls(True, "connected", 0, 0, 0, partitions, partitions, 0, 1, topics, partitions)


@dataclass(frozen=True, slots=True)
class PartitionLeader:
    """A partition as Metadata describes it. The storage is shared, so a "replica" holds no copy:
    `replicas` are the brokers that should lead it, in preferred order (the first is the preferred
    broker; a leader from outside them, when all of them are down, is listed after them), `isr`
    the live ones among them and `offline` the others. Empty `replicas`: the leader alone."""

    leader: int  # NO_LEADER while the partition has none
    epoch: int
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline: tuple[int, ...] = ()


class Leadership(Protocol):
    broker_id: int
    clustered: bool

    def leader(self, topic: str, partition: int) -> PartitionLeader | None:
        """The partition's leader and epoch; None when its state is not known (yet)."""

    def leads(self, topic: str, partition: int) -> bool:
        """Whether this broker serves the partition now."""

    def brokers(self, listener: str) -> list[BrokerNode]:
        """Every live broker, with its endpoint on `listener` (the one the client came in on)."""

    def controller_id(self) -> int:
        """The broker that holds the controller role, or NO_CONTROLLER while none does."""

    def controller(self) -> Controller | None:
        """The controller and its epoch, None while there is none."""

    def topic_created(self, topic: str, partitions: int, replication: Replication = DEFAULT_REPLICATION) -> None:
        """A topic was created in the registry: give its partitions replicas and leaders."""

    def partitions_added(self, topic: str, old_count: int, new_count: int) -> None: ...

    def topic_deleted(self, topic: str) -> None: ...

    def configs_changed(self, topic: str | None) -> None:
        """A topic's configs (`topic`) or the cluster-wide defaults (None) changed here: every
        other broker re-reads them for the logs it has open."""

    async def elect_preferred(self, topic: str, partition: int) -> Election:
        """ElectLeaders (PREFERRED) for one partition."""

    def not_preferred(self) -> list[tuple[str, int]]:
        """The partitions whose preferred broker does not lead them."""

    def broker_ids(self) -> set[int]:
        """The ids of the live brokers."""

    async def reassign(self, topic: str, partition: int, replicas: tuple[int, ...]) -> Reassignment:
        """AlterPartitionReassignments to live brokers: they become the partition's replicas, the
        first its preferred broker and its leader."""


class SingleBrokerLeadership:
    """One broker on the root: it leads every partition, at epoch 0, and is the controller. On a
    bucket root each partition is led at the epoch its takeover claimed (`epoch_of`)."""

    clustered = False

    def __init__(self, broker_id: int, endpoint_for: Callable[[str], tuple[str, int]],
                 epoch_of: Callable[[str, int], int] = lambda topic, partition: LEADER_EPOCH):
        self.broker_id = broker_id
        self._endpoint_for = endpoint_for  # listener name -> advertised (host, port)
        self._epoch_of = epoch_of

    def leader(self, topic: str, partition: int) -> PartitionLeader:
        return PartitionLeader(self.broker_id, self._epoch_of(topic, partition))

    def leads(self, topic: str, partition: int) -> bool:
        return True

    def brokers(self, listener: str) -> list[BrokerNode]:
        host, port = self._endpoint_for(listener)
        return [BrokerNode(self.broker_id, host, port)]

    def controller_id(self) -> int:
        return self.broker_id

    def controller(self) -> Controller:
        return Controller(self.broker_id, LEADER_EPOCH)

    def topic_created(self, topic: str, partitions: int, replication: Replication = DEFAULT_REPLICATION) -> None:
        pass

    def partitions_added(self, topic: str, old_count: int, new_count: int) -> None:
        pass

    def topic_deleted(self, topic: str) -> None:
        pass

    def configs_changed(self, topic: str | None) -> None:
        pass

    async def elect_preferred(self, topic: str, partition: int) -> Election:
        return "not needed"  # the one replica leads

    def not_preferred(self) -> list[tuple[str, int]]:
        return []

    def broker_ids(self) -> set[int]:
        return {self.broker_id}

    async def reassign(self, topic: str, partition: int, replicas: tuple[int, ...]) -> Reassignment:
        return "not needed"  # this broker is the only one, and leads
