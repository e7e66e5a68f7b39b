"""Topics on one broker, created with a raw CreateTopics request (replication factor 1)."""

from __future__ import annotations

import datetime
import uuid

from kio.schema.create_topics.v7 import request as create_req
from kio.schema.errors import ErrorCode

from topiclake.client.conn import BrokerConnection


def create_topic(bootstrap: str, partitions: int = 1, name: str | None = None, **config: str) -> str:
    """Create `name` (a fresh random one by default) and return it; `config` keys may spell dots as
    underscores (flush_messages=...)."""
    name = name or f"t-{uuid.uuid4().hex[:10]}"
    with BrokerConnection(bootstrap) as client:
        result = create_on(client, name, partitions, **config)
    assert result.error_code == ErrorCode.none, result
    return name


def create_on(client: BrokerConnection, name: str, partitions: int = 1, **config: str):
    """One CreateTopics of `name` on `client`'s connection; the topic's answer (any error code)."""
    topic = create_req.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, assignments=(),
        configs=tuple(create_req.CreatableTopicConfig(name=k.replace("_", "."), value=v) for k, v in config.items()))
    return client.request(create_req.CreateTopicsRequest(
        topics=(topic,), timeout=datetime.timedelta(seconds=10), validate_only=False)).topics[0]
