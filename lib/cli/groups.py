"""`topiclake groups ...`: consumer groups of a running broker over the Kafka protocol, like
kafka-consumer-groups.sh: list, describe, lag, reset-offsets (a dry run unless --execute).
Share groups (KIP-932) are described and their lag shown as kafka-share-groups.sh does: each
partition's share-partition start offset in place of a committed offset."""

from __future__ import annotations

import datetime
import uuid
from pathlib import Path

import typer

from .output import fail
from .protocol import BOOTSTRAP, COMMAND_CONFIG, connect

groups_app = typer.Typer(help="Inspect consumer groups and reset their offsets (over the Kafka protocol).",
                         no_args_is_help=True)

LATEST, EARLIEST = -1, -2
DEAD = "Dead"  # the state a coordinator answers for a group it does not know
COORDINATOR_WAIT_S = 30.0  # how long a coordinator that is still loading its groups is waited for


def register(app: typer.Typer) -> None:
    app.add_typer(groups_app, name="groups")


# ------------------------------------------------------------------ protocol helpers
def _coordinator_request(client, request, error_of, what: str):
    """The response to a group-coordinator request, asked again while the coordinator is still
    loading (right after a broker start), as Kafka's admin client retries retriable errors."""
    response = client.request_while_retriable(request, error_of, wait_s=COORDINATOR_WAIT_S)
    code = error_of(response)
    if code.value != 0:
        fail(f"{what}: {code.name.upper()}")
    return response


def _describe(client, group: str):
    from kio.schema.describe_groups.v5 import request as req

    return _coordinator_request(client, req.DescribeGroupsRequest(groups=(group,), include_authorized_operations=False),
                                lambda r: r.groups[0].error_code, f"describing group {group}").groups[0]


def _existing(client, group: str):
    """The description of a group the coordinator knows (one with members or only committed
    offsets), or `group 'G' does not exist` and exit 1, as kafka-consumer-groups says."""
    d = _describe(client, group)
    if d.group_state == DEAD:
        fail(f"group {group!r} does not exist")
    return d


def _committed(client, group: str) -> dict[tuple[str, int], int]:
    from kio.schema.offset_fetch.v7 import request as req

    resp = _coordinator_request(client, req.OffsetFetchRequest(group_id=group, topics=None, require_stable=False),
                                lambda r: r.error_code, f"fetching the offsets of group {group}")
    return {(t.name, p.partition_index): p.committed_offset for t in resp.topics for p in t.partitions
            if p.committed_offset >= 0}


def _partitions(client, topic: str) -> list[int]:
    from kio.schema.metadata.v12 import request as req

    t = client.request(req.MetadataRequest(topics=(req.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=topic),),
                                           allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False)).topics[0]
    if t.error_code.value != 0:
        fail(f"topic {topic}: {t.error_code.name.upper()}")
    return sorted(p.partition_index for p in t.partitions)


def _list_offsets(client, wanted: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """(topic, partition) -> offset for a timestamp (LATEST, EARLIEST or ms); -1 when none."""
    from kio.schema.list_offsets.v7 import request as req

    topics: dict[str, list] = {}
    for (topic, partition), ts in wanted.items():
        topics.setdefault(topic, []).append(req.ListOffsetsPartition(partition_index=partition,
                                                                    current_leader_epoch=-1, timestamp=ts))
    resp = client.request(req.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=tuple(
        req.ListOffsetsTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items())))
    out = {}
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code.value != 0:
                fail(f"listing offsets of {t.name}-{p.partition_index}: {p.error_code.name.upper()}")
            out[(t.name, p.partition_index)] = p.offset
    return out


def _share_group(client, group: str):
    """The ShareGroupDescribe answer for a share group, or None when `group` is not one."""
    from kio.schema.share_group_describe.v1 import request as req

    d = client.request(req.ShareGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False)).groups[0]
    return d if d.error_code.value == 0 else None


