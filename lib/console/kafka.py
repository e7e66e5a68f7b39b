"""What the console asks the broker, over the Kafka protocol, as one user.

Every call takes a `ProtocolClient` logged in as the console's user, so the broker's authorizer
decides what is described: Metadata lists only the topics the user may DESCRIBE, ListGroups only
the groups they may DESCRIBE. Answers are plain dataclasses for the templates; a broker error
is a `BrokerError` with one line, which a page shows instead of its content.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from topiclake.broker.client import ProtocolClient
from topiclake.segments.batch import Record, iter_batches

LATEST, EARLIEST = -1, -2
TOPIC_RESOURCE = 2
DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs config_source of a topic override
COORDINATOR_WAIT_S = 10.0  # a coordinator still loading its groups (right after a broker start)
FETCH_MAX_BYTES = 4 << 20


class BrokerError(Exception):
    """The broker refused or failed a describe call; the message is one line."""


@dataclass(frozen=True)
class BrokerNode:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True)
class Cluster:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerNode, ...]


@dataclass
class TopicPartition:
    partition: int
    leader: int
    start: int = -1
    end: int = -1

    @property
    def records(self) -> int:
        return max(self.end - self.start, 0)


@dataclass
class Topic:
    name: str
    internal: bool
    partitions: list[TopicPartition]

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    group_type: str  # classic, consumer, share
    state: str


@dataclass(frozen=True)
class Member:
    member_id: str
    client_id: str
    host: str
    assignment: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None  # a share group: the share-partition start offset
    end: int
    lag: int | None
    owners: tuple[str, ...]


@dataclass
class GroupDetail:
    group_id: str
    group_type: str
    state: str
    protocol: str
    members: list[Member] = field(default_factory=list)
    lags: list[PartitionLag] = field(default_factory=list)

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.lags)


def _check(code, what: str) -> None:
    if code.value != 0:
        raise BrokerError(f"{what}: {code.name.upper()}")


def cluster(client: ProtocolClient) -> Cluster:
    from kio.schema.describe_cluster.v1 import request as req

    resp = client.request(req.DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=1))
    _check(resp.error_code, "describing the cluster")
    nodes = tuple(BrokerNode(b.broker_id, b.host, b.port, b.rack) for b in resp.brokers)
    return Cluster(resp.cluster_id, resp.controller_id, tuple(sorted(nodes, key=lambda n: n.node_id)))


def _metadata(client: ProtocolClient, names: list[str] | None):
    from kio.schema.metadata.v12 import request as req

    topics = None if names is None else tuple(req.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=n)
                                              for n in names)
    return client.request(req.MetadataRequest(topics=topics, allow_auto_topic_creation=False,
                                              include_topic_authorized_operations=False))


def topic_names(client: ProtocolClient) -> set[str]:
    """The topics this user may describe (Metadata filters by the DESCRIBE ACL)."""
    return {t.name for t in _metadata(client, None).topics if t.error_code.value == 0 and t.name}


def topics(client: ProtocolClient, names: list[str] | None = None, *, offsets: bool = True) -> list[Topic]:
    """Topics with their partitions (all the user may describe, or `names`), and with `offsets`
    each partition's log start and end offsets (two ListOffsets requests for all of them)."""
    out = []
    for t in _metadata(client, names).topics:
        if names is not None:
            _check(t.error_code, f"describing topic {t.name}")
        elif t.error_code.value != 0 or not t.name:
            continue
        parts = [TopicPartition(p.partition_index, p.leader_id) for p in t.partitions]
        out.append(Topic(t.name, t.is_internal, sorted(parts, key=lambda p: p.partition)))
    out.sort(key=lambda t: t.name)
    if offsets:
        keys = [(t.name, p.partition) for t in out for p in t.partitions]
        starts, ends = list_offsets(client, keys, EARLIEST), list_offsets(client, keys, LATEST)
        for t in out:
            for p in t.partitions:
                p.start, p.end = starts.get((t.name, p.partition), -1), ends.get((t.name, p.partition), -1)
    return out


def list_offsets(client: ProtocolClient, keys: list[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
    """(topic, partition) -> offset for `timestamp` (LATEST, EARLIEST); partitions in error left out."""
    from kio.schema.list_offsets.v7 import request as req

    if not keys:
        return {}
    by_topic: dict[str, list] = {}
    for topic, partition in keys:
        by_topic.setdefault(topic, []).append(req.ListOffsetsPartition(partition_index=partition,
                                                                       current_leader_epoch=-1, timestamp=timestamp))
    resp = client.request(req.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=tuple(
        req.ListOffsetsTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items())))
    return {(t.name, p.partition_index): p.offset for t in resp.topics for p in t.partitions
            if p.error_code.value == 0}


def topic_configs(client: ProtocolClient, topic: str) -> list[tuple[str, str | None, bool]]:
    """(name, value, is an override) of every config of the topic; sensitive values hidden."""
    from kio.schema.describe_configs.v4 import request as req

    resource = req.DescribeConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=topic, configuration_keys=None)
    result = client.request(req.DescribeConfigsRequest(resources=(resource,), include_synonyms=False,
                                                       include_documentation=False)).results[0]
    _check(result.error_code, f"describing the configs of {topic}")
    return sorted((c.name, None if c.is_sensitive else c.value, c.config_source == DYNAMIC_TOPIC_CONFIG)
                  for c in result.configs)


