"""Kafka API handlers, one module per API family; importing this package registers them all."""

from .registry import REGISTRY, HandlerRegistry, Route

# Each import registers its routes with REGISTRY.
from . import api_versions, cluster, configs, fetch, list_offsets, metadata, produce, producer_ids, topics  # noqa: F401
from . import offset_for_leader_epoch  # noqa: F401  (KIP-320: where a leader epoch ended)
from . import consumer_groups, groups, offsets  # noqa: F401  (group coordinator APIs)
from . import transactions  # noqa: F401  (transaction coordinator APIs)
from . import delete_records, log_dirs, quorum, quotas, replicas, topic_partitions  # noqa: F401  (cluster admin APIs)
from . import producers, transactions_admin  # noqa: F401  (producer and transaction state, read)
from . import acls, sasl, scram_credentials  # noqa: F401  (security: SASL, ACLs, SCRAM users)
from . import share_fetch, share_groups, share_offsets  # noqa: F401  (share groups, KIP-932)
from . import share_state  # noqa: F401  (the share coordinator's APIs, between brokers)

__all__ = ["REGISTRY", "HandlerRegistry", "Route"]
