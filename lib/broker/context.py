"""What handlers see of the broker: its config, identity, partitions and shared services."""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from topiclake.archive.reader import TopicTables
from topiclake.segments.atomic import atomic_write, create_exclusive
from topiclake.segments.storage import CLUSTER_DEFAULT, StorageLayout

from .config import BrokerConfig
from .fetch_sessions import FetchSessionCache
from .group.coordinator import GroupCoordinator
from .client_quotas import ClientQuotas
from .leadership import Leadership, SingleBrokerLeadership
from .partitions import PartitionManager
from .request_metrics import RequestMetrics
from .security.service import SecurityService
from .share.service import ShareService
from .throttle import Throttler
from .txn.coordinator import TransactionCoordinator

PRODUCER_ID_BLOCK = 1000


class ProducerIdAllocator:
    """Producer ids that are never reused across restarts: blocks of ids are reserved in
    <root>/cluster/producer_ids.json before any id of the block is handed out (Kafka's
    controller hands out blocks the same way).

    `shared` (cluster mode: many brokers on the root): a block is reserved by creating
    <root>/cluster/producer-id-blocks/<first id> exclusively, so two brokers never get the same
    block (Kafka's /latest_producer_id_block, with the file system's exclusive create as the
    compare-and-set)."""

    def __init__(self, layout: StorageLayout, *, shared: bool = False,
                 reserve_block: Callable[[int], int] | None = None):
        """`reserve_block(size)`: a bucket root reserves blocks in the bucket (BucketService)."""
        self.path = layout.cluster_dir / "producer_ids.json"
        self.blocks_dir = layout.producer_id_blocks_dir
        self.shared = shared
        self.reserve_block = reserve_block
        self._next = 0
        self._end = 0

    def next_id(self) -> int:
        if self._next >= self._end:
            if self.reserve_block is not None:
                start = self.reserve_block(PRODUCER_ID_BLOCK)
            else:
                start = self._reserve_shared() if self.shared else self._reserve()
            self._next, self._end = start, start + PRODUCER_ID_BLOCK
        pid = self._next
        self._next += 1
        return pid

    def _reserve(self) -> int:
        start = 0
        if self.path.exists():
            start = int(json.loads(self.path.read_text())["next_block_start"])
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps({"next_block_start": start + PRODUCER_ID_BLOCK}).encode())
        return start

    def _reserve_shared(self) -> int:
        self.blocks_dir.mkdir(parents=True, exist_ok=True)
        taken = [int(name) for name in os.listdir(self.blocks_dir) if name.isdigit()]
        start = max(taken) + PRODUCER_ID_BLOCK if taken else 0
        while not create_exclusive(self.blocks_dir / f"{start:020d}", b""):
            start += PRODUCER_ID_BLOCK  # another broker took it first
        return start


