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
from typing import Callable, Literal, Protocol

from .constants import LEADER_EPOCH

NO_LEADER = -1  # Kafka's LeaderAndIsr.NoLeader
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
class PartitionLeader:
    leader: int  # NO_LEADER while the partition has none
    epoch: int


class Leadership(Protocol):
    broker_id: int
    clustered: bool

    def leader(self, topic: str, partition: int) -> PartitionLeader | None:
        """The partition's leader and epoch; None when its state is not known (yet)."""

    def leads(self, topic: str, partition: int) -> bool:
        """Whether this broker serves the partition now."""

    def brokers(self, listener: str) -> list[BrokerNode]:
        """Every live broker, with its endpoint on `listener` (the one the client came in on)."""

    def controller_id(self) -> int: ...

    def topic_created(self, topic: str, partitions: int) -> None:
        """A topic was created in the registry: give its partitions leaders."""

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

    async def reassign(self, topic: str, partition: int, broker_id: int) -> Reassignment:
        """AlterPartitionReassignments to one live broker: it becomes the partition's preferred
        broker and its leader."""


class SingleBrokerLeadership:
    """One broker on the root: it leads every partition, at epoch 0, and is the controller."""

    clustered = False

    def __init__(self, broker_id: int, endpoint_for: Callable[[str], tuple[str, int]]):
        self.broker_id = broker_id
        self._endpoint_for = endpoint_for  # listener name -> advertised (host, port)

    def leader(self, topic: str, partition: int) -> PartitionLeader:
        return PartitionLeader(self.broker_id, LEADER_EPOCH)

    def leads(self, topic: str, partition: int) -> bool:
        return True

    def brokers(self, listener: str) -> list[BrokerNode]:
        host, port = self._endpoint_for(listener)
        return [BrokerNode(self.broker_id, host, port)]

    def controller_id(self) -> int:
        return self.broker_id

    def topic_created(self, topic: str, partitions: int) -> None:
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

    async def reassign(self, topic: str, partition: int, broker_id: int) -> Reassignment:
        return "not needed"  # this broker is the only one, and leads
