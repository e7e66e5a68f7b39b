"""Consumer and share groups across the cluster, over a ClusterClient: list (every broker's
groups, merged), describe and fetch offsets (each group at its coordinator, batched per
coordinator), lag once per partition (log end offsets from each partition's leader), and commit
offsets (reset). As kafka-consumer-groups.sh and kafka-share-groups.sh see them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from topiclake.protocol.consumer_protocol import decode_assignment
from topiclake.segments.errors import CorruptRecordError

from . import admin
from .client import ClusterClient
from .errors import ClientError, KafkaError, check
from .results import LATEST, TP, GroupDetail, GroupListing, GroupReport, Member, PartitionLag

DEAD = "Dead"  # the state a coordinator answers for a group it does not know

KINDS = ("classic", "consumer", "share")


def list_groups(client: ClusterClient) -> list[GroupListing]:
    """Every group of the cluster (each broker lists the groups it coordinates), sorted by id.
    A broker that is down is skipped (its groups move to live coordinators); none answering
    raises the last failure."""
    from kio.schema.list_groups.v5 import request as req

    def ask(node: int):
        resp = client.request_node(node, req.ListGroupsRequest(states_filter=(), types_filter=()))
        check(resp.error_code, "listing groups")
        return [GroupListing(g.group_id, g.group_type, g.group_state) for g in resp.groups]

    answers, failures = client.on_every_broker(ask)
    if not answers and failures:
        raise next(iter(failures.values()))
    merged = {g.group_id: g for listed in answers.values() for g in listed}
    return sorted(merged.values(), key=lambda g: g.group_id)


def find_group(client: ClusterClient, group_id: str, *, say_why: bool = False) -> GroupListing | None:
    """The group as its coordinator lists it, or None when the coordinator has no such group
    (or the user may not describe it: with `say_why`, a group it does not list is described, so
    that a refusal raises, GROUP_AUTHORIZATION_FAILED, as kafka-consumer-groups says)."""
    from kio.schema.describe_groups.v5 import request as describe_req
    from kio.schema.list_groups.v5 import request as req

    def ask(node: int, _groups: list[str]) -> dict:
        resp = client.request_node(node, req.ListGroupsRequest(states_filter=(), types_filter=()))
        if resp.error_code.value != 0:
            return {group_id: KafkaError("listing groups", resp.error_code)}
        listed = next((GroupListing(g.group_id, g.group_type, g.group_state) for g in resp.groups
                       if g.group_id == group_id), None)
        if listed is not None or not say_why:
            return {group_id: listed}
        [d] = client.request_node(node, describe_req.DescribeGroupsRequest(
            groups=(group_id,), include_authorized_operations=False)).groups
        if d.error_code.value != 0:
            return {group_id: KafkaError(f"describing group {group_id}", d.error_code)}
        return {group_id: None if d.group_state == DEAD else GroupListing(group_id, "classic", d.group_state)}

    found = client.on_coordinators([group_id], ask)[group_id]
    if isinstance(found, KafkaError):
        raise found
    return found


def _members_of_classic(d) -> tuple[Member, ...]:
    members = []
    for m in d.members:
        try:
            parts = decode_assignment(m.member_assignment).partitions if m.member_assignment else ()
        except CorruptRecordError:  # not the consumer protocol (connect, ...): no partitions to show
            parts = ()
        members.append(Member(m.member_id, m.client_id, m.client_host or "",
                              tuple(sorted((t, p) for t, ps in parts for p in ps))))
    return tuple(members)


def _members_of(d) -> tuple[Member, ...]:
    """The members of a KIP-848 consumer or share group description."""
    return tuple(Member(m.member_id, m.client_id, m.client_host or "",
                        tuple(sorted((tp.topic_name, p)
                                     for tp in m.assignment.topic_partitions for p in tp.partitions)))
                 for m in d.members)


def describe_groups(client: ClusterClient, listings: Iterable[GroupListing]) -> dict[str, GroupDetail | KafkaError]:
    """group id -> its state and members, as its coordinator describes it (one describe
    request per coordinator and group type), or why it could not be described."""
    from kio.schema.consumer_group_describe.v1 import request as consumer_req
    from kio.schema.describe_groups.v5 import request as classic_req
    from kio.schema.share_group_describe.v1 import request as share_req

    kinds: dict[str, str] = {}
    for g in listings:
        kinds[g.group_id] = g.group_type if g.group_type in KINDS else "classic"  # a type this client predates

    def ask(node: int, ids: list[str]) -> dict:
        out: dict[str, GroupDetail | KafkaError] = {}
        of = {kind: tuple(g for g in ids if kinds[g] == kind) for kind in KINDS}
        if of["classic"]:
            for d in client.request_node(node, classic_req.DescribeGroupsRequest(
                    groups=of["classic"], include_authorized_operations=False)).groups:
                out[d.group_id] = (GroupDetail(d.group_id, "classic", d.group_state, d.protocol_type or "",
                                               d.protocol_data or "", -1, _members_of_classic(d))
                                   if d.error_code.value == 0 else KafkaError(f"describing group {d.group_id}",
                                                                              d.error_code))
        for kind, request in (("consumer", consumer_req.ConsumerGroupDescribeRequest),
                              ("share", share_req.ShareGroupDescribeRequest)):
            if not of[kind]:
                continue
            for d in client.request_node(node, request(group_ids=of[kind], include_authorized_operations=False)).groups:
                protocol_type = "consumer" if kind == "consumer" else ""
                out[d.group_id] = (GroupDetail(d.group_id, kind, d.group_state, protocol_type,
                                               d.assignor_name or "", d.group_epoch, _members_of(d))
                                   if d.error_code.value == 0 else KafkaError(f"describing group {d.group_id}",
                                                                              d.error_code, d.error_message))
        return out

    return client.on_coordinators(list(kinds), ask)


def committed_offsets(client: ClusterClient, group_ids: Iterable[str]) -> dict[str, dict[TP, int] | KafkaError]:
    """group id -> (topic, partition) -> committed offset (OffsetFetch at its coordinator)."""
    from kio.schema.offset_fetch.v8 import request as req

    def ask(node: int, ids: list[str]) -> dict:
        resp = client.request_node(node, req.OffsetFetchRequest(groups=tuple(
            req.OffsetFetchRequestGroup(group_id=g, topics=None) for g in ids), require_stable=False))
        return {g.group_id: {(t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions
                             if p.committed_offset >= 0} if g.error_code.value == 0
                else KafkaError(f"fetching the offsets of group {g.group_id}", g.error_code) for g in resp.groups}

    return client.on_coordinators(group_ids, ask)


def share_offsets(client: ClusterClient,
                  group_ids: Iterable[str]) -> dict[str, dict[TP, tuple[int, int]] | KafkaError]:
    """group id -> (topic, partition) -> (share-partition start offset, lag), for share groups."""
    from kio.schema.describe_share_group_offsets.v1 import request as req

    def ask(node: int, ids: list[str]) -> dict:
        resp = client.request_node(node, req.DescribeShareGroupOffsetsRequest(groups=tuple(
            req.DescribeShareGroupOffsetsRequestGroup(group_id=g, topics=None) for g in ids)))
        return {g.group_id: {(t.topic_name, p.partition_index): (p.start_offset, p.lag) for t in g.topics
                             for p in t.partitions} if g.error_code.value == 0
                else KafkaError(f"describing the offsets of share group {g.group_id}", g.error_code)
                for g in resp.groups}

    return client.on_coordinators(group_ids, ask)


def _offsets_of(client: ClusterClient, listings: list[GroupListing]) -> dict[str, dict | KafkaError]:
    """group id -> its committed offsets (consumer groups) or share-partition starts and lags."""
    return {**committed_offsets(client, [g.group_id for g in listings if g.group_type != "share"]),
            **share_offsets(client, [g.group_id for g in listings if g.group_type == "share"])}


def group_reports(client: ClusterClient, listings: Iterable[GroupListing]) -> list[GroupReport]:
    """Each group's members, assignments and lag per partition, or why it could not be
    described: lag = log end offset - committed offset, never below 0; a share group's is its
    coordinator's (records not yet delivered and done past the share-partition start)."""
    listings = list(listings)
    described, offsets = describe_groups(client, listings), _offsets_of(client, listings)
    keys: set[TP] = set()
    for listing in listings:
        detail, held = described.get(listing.group_id), offsets.get(listing.group_id)
        if isinstance(detail, GroupDetail) and isinstance(held, dict):
            keys |= set(held) | {tp for m in detail.members for tp in m.assignment}
    ends = admin.list_offsets(client, sorted(keys), LATEST)
    out = []
    for listing in listings:
        detail, held = described.get(listing.group_id), offsets.get(listing.group_id, {})
        problem = next((x for x in (detail, held) if isinstance(x, KafkaError)), None)
        if problem is not None or detail is None:
            out.append(GroupReport(listing, None,
                                   str(problem or f"describing group {listing.group_id}: NOT DESCRIBED")))
            continue
        owners: dict[TP, list[str]] = {}
        for m in detail.members:
            for tp in m.assignment:
                owners.setdefault(tp, []).append(m.member_id)
        lags = []
        for key in sorted(set(held) | set(owners)):
            end = ends.get(key, -1)
            if listing.group_type == "share":
                start, lag = held.get(key, (-1, -1))
                current, shown_lag = (start if start >= 0 else None), (lag if lag >= 0 else None)
            else:
                current = held.get(key)
                shown_lag = None if current is None or end < 0 else max(end - current, 0)
            lags.append(PartitionLag(*key, current, end, shown_lag, tuple(owners.get(key, ()))))
        out.append(GroupReport(listing, _with_lags(detail, lags), None))
    return out