@dataclass
class BrokerContext:
    config: BrokerConfig
    layout: StorageLayout
    partitions: PartitionManager
    cluster_id: str
    producer_ids: ProducerIdAllocator
    groups: GroupCoordinator  # the group coordinator (started by the server)
    txn: TransactionCoordinator  # the transaction coordinator (started by the server)
    throttle: Throttler  # byte-rate client quotas
    security: SecurityService  # listeners' TLS, SASL, the authorizer ([security])
    share: ShareService  # share groups: their share-partitions and __share_group_state (started by the server)
    shutting_down: asyncio.Event = field(default_factory=asyncio.Event)
    leadership: Leadership | None = None  # who leads each partition (set by create)
    # Event counters (e.g. fetch.sendfile.bytes / fetch.copied.bytes: which path record bytes took).
    metrics: Counter = field(default_factory=Counter)
    requests: RequestMetrics = field(default_factory=RequestMetrics)  # per API: requests, errors, latency
    # The topics' tables: the remote tier of a topic with remote.storage.enable (docs/ARCHIVE.md).
    archive: TopicTables | None = None
    # KIP-227 incremental fetch sessions (lib/broker/fetch_sessions.py); sized by create.
    fetch_sessions: FetchSessionCache = field(default_factory=FetchSessionCache)

    @classmethod
    def create(cls, config: BrokerConfig, bucket: Any = None) -> "BrokerContext":
        """`bucket`: a bucket root's BucketService (config.root is then its cache directory)."""
        layout = StorageLayout(config.root)
        for directory in (layout.cluster_dir, layout.topics_dir, layout.logs_dir):
            os.makedirs(directory, exist_ok=True)
        clustered = config.cluster.enabled
        partitions = PartitionManager(layout, default_partitions=config.num_partitions,
                                      producer_id_expiration_ms=config.producer_id_expiration_ms, bucket=bucket)
        # Kafka 4.1+ controllers record the cluster-wide min.insync.replicas when a cluster is first
        # activated (KIP-966), so every topic describes it as DYNAMIC_DEFAULT_BROKER_CONFIG; so does the
        # first broker of a storage root (a no-op once the cluster's broker configs exist).
        partitions.registry.broker_configs.create({CLUSTER_DEFAULT: {"min.insync.replicas": "1"}})
        producer_ids = ProducerIdAllocator(layout, shared=clustered,
                                           reserve_block=None if bucket is None else bucket.reserve_producer_ids)
        groups = GroupCoordinator(partitions, config.groups, config.share)
        txn = TransactionCoordinator(partitions, producer_ids, config.transactions,
                                     offsets_partition_for=groups.partition_for,
                                     offsets_marker=groups.complete_transaction)
        shutting_down = asyncio.Event()
        context = cls(config=config, layout=layout, partitions=partitions,
                      cluster_id=layout.cluster_id(), producer_ids=producer_ids, groups=groups, txn=txn,
                      throttle=Throttler(ClientQuotas(layout)),
                      security=SecurityService(config.security, config.root, config.bound_listeners),
                      share=ShareService(partitions, groups, config.share, shutting_down=shutting_down),
                      shutting_down=shutting_down, archive=_archive(config, bucket),
                      fetch_sessions=FetchSessionCache(config.max_incremental_fetch_session_cache_slots,
                                                       config.min_incremental_fetch_session_eviction_ms))
        if clustered:
            context.leadership = _cluster_node(context)
        else:
            # The server may rebind the config (ephemeral ports): endpoints are read through the context.
            context.leadership = SingleBrokerLeadership(
                config.broker_id, lambda listener: context.config.endpoint_for(listener),
                **({} if bucket is None else {"epoch_of": partitions.leader_epoch_of}))
        return context

    @property
    def broker_id(self) -> int:
        return self.config.broker_id


def _archive(config: BrokerConfig, bucket: Any) -> TopicTables:
    """The topics' tables under the storage root: <root>/tables/<topic>, in the bucket for a bucket root."""
    from topiclake.store.root import LocalRoot

    root = bucket.settings.root if bucket is not None else LocalRoot(Path(config.root).resolve())
    options = root.delta_storage_options() or None
    return TopicTables(lambda topic: (root.uri("tables", topic), options))


def _cluster_node(context: BrokerContext) -> Leadership:
    """Cluster mode: this broker's membership (ZooKeeper), which partitions open (only those it
    leads) and which internal-topic partitions the coordinators serve (those it leads too)."""
    from .cluster.coordination import BrokerInfo
    from .cluster.zookeeper import ZooKeeperCoordination
    from .cluster_node import ClusterNode
    from .interbroker import InterBrokerClient

    config = context.config
    runtimes = {r.topic.name: r for r in (context.groups.runtime, context.txn.runtime, context.share.store.runtime)}
    for runtime in runtimes.values():
        runtime.owns_every_partition = False  # leadership loads and unloads them

    def registration() -> BrokerInfo:  # asked once the listeners are bound (their ports known)
        current = context.config
        endpoints = tuple(f"{lsn.name}://{':'.join(map(str, current.endpoint_for(lsn.name)))}"
                          for lsn in current.bound_listeners)
        return BrokerInfo(current.broker_id, current.public_host, current.public_port, endpoints,
                          current.cluster.rack)

    node = ClusterNode(config.cluster, ZooKeeperCoordination(config.cluster, config.broker_id), context.partitions,
                       broker_id=config.broker_id, registration=registration, runtimes=runtimes)
    context.partitions.leadership = node
    # Transactions span brokers: markers go to the partitions' leaders, verification to the
    # id's coordinator, over the first listener (the inter-broker one).
    context.txn.leadership = node
    context.txn.peers = InterBrokerClient(node, config.bound_listeners[0].name, config.broker_id)
    # Share-partition leaders reach each key's share coordinator (the leader of its
    # __share_group_state partition), on connections of their own (state writes are frequent).
    context.share.persister.use_cluster(node, InterBrokerClient(node, config.bound_listeners[0].name,
                                                                config.broker_id))
    return node
