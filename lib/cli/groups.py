"""`topiclake groups ...`: consumer groups of a running cluster over the Kafka protocol, like
kafka-consumer-groups.sh: list, describe, lag, reset-offsets (a dry run unless --execute).
Share groups (KIP-932) are described and their lag shown as kafka-share-groups.sh does: each
partition's share-partition start offset in place of a committed offset. Each group is asked of
its coordinator and each partition of its leader, whichever broker --bootstrap names
(topiclake.client)."""

from __future__ import annotations

import datetime
from pathlib import Path

import typer

from .output import fail
from .protocol import BOOTSTRAP, COMMAND_CONFIG, connect

groups_app = typer.Typer(help="Inspect consumer groups and reset their offsets (over the Kafka protocol).",
                         no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(groups_app, name="groups")


def _existing(client, group: str):
    """The group with its lags, or `group 'G' does not exist` and exit 1, as
    kafka-consumer-groups says."""
    from topiclake.client import groups

    detail = groups.group(client, group, say_why=True)
    if detail is None:
        fail(f"group {group!r} does not exist")
    return detail


@groups_app.command("list")
def list_groups(bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG) -> None:
    """Group ids with their type and state (every broker's groups)."""
    from topiclake.client import groups

    with connect(bootstrap, command_config) as client:
        listed = groups.list_groups(client)
    typer.echo(f"{'GROUP':<40} {'TYPE':<10} STATE")
    for g in listed:
        typer.echo(f"{g.group_id:<40} {g.group_type:<10} {g.state}")


def _assignment(member) -> str:
    return ",".join(f"{t}-{p}" for t, p in member.assignment) or "-"


@groups_app.command("describe")
def describe(group: str, bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG) -> None:
    """State, members and their assigned partitions."""
    with connect(bootstrap, command_config) as client:
        d = _existing(client, group)
    if d.group_type == "share":
        typer.echo(f"Group: {group}\tType: share\tState: {d.state}\tEpoch: {d.epoch}\t"
                   f"Assignor: {d.protocol}\tMembers: {len(d.members)}")
    else:
        typer.echo(f"Group: {group}\tState: {d.state}\tProtocolType: {d.protocol_type or '-'}\t"
                   f"Protocol: {d.protocol or '-'}\tMembers: {len(d.members)}")
    for m in d.members:
        typer.echo(f"\tMember: {m.member_id}\tClient: {m.client_id}\tHost: {m.host or '-'}\t"
                   f"Assignment: {_assignment(m)}")


@groups_app.command("lag")
def lag(group: str, bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG) -> None:
    """Per partition: committed offset, log end offset and lag (like --describe --offsets); for a
    share group the share-partition start offset and the records not yet delivered and done."""
    with connect(bootstrap, command_config) as client:
        d = _existing(client, group)
    share = d.group_type == "share"
    typer.echo(f"{'TOPIC':<30} {'PARTITION':>9} {'START-OFFSET' if share else 'CURRENT-OFFSET':>15} "
               f"{'LOG-END-OFFSET':>15} {'LAG':>8}  {'MEMBERS' if share else 'MEMBER'}")
    for p in d.lags:
        typer.echo(f"{p.topic:<30} {p.partition:>9} {'-' if p.committed is None else p.committed:>15} "
                   f"{p.end if p.end >= 0 else '-':>15} {'-' if p.lag is None else p.lag:>8}  "
                   f"{','.join(p.owners) or '-'}")


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
    from topiclake.client import admin, groups
    from topiclake.client.results import EARLIEST, LATEST

    chosen = [x for x in (to_earliest, to_latest, to_offset is not None, to_datetime is not None) if x]
    if len(chosen) != 1:
        fail("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime", code=2)
    when = _parse_datetime(to_datetime) if to_datetime is not None else None
    with connect(bootstrap, command_config) as client:
        listing = groups.find_group(client, group, say_why=True)
        if listing is not None:
            d = groups.describe_groups(client, [listing])[group]
            if isinstance(d, Exception):
                raise d
            if d.members:
                fail(f"group {group} has {len(d.members)} active members ({d.state}): stop them first")
        keys = [(topic, p) for p in admin.partitions(client, topic)]
        earliest = admin.list_offsets(client, keys, EARLIEST, strict=True)
        latest = admin.list_offsets(client, keys, LATEST, strict=True)
        if to_earliest:
            target = earliest
        elif to_latest:
            target = latest
        elif to_offset is not None:
            target = {k: min(max(to_offset, earliest[k]), latest[k]) for k in keys}
        else:
            found = admin.list_offsets(client, keys, when, strict=True)
            target = {k: latest[k] if found[k] < 0 else found[k] for k in keys}
        typer.echo(f"{'TOPIC':<30} {'PARTITION':>9} {'NEW-OFFSET':>11}")
        for k in keys:
            typer.echo(f"{topic:<30} {k[1]:>9} {target[k]:>11}")
        if not execute:
            typer.echo("Dry run: nothing committed (add --execute).")
            return
        groups.commit_offsets(client, group, target)
        typer.echo(f"Committed new offsets of {len(keys)} partitions for group {group}.")


def _parse_datetime(text: str) -> int:
    try:
        value = datetime.datetime.fromisoformat(text)
    except ValueError:
        fail(f"--to-datetime {text!r} is not an ISO-8601 time", code=2)
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    return int(value.timestamp() * 1000)