def list_groups(client: ProtocolClient) -> list[GroupListing]:
    from kio.schema.list_groups.v5 import request as req

    resp = client.request(req.ListGroupsRequest(states_filter=(), types_filter=()))
    _check(resp.error_code, "listing groups")
    return sorted((GroupListing(g.group_id, g.group_type, g.group_state) for g in resp.groups),
                  key=lambda g: g.group_id)


# ------------------------------------------------------------------------------------ groups
# Every group call is batched: one describe request per group type, one OffsetFetch for all the
# consumer groups, one DescribeShareGroupOffsets for all the share groups, one ListOffsets for
# every partition involved; so a page of many groups costs a handful of round trips.

def _all_settled(errors_of):
    """error_of for request_while_retriable over a batch: retriable while any group's is."""
    def error_of(response):
        codes = list(errors_of(response))
        return next((c for c in codes if c.retriable), next((c for c in codes if c.value != 0), ErrorCode.none))
    return error_of


def _batch(client: ProtocolClient, request, groups_of):
    """The per-group answers of a batched coordinator request, once no group's coordinator is
    still loading (or COORDINATOR_WAIT_S passed)."""
    response = client.request_while_retriable(request, _all_settled(lambda r: (g.error_code for g in groups_of(r))),
                                              wait_s=COORDINATOR_WAIT_S)
    return groups_of(response)


def _describe(client: ProtocolClient, listings: list[GroupListing]) -> dict[str, GroupDetail | str]:
    """group id -> its members and state, or why it could not be described."""
    from kio.schema.consumer_group_describe.v1 import request as consumer_req
    from kio.schema.describe_groups.v5 import request as classic_req
    from kio.schema.share_group_describe.v1 import request as share_req

    from topiclake.broker.group.consumer_protocol import decode_assignment

    ids = {kind: tuple(g.group_id for g in listings if g.group_type == kind) for kind in ("classic", "consumer", "share")}
    ids["classic"] += tuple(g.group_id for g in listings if g.group_type not in ids)  # a type this console predates
    out: dict[str, GroupDetail | str] = {}
    if ids["classic"]:
        for d in _batch(client, classic_req.DescribeGroupsRequest(groups=ids["classic"], include_authorized_operations=False),
                        lambda r: r.groups):
            members = []
            for m in d.members:
                parts = decode_assignment(m.member_assignment).partitions if m.member_assignment else ()
                members.append(Member(m.member_id, m.client_id, m.client_host or "",
                                      tuple(sorted((t, p) for t, ps in parts for p in ps))))
            out[d.group_id] = (GroupDetail(d.group_id, "classic", d.group_state, d.protocol_data or "", members)
                               if d.error_code.value == 0 else d.error_code.name.upper())
    for kind, request, of in (
            ("consumer", lambda: consumer_req.ConsumerGroupDescribeRequest(group_ids=ids["consumer"],
                                                                           include_authorized_operations=False),
             lambda r: r.groups),
            ("share", lambda: share_req.ShareGroupDescribeRequest(group_ids=ids["share"],
                                                                  include_authorized_operations=False),
             lambda r: r.groups)):
        if not ids[kind]:
            continue
        for d in _batch(client, request(), of):
            members = [Member(m.member_id, m.client_id, m.client_host or "",
                              tuple(sorted((tp.topic_name, p) for tp in m.assignment.topic_partitions
                                           for p in tp.partitions)))
                       for m in d.members]
            out[d.group_id] = (GroupDetail(d.group_id, kind, d.group_state, d.assignor_name or "", members)
                               if d.error_code.value == 0 else d.error_code.name.upper())
    return out


