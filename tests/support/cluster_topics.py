"""Topics on a test cluster: created through a real admin client, settled once every live broker's
Metadata agrees."""

from __future__ import annotations

from topiclake.broker.cluster.controller import preferred_order

from tests.support.cluster_brokers import ClusterBrokers
from tests.support.cluster_clients import metadata
from tests.support.waits import wait_for


def create_topic(cluster: ClusterBrokers, topic: str, partitions: int) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)
    return wait_for(lambda: settled(cluster, topic, partitions), 30, what=f"{topic}'s leaders")


def settled(cluster: ClusterBrokers, topic: str, partitions: int, *, preferred: bool = False):
    """Every live broker's Metadata, once they agree: every live broker listed, every partition led
    by a live broker (its preferred one when `preferred`). Falsy until then."""
    live = set(cluster.live())
    try:
        views = [metadata(cluster.bootstrap_of(b), topic) for b in sorted(live)]
    except OSError:
        return None
    first = views[0]
    if any(v.brokers != live or v.partitions != first.partitions for v in views):
        return None
    if len(first.partitions) != partitions or any(p.leader not in live for p in first.partitions.values()):
        return None
    if preferred and any(v.leader != preferred_leader(topic, p) for p, v in first.partitions.items()):
        return None
    return first.partitions


def preferred_leader(topic: str, partition: int) -> int:
    """Where the controller puts a partition of a topic created with brokers 1-3 live (Metadata
    names only the leader as replica: the storage is shared, nothing is replicated)."""
    return preferred_order(topic, partition, (1, 2, 3))[0]