def _with_lags(detail: GroupDetail, lags: list[PartitionLag]) -> GroupDetail:
    return replace(detail, lags=tuple(lags))


def group(client: ClusterClient, group_id: str, *, say_why: bool = False) -> GroupDetail | None:
    """One group with its lags (None when its coordinator does not know it: `find_group`); a
    problem raises."""
    listing = find_group(client, group_id, say_why=say_why)
    if listing is None:
        return None
    [report] = group_reports(client, [listing])
    if report.problem is not None:
        raise ClientError(report.problem)
    return report.detail


def group_lags(client: ClusterClient, listings: Iterable[GroupListing],
               ends: dict[TP, int]) -> dict[str, dict[TP, int]]:
    """group id -> lag per partition against already known log end offsets (a sampler's cheap
    path: no describe, no ListOffsets); groups whose offsets could not be read are left out."""
    out = {}
    for group_id, held in _offsets_of(client, list(listings)).items():
        if isinstance(held, KafkaError):
            continue
        out[group_id] = {tp: (value[1] if isinstance(value, tuple) else max(ends[tp] - value, 0))
                         for tp, value in held.items()
                         if (value[1] >= 0 if isinstance(value, tuple) else tp in ends)}
    return out


def commit_offsets(client: ClusterClient, group_id: str, offsets: dict[TP, int]) -> None:
    """Commit `offsets` for a group with no active members (its coordinator checks)."""
    from kio.schema.offset_commit.v8 import request as req

    topics: dict[str, list] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(req.OffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""))

    def ask(node: int, _ids: list[str]) -> dict:
        resp = client.request_node(node, req.OffsetCommitRequest(
            group_id=group_id, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            topics=tuple(req.OffsetCommitRequestTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items())))
        failed = [KafkaError(f"committing {t.name}-{p.partition_index} for group {group_id}", p.error_code)
                  for t in resp.topics for p in t.partitions if p.error_code.value != 0]
        return {group_id: failed[0] if failed else None}

    answer = client.on_coordinators([group_id], ask)[group_id]
    if isinstance(answer, KafkaError):
        raise answer

