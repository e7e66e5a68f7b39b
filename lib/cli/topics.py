"""`topiclake topics ...`: create, list, describe, delete and alter topics of a running cluster
over the Kafka protocol (like kafka-topics.sh / kafka-configs.sh --alter), through
topiclake.client."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

import typer

from .output import fail
from .protocol import BOOTSTRAP, COMMAND_CONFIG, connect

topics_app = typer.Typer(help="Manage topics on a running broker (over the Kafka protocol).", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(topics_app, name="topics")


def _parse_pairs(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"expected key=value, got {pair!r}", code=2)
        out[key.strip()] = value.strip()
    return out


@topics_app.command("create")
def create(name: str, partitions: int = typer.Option(1, "--partitions", help="Number of partitions."),
           config: list[str] = typer.Option([], "--config", help="Topic config key=value (repeatable)."),
           bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG) -> None:
    """Create a topic."""
    from topiclake.client import admin

    configs = _parse_pairs(config)
    with connect(bootstrap, command_config) as client:
        created = admin.create_topic(client, name, partitions, configs)
    typer.echo(f"Created topic {name} ({created.partitions} partitions, id {_topic_id(created.topic_id)}).")


def _topic_id(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


@topics_app.command("list")
def list_topics(bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG) -> None:
    """List topic names."""
    from topiclake.client import admin

    with connect(bootstrap, command_config) as client:
        names = admin.topic_names(client)
    for name in sorted(names):
        typer.echo(name)


@topics_app.command("describe")
def describe(name: str, bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG) -> None:
    """Partitions, leader and config overrides of a topic (like kafka-topics --describe)."""
    from topiclake.client import admin

    with connect(bootstrap, command_config) as client:
        [topic] = admin.topics(client, [name])
        configs = admin.topic_configs(client, name)
        tiered = any(c.name == "remote.storage.enable" and c.value == "true" for c in configs)
        if tiered:
            [topic] = admin.topics(client, [name], offsets=True)
    overrides = ",".join(f"{c.name}={c.value}" for c in configs if c.is_override)
    replication_factor = len(topic.partitions[0].replicas) if topic.partitions else 0  # as kafka-topics: partition 0's
    typer.echo(f"Topic: {name}\tTopicId: {_topic_id(topic.topic_id)}\tPartitionCount: {len(topic.partitions)}\t"
               f"ReplicationFactor: {replication_factor}\tConfigs: {overrides}")
    for p in topic.partitions:
        # With the topic's table as its remote tier: where the history starts (the table's first
        # offset, ListOffsets EARLIEST) and where the local log does (EARLIEST_LOCAL).
        offsets = f"\tEarliest: {p.start}\tEarliestLocal: {p.local_start}" if tiered else ""
        typer.echo(f"\tTopic: {name}\tPartition: {p.partition}\tLeader: {p.leader}\t"
                   f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}{offsets}")


@topics_app.command("delete")
def delete(name: str, bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG) -> None:
    """Delete a topic and its partition logs."""
    from topiclake.client import admin

    with connect(bootstrap, command_config) as client:
        admin.delete_topic(client, name)
    typer.echo(f"Deleted topic {name}.")


@topics_app.command("alter-config")
def alter_config(name: str, pairs: list[str] = typer.Argument(None, help="key=value to set", show_default=False),
                 delete_keys: list[str] = typer.Option([], "--delete", help="Override to remove (repeatable)."),
                 bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG) -> None:
    """Set (or with --delete remove) topic config overrides."""
    from topiclake.client import admin

    pairs = pairs or []
    if not pairs and not delete_keys:
        fail("give at least one key=value to set or --delete KEY to remove", code=2)
    values = _parse_pairs(pairs)
    with connect(bootstrap, command_config) as client:
        admin.alter_topic_configs(client, name, values, delete_keys)
    typer.echo(f"Updated configs of topic {name}.")


@topics_app.command("add-partitions")
def add_partitions(name: str, partitions: int = typer.Option(..., "--partitions", help="New total count."),
                   bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG) -> None:
    """Increase a topic's partition count."""
    from topiclake.client import admin

    with connect(bootstrap, command_config) as client:
        admin.create_partitions(client, name, partitions)
    typer.echo(f"Topic {name} now has {partitions} partitions.")
