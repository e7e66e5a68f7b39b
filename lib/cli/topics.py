"""`topiclake topics ...`: create, list, describe, delete and alter topics of a running broker
over the Kafka protocol (like kafka-topics.sh / kafka-configs.sh --alter)."""

from __future__ import annotations

import datetime
import uuid
from pathlib import Path

import typer

from .output import fail
from .protocol import BOOTSTRAP, COMMAND_CONFIG, connect

topics_app = typer.Typer(help="Manage topics on a running broker (over the Kafka protocol).", no_args_is_help=True)

_TIMEOUT = datetime.timedelta(seconds=30)
_TOPIC_RESOURCE = 2


def register(app: typer.Typer) -> None:
    app.add_typer(topics_app, name="topics")


def _fail_on(code, message: str | None, what: str) -> None:
    if code.value != 0:
        fail(f"{what}: {code.name.upper()}{': ' + message if message else ''}")


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
    from kio.schema.create_topics.v7 import request as req

    configs = tuple(req.CreatableTopicConfig(name=k, value=v) for k, v in _parse_pairs(config).items())
    topic = req.CreatableTopic(name=name, num_partitions=partitions, replication_factor=-1, assignments=(),
                               configs=configs)
    with connect(bootstrap, command_config) as client:
        result = client.request(req.CreateTopicsRequest(topics=(topic,), timeout=_TIMEOUT, validate_only=False))
    r = result.topics[0]
    _fail_on(r.error_code, r.error_message, f"creating topic {name}")
    typer.echo(f"Created topic {name} ({r.num_partitions} partitions, id {_topic_id(r.topic_id)}).")


def _metadata(client, names: list[str] | None):
    from kio.schema.metadata.v12 import request as req

    topics = None if names is None else tuple(req.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=n)
                                              for n in names)
    return client.request(req.MetadataRequest(topics=topics, allow_auto_topic_creation=False,
                                              include_topic_authorized_operations=False))


def _topic_id(value: uuid.UUID) -> str:
    import base64

    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


@topics_app.command("list")
def list_topics(bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG) -> None:
    """List topic names."""
    with connect(bootstrap, command_config) as client:
        metadata = _metadata(client, None)
    for topic in sorted(metadata.topics, key=lambda t: t.name or ""):
        typer.echo(topic.name)


@topics_app.command("describe")
def describe(name: str, bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG) -> None:
    """Partitions, leader and config overrides of a topic (like kafka-topics --describe)."""
    from kio.schema.describe_configs.v4 import request as req

    with connect(bootstrap, command_config) as client:
        topic = _metadata(client, [name]).topics[0]
        _fail_on(topic.error_code, None, f"describing topic {name}")
        resource = req.DescribeConfigsResource(resource_type=_TOPIC_RESOURCE, resource_name=name, configuration_keys=None)
        configs = client.request(req.DescribeConfigsRequest(resources=(resource,))).results[0]
    _fail_on(configs.error_code, configs.error_message, f"describing configs of {name}")
    overrides = ",".join(f"{c.name}={c.value}" for c in configs.configs if c.config_source == 1)
    typer.echo(f"Topic: {name}\tTopicId: {_topic_id(topic.topic_id)}\tPartitionCount: {len(topic.partitions)}\t"
               f"ReplicationFactor: 1\tConfigs: {overrides}")
    for p in sorted(topic.partitions, key=lambda p: p.partition_index):
        typer.echo(f"\tTopic: {name}\tPartition: {p.partition_index}\tLeader: {p.leader_id}\t"
                   f"Replicas: {','.join(map(str, p.replica_nodes))}\tIsr: {','.join(map(str, p.isr_nodes))}")


@topics_app.command("delete")
def delete(name: str, bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG) -> None:
    """Delete a topic and its partition logs."""
    from kio.schema.delete_topics.v6 import request as req

    with connect(bootstrap, command_config) as client:
        result = client.request(req.DeleteTopicsRequest(
            topics=(req.DeleteTopicState(name=name, topic_id=uuid.UUID(int=0)),), timeout=_TIMEOUT))
    r = result.responses[0]
    _fail_on(r.error_code, r.error_message, f"deleting topic {name}")
    typer.echo(f"Deleted topic {name}.")


@topics_app.command("alter-config")
def alter_config(name: str, pairs: list[str] = typer.Argument(None, help="key=value to set", show_default=False),
                 delete_keys: list[str] = typer.Option([], "--delete", help="Override to remove (repeatable)."),
                 bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG) -> None:
    """Set (or with --delete remove) topic config overrides."""
    from kio.schema.incremental_alter_configs.v1 import request as req

    pairs = pairs or []
    if not pairs and not delete_keys:
        fail("give at least one key=value to set or --delete KEY to remove", code=2)
    ops = [req.AlterableConfig(name=k, config_operation=0, value=v) for k, v in _parse_pairs(pairs).items()]
    ops += [req.AlterableConfig(name=k, config_operation=1, value=None) for k in delete_keys]
    resource = req.AlterConfigsResource(resource_type=_TOPIC_RESOURCE, resource_name=name, configs=tuple(ops))
    with connect(bootstrap, command_config) as client:
        result = client.request(req.IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False))
    r = result.responses[0]
    _fail_on(r.error_code, r.error_message, f"altering configs of {name}")
    typer.echo(f"Updated configs of topic {name}.")


@topics_app.command("add-partitions")
def add_partitions(name: str, partitions: int = typer.Option(..., "--partitions", help="New total count."),
                   bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG) -> None:
    """Increase a topic's partition count."""
    from kio.schema.create_partitions.v3 import request as req

    topic = req.CreatePartitionsTopic(name=name, count=partitions, assignments=None)
    with connect(bootstrap, command_config) as client:
        result = client.request(req.CreatePartitionsRequest(topics=(topic,), timeout=_TIMEOUT, validate_only=False))
    r = result.results[0]
    _fail_on(r.error_code, r.error_message, f"adding partitions to {name}")
    typer.echo(f"Topic {name} now has {partitions} partitions.")