def _committed(client: ProtocolClient, group_ids: list[str]) -> dict[str, dict[tuple[str, int], int] | str]:
    """group id -> (topic, partition) -> committed offset, for consumer groups (or an error)."""
    from kio.schema.offset_fetch.v8 import request as req

    if not group_ids:
        return {}
    answers = _batch(client, req.OffsetFetchRequest(groups=tuple(req.OffsetFetchRequestGroup(group_id=g, topics=None)
                                                                 for g in group_ids), require_stable=False),
                     lambda r: r.groups)
    return {g.group_id: {(t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions
                         if p.committed_offset >= 0} if g.error_code.value == 0 else g.error_code.name.upper()
            for g in answers}


def _share_starts(client: ProtocolClient, group_ids: list[str]) -> dict[str, dict[tuple[str, int], tuple[int, int]] | str]:
    """group id -> (topic, partition) -> (share-partition start offset, lag), for share groups."""
    from kio.schema.describe_share_group_offsets.v1 import request as req

    if not group_ids:
        return {}
    answers = _batch(client, req.DescribeShareGroupOffsetsRequest(groups=tuple(
        req.DescribeShareGroupOffsetsRequestGroup(group_id=g, topics=None) for g in group_ids)), lambda r: r.groups)
    return {g.group_id: {(t.topic_name, p.partition_index): (p.start_offset, p.lag) for t in g.topics
                         for p in t.partitions} if g.error_code.value == 0 else g.error_code.name.upper()
            for g in answers}


def _offsets_of(client: ProtocolClient, listings: list[GroupListing]) -> dict[str, dict | str]:
    """group id -> its committed offsets (consumer groups) or share-partition starts and lags."""
    share = [g.group_id for g in listings if g.group_type == "share"]
    return {**_committed(client, [g.group_id for g in listings if g.group_type != "share"]),
            **_share_starts(client, share)}


def groups(client: ProtocolClient, listings: list[GroupListing]) -> list[tuple[GroupListing, GroupDetail | None, str | None]]:
    """Each group's members, assignments and lag per partition (or why it could not be
    described): what `topiclake groups describe` and `groups lag` show; lag = log end offset -
    committed offset, never below 0; a share group's is the broker's (records not yet delivered
    and done past the share-partition start offset)."""
    described, offsets = _describe(client, listings), _offsets_of(client, listings)
    keys = set()
    for listing in listings:
        detail, held = described.get(listing.group_id), offsets.get(listing.group_id)
        if isinstance(detail, GroupDetail) and isinstance(held, dict):
            keys |= set(held) | {tp for m in detail.members for tp in m.assignment}
    ends = list_offsets(client, sorted(keys), LATEST)
    out = []
    for listing in listings:
        detail, held = described.get(listing.group_id, "NOT DESCRIBED"), offsets.get(listing.group_id, {})
        problem = detail if isinstance(detail, str) else held if isinstance(held, str) else None
        if problem is not None:
            out.append((listing, None, f"describing group {listing.group_id}: {problem}"))
            continue
        owners: dict[tuple[str, int], list[str]] = {}
        for m in detail.members:
            for tp in m.assignment:
                owners.setdefault(tp, []).append(m.member_id)
        for key in sorted(set(held) | set(owners)):
            end = ends.get(key, -1)
            if listing.group_type == "share":
                start, lag = held.get(key, (-1, -1))
                current, shown_lag = (start if start >= 0 else None), (lag if lag >= 0 else None)
            else:
                current = held.get(key)
                shown_lag = None if current is None else max(end - current, 0)
            detail.lags.append(PartitionLag(*key, current, end, shown_lag, tuple(owners.get(key, ()))))
        out.append((listing, detail, None))
    return out


def group(client: ProtocolClient, listing: GroupListing) -> GroupDetail:
    _listing, detail, problem = groups(client, [listing])[0]
    if problem is not None:
        raise BrokerError(problem)
    return detail


def group_lags(client: ProtocolClient, listings: list[GroupListing],
               ends: dict[tuple[str, int], int]) -> dict[str, dict[tuple[str, int], int]]:
    """group id -> lag per partition against already known log end offsets (the sampler's
    cheap path: two requests for all the groups, no describe, no ListOffsets); groups whose
    offsets the user may not read are left out."""
    out = {}
    for group_id, held in _offsets_of(client, listings).items():
        if isinstance(held, str):
            continue
        out[group_id] = {tp: (value[1] if isinstance(value, tuple) else max(ends[tp] - value, 0))
                         for tp, value in held.items()
                         if (value[1] >= 0 if isinstance(value, tuple) else tp in ends)}
    return out


def fetch_records(client: ProtocolClient, topic: str, partition: int, start: int, end: int) -> list[Record]:
    """The records of [start, end) of one partition, read with Fetch as the user (so the READ ACL
    applies), as a read_uncommitted consumer sees them (up to the high watermark)."""
    from kio.schema.fetch.v12 import request as req

    out: list[Record] = []
    offset = start
    while offset < end:
        resp = client.request(req.FetchRequest(
            max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=FETCH_MAX_BYTES, isolation_level=0,
            topics=(req.FetchTopic(topic=topic, partitions=(req.FetchPartition(
                partition=partition, fetch_offset=offset, partition_max_bytes=FETCH_MAX_BYTES),)),),
            forgotten_topics_data=()))
        part = resp.responses[0].partitions[0]
        _check(part.error_code, f"reading {topic}-{partition} at offset {offset}")
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