def _share_offsets(client, group: str) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (share-partition start offset, lag) of every partition with share state."""
    from kio.schema.describe_share_group_offsets.v1 import request as req

    resp = _coordinator_request(client, req.DescribeShareGroupOffsetsRequest(groups=(
        req.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None),)),
        lambda r: r.groups[0].error_code, f"describing the offsets of share group {group}")
    return {(t.topic_name, p.partition_index): (p.start_offset, p.lag)
            for t in resp.groups[0].topics for p in t.partitions}


def _share_owners(d) -> dict[tuple[str, int], list[str]]:
    owners: dict[tuple[str, int], list[str]] = {}
    for m in d.members:
        for tp in m.assignment.topic_partitions:
            for p in tp.partitions:
                owners.setdefault((tp.topic_name, p), []).append(m.member_id)
    return owners


def _assignments(d) -> dict[tuple[str, int], str]:
    """(topic, partition) -> member id, from the consumer-protocol assignments of a Stable group."""
    from topiclake.broker.group.consumer_protocol import decode_assignment

    owners = {}
    for m in d.members:
        if not m.member_assignment:
            continue
        for topic, parts in decode_assignment(m.member_assignment).partitions:
            for p in parts:
                owners[(topic, p)] = m.member_id
    return owners


# ------------------------------------------------------------------------- commands
@groups_app.command("list")
def list_groups(bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG) -> None:
    """Group ids with their type and state."""
    from kio.schema.list_groups.v5 import request as req

    with connect(bootstrap, command_config) as client:
        resp = client.request(req.ListGroupsRequest(states_filter=(), types_filter=()))
    if resp.error_code.value != 0:
        fail(f"listing groups: {resp.error_code.name.upper()}")
    typer.echo(f"{'GROUP':<40} {'TYPE':<10} STATE")
    for g in sorted(resp.groups, key=lambda g: g.group_id):
        typer.echo(f"{g.group_id:<40} {g.group_type:<10} {g.group_state}")


@groups_app.command("describe")
def describe(group: str, bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG) -> None:
    """State, members and their assigned partitions."""
    with connect(bootstrap, command_config) as client:
        share = _share_group(client, group)
        d = _existing(client, group) if share is None else None
    if share is not None:
        typer.echo(f"Group: {group}\tType: share\tState: {share.group_state}\tEpoch: {share.group_epoch}\t"
                   f"Assignor: {share.assignor_name}\tMembers: {len(share.members)}")
        for m in share.members:
            shown = ",".join(f"{tp.topic_name}-{p}" for tp in m.assignment.topic_partitions
                             for p in tp.partitions) or "-"
            typer.echo(f"\tMember: {m.member_id}\tClient: {m.client_id}\tHost: {m.client_host or '-'}\t"
                       f"Assignment: {shown}")
        return
    typer.echo(f"Group: {group}\tState: {d.group_state}\tProtocolType: {d.protocol_type or '-'}\t"
               f"Protocol: {d.protocol_data or '-'}\tMembers: {len(d.members)}")
    owners = _assignments(d)
    for m in d.members:
        parts = sorted(tp for tp, owner in owners.items() if owner == m.member_id)
        shown = ",".join(f"{t}-{p}" for t, p in parts) or "-"
        typer.echo(f"\tMember: {m.member_id}\tClient: {m.client_id}\tHost: {m.client_host or '-'}\t"
                   f"Assignment: {shown}")


@groups_app.command("lag")
def lag(group: str, bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG) -> None:
    """Per partition: committed offset, log end offset and lag (like --describe --offsets); for a
    share group the share-partition start offset and the records not yet delivered and done."""
    with connect(bootstrap, command_config) as client:
        share = _share_group(client, group)
        if share is not None:
            starts = _share_offsets(client, group)
            owners = _share_owners(share)
            keys = sorted(set(starts) | set(owners))
            ends = _list_offsets(client, {k: LATEST for k in keys}) if keys else {}
            typer.echo(f"{'TOPIC':<30} {'PARTITION':>9} {'START-OFFSET':>15} {'LOG-END-OFFSET':>15} {'LAG':>8}  "
                       "MEMBERS")
            for topic, partition in keys:
                start, share_lag = starts.get((topic, partition), (-1, -1))
                typer.echo(f"{topic:<30} {partition:>9} {start if start >= 0 else '-':>15} "
                           f"{ends[(topic, partition)]:>15} {share_lag if share_lag >= 0 else '-':>8}  "
                           f"{','.join(owners.get((topic, partition), [])) or '-'}")
            return
        d = _existing(client, group)
        committed = _committed(client, group)
        owners = _assignments(d)
        keys = sorted(set(committed) | set(owners))
        ends = _list_offsets(client, {k: LATEST for k in keys}) if keys else {}
    typer.echo(f"{'TOPIC':<30} {'PARTITION':>9} {'CURRENT-OFFSET':>15} {'LOG-END-OFFSET':>15} {'LAG':>8}  MEMBER")
    for topic, partition in keys:
        current = committed.get((topic, partition))
        end = ends[(topic, partition)]
        shown_lag = "-" if current is None else str(max(end - current, 0))
        typer.echo(f"{topic:<30} {partition:>9} {'-' if current is None else current:>15} {end:>15} {shown_lag:>8}  "
                   f"{owners.get((topic, partition), '-')}")


@groups_app.command("reset-offsets")
def reset_offsets(
    group: str,
    topic: str = typer.Option(..., "--topic", help="Topic whose partitions are reset."),
    to_earliest: bool = typer.Option(False, "--to-earliest"),
    to_latest: bool = typer.Option(False, "--to-latest"),
    to_offset: int = typer.Option(None, "--to-offset", help="An absolute offset (clamped to the log's range)."),
    to_datetime: str = typer.Option(None, "--to-datetime", help="ISO-8601 time: first offset at or after it."),
    execute: bool = typer.Option(False, "--execute", help="Commit the new offsets (default: only show them)."),
    bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG,
) -> None:
    """Move a group's committed offsets (the group must have no active members)."""
    chosen = [x for x in (to_earliest, to_latest, to_offset is not None, to_datetime is not None) if x]
    if len(chosen) != 1:
        fail("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime", code=2)
    with connect(bootstrap, command_config) as client:
        d = _describe(client, group)
        if d.members:
            fail(f"group {group} has {len(d.members)} active members ({d.group_state}): stop them first")
        partitions = _partitions(client, topic)
        keys = [(topic, p) for p in partitions]
        earliest = _list_offsets(client, {k: EARLIEST for k in keys})
        latest = _list_offsets(client, {k: LATEST for k in keys})
        if to_earliest:
            target = earliest
        elif to_latest:
            target = latest
        elif to_offset is not None:
            target = {k: min(max(to_offset, earliest[k]), latest[k]) for k in keys}
        else:
            when = _parse_datetime(to_datetime)
            found = _list_offsets(client, {k: when for k in keys})
            target = {k: latest[k] if found[k] < 0 else found[k] for k in keys}
        typer.echo(f"{'TOPIC':<30} {'PARTITION':>9} {'NEW-OFFSET':>11}")
        for k in keys:
            typer.echo(f"{topic:<30} {k[1]:>9} {target[k]:>11}")
        if not execute:
            typer.echo("Dry run: nothing committed (add --execute).")
            return
        _commit(client, group, target)
        typer.echo(f"Committed new offsets of {len(keys)} partitions for group {group}.")


def _parse_datetime(text: str) -> int:
    try:
        value = datetime.datetime.fromisoformat(text)
    except ValueError:
        fail(f"--to-datetime {text!r} is not an ISO-8601 time", code=2)
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    return int(value.timestamp() * 1000)


def _commit(client, group: str, offsets: dict[tuple[str, int], int]) -> None:
    from kio.schema.offset_commit.v8 import request as req

    topics: dict[str, list] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(req.OffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""))
    resp = client.request(req.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=tuple(req.OffsetCommitRequestTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items())))
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code.value != 0:
                fail(f"committing {t.name}-{p.partition_index} for group {group}: {p.error_code.name.upper()}")
