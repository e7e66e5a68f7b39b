"""What the tools ask the cluster, one function each, over a ClusterClient: the cluster, topics
(Metadata), offsets (ListOffsets at each partition's leader), configs, creating, deleting and
altering topics, and reading a partition's records (Fetch at its leader). Groups are in
groups.py, ACLs and SCRAM users in security.py.

Answers are results.py's dataclasses; a refusal is a KafkaError (`what: CODE[: message]`).
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any, Iterable

from topiclake.segments.batch import Record, iter_batches

from .client import ClusterClient
from .errors import KafkaError, check
from .results import (EARLIEST, EARLIEST_LOCAL, LATEST, TP, ClusterInfo, ConfigEntry, CreatedTopic, Node, PartitionInfo,
                      TopicInfo)

TOPIC_RESOURCE = 2  # DescribeConfigs / IncrementalAlterConfigs resource type
DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs config_source of a topic override
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations
TIMEOUT = datetime.timedelta(seconds=30)
FETCH_MAX_BYTES = 4 << 20


def describe_cluster(client: ClusterClient) -> ClusterInfo:
    from kio.schema.describe_cluster.v1 import request as req

    resp = client.request_any(req.DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                         endpoint_type=1))
    check(resp.error_code, "describing the cluster", resp.error_message)
    nodes = sorted((Node(b.broker_id, b.host, b.port, b.rack) for b in resp.brokers), key=lambda n: n.node_id)
    return ClusterInfo(resp.cluster_id, resp.controller_id, tuple(nodes))


# ------------------------------------------------------------------------------------ topics
def topics(client: ClusterClient, names: Iterable[str] | None = None, *, offsets: bool = False) -> list[TopicInfo]:
    """Topics with their partitions, sorted by name: every topic the user may describe, or
    `names` (a name the cluster refuses raises, `describing topic T: CODE`). With `offsets`
    each partition's log start and end offsets, asked of its leader (-1 where it did not
    answer), and the local log's start (EARLIEST_LOCAL: above the log start where the topic's
    table is its remote tier)."""
    names = None if names is None else list(names)
    out = []
    for t in client.metadata(names).topics:
        if names is not None:
            check(t.error_code, f"describing topic {t.name}")
        elif t.error_code.value != 0 or not t.name:
            continue
        parts = sorted((PartitionInfo(p.partition_index, p.leader_id, p.leader_epoch, tuple(p.replica_nodes),
                                      tuple(p.isr_nodes)) for p in t.partitions), key=lambda p: p.partition)
        out.append(TopicInfo(t.name, t.topic_id, t.is_internal, tuple(parts)))
    out.sort(key=lambda t: t.name)
    if not offsets:
        return out
    keys = [(t.name, p.partition) for t in out for p in t.partitions]
    starts, ends = list_offsets(client, keys, EARLIEST), list_offsets(client, keys, LATEST)
    local = list_offsets(client, keys, EARLIEST_LOCAL)
    return [TopicInfo(t.name, t.topic_id, t.internal, tuple(
        PartitionInfo(p.partition, p.leader, p.leader_epoch, p.replicas, p.isr,
                      starts.get((t.name, p.partition), -1), ends.get((t.name, p.partition), -1),
                      local.get((t.name, p.partition), -1))
        for p in t.partitions)) for t in out]


def topic_names(client: ClusterClient) -> set[str]:
    """The topics this user may describe (Metadata filters by the DESCRIBE ACL)."""
    return {t.name for t in client.metadata(None).topics if t.error_code.value == 0 and t.name}


def partitions(client: ClusterClient, topic: str) -> list[int]:
    """The partition numbers of a topic (`topic T: CODE` when it cannot be described)."""
    [t] = client.metadata([topic]).topics
    check(t.error_code, f"topic {topic}")
    return sorted(p.partition_index for p in t.partitions)


def list_offsets(client: ClusterClient, keys: Iterable[TP], timestamp: int, *,
                 strict: bool = False) -> dict[TP, int]:
    """(topic, partition) -> the offset for `timestamp` (LATEST, EARLIEST, or ms: the first
    offset at or after it, -1 when none), each asked of the partition's leader. Partitions in
    error are left out, or with `strict` the first one raises."""
    from kio.schema.list_offsets.v7 import request as v7
    from kio.schema.list_offsets.v8 import request as v8

    req: Any = v8 if timestamp == EARLIEST_LOCAL else v7  # EARLIEST_LOCAL (-4) is ListOffsets v8's (KIP-405)

    def ask(node: int, chunk: list[TP]) -> dict:
        by_topic: dict[str, list] = {}
        for topic, partition in chunk:
            by_topic.setdefault(topic, []).append(req.ListOffsetsPartition(
                partition_index=partition, current_leader_epoch=-1, timestamp=timestamp))
        resp = client.request_node(node, req.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=tuple(
            req.ListOffsetsTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items())))
        return {(t.name, p.partition_index): p.offset if p.error_code.value == 0 else KafkaError(
            f"listing offsets of {t.name}-{p.partition_index}", p.error_code)
            for t in resp.topics for p in t.partitions}

    answers = client.on_leaders(keys, ask)
    failed = [a for a in answers.values() if isinstance(a, KafkaError)]
    if strict and failed:
        raise failed[0]
    return {k: v for k, v in answers.items() if not isinstance(v, KafkaError)}


def create_topic(client: ClusterClient, name: str, partitions: int, configs: dict[str, str]) -> CreatedTopic:
    from kio.schema.create_topics.v7 import request as req

    topic = req.CreatableTopic(name=name, num_partitions=partitions, replication_factor=-1, assignments=(),
                               configs=tuple(req.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()))
    [r] = client.request_any(req.CreateTopicsRequest(topics=(topic,), timeout=TIMEOUT, validate_only=False)).topics
    check(r.error_code, f"creating topic {name}", r.error_message)
    return CreatedTopic(name, r.num_partitions, r.topic_id)


def delete_topic(client: ClusterClient, name: str) -> None:
    from kio.schema.delete_topics.v6 import request as req

    [r] = client.request_any(req.DeleteTopicsRequest(
        topics=(req.DeleteTopicState(name=name, topic_id=uuid.UUID(int=0)),), timeout=TIMEOUT)).responses
    check(r.error_code, f"deleting topic {name}", r.error_message)


def create_partitions(client: ClusterClient, name: str, count: int) -> None:
    from kio.schema.create_partitions.v3 import request as req

    topic = req.CreatePartitionsTopic(name=name, count=count, assignments=None)
    [r] = client.request_any(req.CreatePartitionsRequest(topics=(topic,), timeout=TIMEOUT,
                                                         validate_only=False)).results
    check(r.error_code, f"adding partitions to {name}", r.error_message)


# ----------------------------------------------------------------------------------- configs
def topic_configs(client: ClusterClient, topic: str) -> list[ConfigEntry]:
    """Every config of the topic, sorted by name; sensitive values hidden (None)."""
    from kio.schema.describe_configs.v4 import request as req

    resource = req.DescribeConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=topic, configuration_keys=None)
    [result] = client.request_any(req.DescribeConfigsRequest(resources=(resource,), include_synonyms=False,
                                                             include_documentation=False)).results
    check(result.error_code, f"describing configs of {topic}", result.error_message)
    return sorted((ConfigEntry(c.name, None if c.is_sensitive else c.value, c.config_source == DYNAMIC_TOPIC_CONFIG)
                   for c in result.configs), key=lambda c: c.name)


def alter_topic_configs(client: ClusterClient, topic: str, set_values: dict[str, str],
                        delete_keys: Iterable[str] = ()) -> None:
    """Set and remove topic config overrides (IncrementalAlterConfigs)."""
    from kio.schema.incremental_alter_configs.v1 import request as req

    ops = [req.AlterableConfig(name=k, config_operation=SET, value=v) for k, v in set_values.items()]
    ops += [req.AlterableConfig(name=k, config_operation=DELETE, value=None) for k in delete_keys]
    resource = req.AlterConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=topic, configs=tuple(ops))
    [r] = client.request_any(req.IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False)).responses
    check(r.error_code, f"altering configs of {topic}", r.error_message)


# ----------------------------------------------------------------------------------- records
def fetch_records(client: ClusterClient, topic: str, partition: int, start: int, end: int) -> list[Record]:
    """The records of [start, end) of one partition, read with Fetch from its leader as the
    user (so the READ ACL applies), as a read_uncommitted consumer sees them (up to the high
    watermark)."""
    from kio.schema.fetch.v12 import request as req

    out: list[Record] = []
    offset = start
    while offset < end:
        def ask(node: int, _chunk: list[TP], at: int = offset) -> dict:  # `at`: this round's offset
            resp = client.request_node(node, req.FetchRequest(
                max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=FETCH_MAX_BYTES, isolation_level=0,
                topics=(req.FetchTopic(topic=topic, partitions=(req.FetchPartition(
                    partition=partition, fetch_offset=at, partition_max_bytes=FETCH_MAX_BYTES),)),),
                forgotten_topics_data=()))
            part = resp.responses[0].partitions[0]
            return {(topic, partition): part if part.error_code.value == 0 else KafkaError(
                f"reading {topic}-{partition} at offset {at}", part.error_code)}

        part = client.on_leaders([(topic, partition)], ask)[(topic, partition)]
        if isinstance(part, KafkaError):
            raise part
        moved = offset
        for batch in iter_batches(part.records or b""):
            if batch.next_offset <= offset:
                continue
            moved = max(moved, batch.next_offset)
            if batch.is_control:
                continue
            out.extend(r for r in batch.records() if offset <= r.offset < end)
        if moved == offset:  # nothing more below the high watermark
            break
        offset = moved
    return out
