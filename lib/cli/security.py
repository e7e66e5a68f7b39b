"""`topiclake users ...` (like kafka-configs --entity-type users --alter --add-config SCRAM-...)
and `topiclake acls ...` (like kafka-acls).

Both work over the Kafka protocol (`--bootstrap`, with `--command-config` or `[client]` for a
secured listener: AlterUserScramCredentials, CreateAcls, ...) or offline on a storage root
(`--data`), which is how the first admin is bootstrapped, as `kafka-storage format --add-scram`
does, before any broker runs.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer

from .output import DEBUG_OPTION, fail, reported_errors
from .roots import directory_root
from .protocol import BOOTSTRAP, COMMAND_CONFIG, connect

users_app = typer.Typer(help="SCRAM and PLAIN users (over the Kafka protocol, or offline with --data).",
                        no_args_is_help=True)
acls_app = typer.Typer(help="ACLs, like kafka-acls (over the Kafka protocol, or offline with --data).",
                       no_args_is_help=True)

DATA = typer.Option(None, "--data", help="Work on this storage root directly (no broker needed): how the first "
                                         "admin is created.")
MECHANISM = typer.Option(["SCRAM-SHA-512"], "--mechanism", help="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable).")


def register(app: typer.Typer) -> None:
    app.add_typer(users_app, name="users")
    app.add_typer(acls_app, name="acls")


# ============================================================================ users
@users_app.command("set")
def users_set(name: str,
              mechanism: list[str] = MECHANISM,
              password: str = typer.Option(..., "--password", prompt=True, hide_input=True,
                                           help="The password (prompted when not given)."),
              iterations: int = typer.Option(4096, "--iterations", help="SCRAM iterations (4096-16384)."),
              data: Optional[str] = DATA, bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG,
              debug: bool = DEBUG_OPTION) -> None:
    """Create a user or change its password (salted; the password itself is never stored)."""
    from topiclake.security.credentials import MECHANISMS, CredentialStore

    mechanisms = [m.upper() for m in mechanism]
    unknown = [m for m in mechanisms if m not in MECHANISMS]
    if unknown:
        fail(f"unknown mechanism {', '.join(unknown)}: one of {', '.join(MECHANISMS)}", code=2)
    with reported_errors(debug):
        if data is not None:
            store = CredentialStore(_root_to_bootstrap(data))
            for m in mechanisms:
                store.set_password(name, m, password, iterations)
            typer.echo(f"user {name} set for {', '.join(mechanisms)} in {store.path}")
            return
        if "PLAIN" in mechanisms:
            fail("a PLAIN user is set offline (--data); over the protocol set a SCRAM credential: PLAIN logins "
                 "accept it too", code=2)
        from topiclake.client import security

        with connect(bootstrap, command_config) as client:
            security.set_user(client, name, mechanisms, password, iterations)
        typer.echo(f"user {name} set for {', '.join(mechanisms)}")


@users_app.command("delete")
def users_delete(name: str,
                 mechanism: list[str] = typer.Option([], "--mechanism", help="Only this mechanism (repeatable; "
                                                                             "default: all of the user's)."),
                 data: Optional[str] = DATA, bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG,
                 debug: bool = DEBUG_OPTION) -> None:
    """Delete a user's credentials."""
    from topiclake.security import scram
    from topiclake.security.credentials import CredentialStore

    mechanisms = [m.upper() for m in mechanism]
    with reported_errors(debug):
        if data is not None:
            store = CredentialStore(_existing_root(data))
            removed = [store.delete(name, m) for m in mechanisms] if mechanisms else [store.delete(name)]
            if not any(removed):
                fail(f"user {name} has no {' or '.join(mechanisms) or 'credentials'}")
            typer.echo(f"user {name}: {', '.join(mechanisms) or 'every credential'} deleted")
            return
        from topiclake.client import security

        with connect(bootstrap, command_config) as client:
            if not mechanisms:
                mechanisms = [c.mechanism for c in security.describe_users(client, [name]).get(name, [])]
                if not mechanisms:
                    fail(f"user {name} has no SCRAM credentials")
            bad = [m for m in mechanisms if m not in scram.MECHANISMS]
            if bad:
                fail(f"over the protocol only SCRAM credentials can be deleted, not {', '.join(bad)}", code=2)
            security.delete_user(client, name, mechanisms)
        typer.echo(f"user {name}: {', '.join(mechanisms)} deleted")


@users_app.command("list")
def users_list(data: Optional[str] = DATA, bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG,
               debug: bool = DEBUG_OPTION) -> None:
    """Users and their mechanisms (iterations in parentheses)."""
    from topiclake.security.credentials import CredentialStore

    with reported_errors(debug):
        if data is not None:
            rows = {u: [(m, c.iterations) for m, c in sorted(creds.items())]
                    for u, creds in sorted(CredentialStore(_existing_root(data)).users().items())}
        else:
            from topiclake.client import security

            with connect(bootstrap, command_config) as client:
                users = security.describe_users(client)
            rows = {u: [(c.mechanism, c.iterations) for c in creds] for u, creds in users.items()}
    for user, creds in rows.items():
        typer.echo(f"{user}\t" + ", ".join(f"{m} ({i})" for m, i in creds))


def _existing_root(value: str) -> Path:
    data = directory_root(value)
    if not data.is_dir():
        fail(f"storage root {data} does not exist", code=2)
    return data


def _root_to_bootstrap(value: str) -> Path:
    """A root for the first users and ACLs: made when it does not exist yet, as `kafka-storage
    format --add-scram` makes a new cluster's log directory (the broker formats the rest)."""
    data = directory_root(value)
    if data.exists() and not data.is_dir():
        fail(f"storage root {data} is not a directory", code=2)
    if not data.exists():
        data.mkdir(parents=True)
        typer.echo(f"created storage root {data}")
    return data


# ============================================================================= acls
RESOURCE_OPTIONS = {
    "topic": typer.Option(None, "--topic", help="A topic (or a prefix with --resource-pattern-type prefixed)."),
    "group": typer.Option(None, "--group", help="A consumer group."),
    "cluster": typer.Option(False, "--cluster", help="The cluster resource."),
    "transactional_id": typer.Option(None, "--transactional-id", help="A transactional id."),
}


def _resource(topic, group, cluster, transactional_id, *, required: bool):
    from topiclake.security.acls import CLUSTER_NAME, ResourceType

    chosen = [(ResourceType.TOPIC, topic), (ResourceType.GROUP, group),
              (ResourceType.CLUSTER, CLUSTER_NAME if cluster else None),
              (ResourceType.TRANSACTIONAL_ID, transactional_id)]
    chosen = [(t, n) for t, n in chosen if n is not None]
    if len(chosen) > 1:
        fail("give one resource: --topic, --group, --cluster or --transactional-id", code=2)
    if not chosen:
        if required:
            fail("give a resource: --topic, --group, --cluster or --transactional-id", code=2)
        return ResourceType.ANY, None
    return chosen[0]


def _entries(allow_principal, deny_principal, allow_host, deny_host, operations, producer, consumer, rtype, name,
             pattern, group):
    """The bindings kafka-acls would add for these options."""
    from topiclake.security.acls import (
        CLUSTER_NAME,
        AclBinding,
        Operation,
        PatternType,
        Permission,
        ResourceType,
        parse_enum,
    )

    out = []
    ops = [(rtype, name, parse_enum(Operation, o)) for o in operations]
    if producer:
        ops += [(rtype, name, op) for op in (Operation.WRITE, Operation.DESCRIBE, Operation.CREATE)]
    if consumer:
        ops += [(rtype, name, op) for op in (Operation.READ, Operation.DESCRIBE)]
        if group:
            ops.append((ResourceType.GROUP, group, Operation.READ))
    if not ops:
        fail("give --operation (repeatable), --producer or --consumer", code=2)
    for permission, principals, hosts in ((Permission.ALLOW, allow_principal, allow_host),
                                          (Permission.DENY, deny_principal, deny_host)):
        for principal in principals:
            for host in hosts or ["*"]:
                for t, n, op in ops:
                    pattern_of = pattern if t != ResourceType.CLUSTER else PatternType.LITERAL
                    out.append(AclBinding(t, n if t != ResourceType.CLUSTER else CLUSTER_NAME, pattern_of,
                                          principal, host, op, permission))
    if not out:
        fail("give --allow-principal or --deny-principal", code=2)
    return out


@contextmanager
def usage_errors():
    """A bad option value (an unknown operation, ...) is a usage error: one line, exit 2."""
    from topiclake.security.acls import AclError

    try:
        yield
    except AclError as exc:
        fail(str(exc), code=2)


def _pattern(value: str, *, for_filter: bool):
    from topiclake.security.acls import PatternType, parse_enum

    pattern = parse_enum(PatternType, value)
    allowed = (PatternType.LITERAL, PatternType.PREFIXED) + ((PatternType.ANY, PatternType.MATCH) if for_filter else ())
    if pattern not in allowed:
        fail(f"--resource-pattern-type must be one of {', '.join(p.name.lower() for p in allowed)}", code=2)
    return pattern


@acls_app.command("add")
def acls_add(allow_principal: list[str] = typer.Option([], "--allow-principal", help="e.g. User:alice (repeatable)."),
             deny_principal: list[str] = typer.Option([], "--deny-principal", help="e.g. User:mallory (repeatable)."),
             allow_host: list[str] = typer.Option([], "--allow-host", help="Client address (default *)."),
             deny_host: list[str] = typer.Option([], "--deny-host", help="Client address (default *)."),
             operation: list[str] = typer.Option([], "--operation",
                                                 help="Read, Write, Create, Delete, Alter, Describe, "
                                                      "ClusterAction, DescribeConfigs, AlterConfigs, "
                                                      "IdempotentWrite, All."),
             producer: bool = typer.Option(False, "--producer", help="WRITE, DESCRIBE and CREATE on the topic."),
             consumer: bool = typer.Option(False, "--consumer",
                                           help="READ and DESCRIBE on the topic, READ on --group."),
             topic: str = RESOURCE_OPTIONS["topic"], group: str = RESOURCE_OPTIONS["group"],
             cluster: bool = RESOURCE_OPTIONS["cluster"],
             transactional_id: str = RESOURCE_OPTIONS["transactional_id"],
             resource_pattern_type: str = typer.Option("literal", "--resource-pattern-type",
                                                       help="literal or prefixed."),
             data: Optional[str] = DATA, bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG,
             debug: bool = DEBUG_OPTION) -> None:
    """Add ACLs (like kafka-acls --add)."""
    from topiclake.security.acls import AclStore, ResourceType

    with usage_errors():
        pattern = _pattern(resource_pattern_type, for_filter=False)
        rtype, name = _resource(topic, None if consumer else group, cluster, transactional_id, required=True)
        if consumer and rtype != ResourceType.TOPIC:
            fail("--consumer needs --topic (and --group)", code=2)
        bindings = _entries(allow_principal, deny_principal, allow_host, deny_host, operation, producer, consumer,
                            rtype, name, pattern, group)
    with reported_errors(debug):
        if data is not None:
            AclStore(_root_to_bootstrap(data)).add(bindings)
        else:
            from topiclake.client import security

            with connect(bootstrap, command_config) as client:
                security.create_acls(client, bindings)
    for b in bindings:
        typer.echo(f"added: {b.describe()}")


def _filter_from(principal, host, operation, permission, topic, group, cluster, transactional_id, pattern_type):
    from topiclake.security.acls import AclFilter, Operation, PatternType, Permission, parse_enum

    rtype, name = _resource(topic, group, cluster, transactional_id, required=False)
    pattern = _pattern(pattern_type, for_filter=True) if pattern_type else (
        PatternType.ANY if name is None else PatternType.LITERAL)
    return AclFilter(rtype, name, pattern, principal, host,
                     parse_enum(Operation, operation) if operation else Operation.ANY,
                     parse_enum(Permission, permission) if permission else Permission.ANY)


FILTER_OPTIONS = {
    "principal": typer.Option(None, "--principal", help="Only this principal."),
    "host": typer.Option(None, "--host", help="Only this host."),
    "operation": typer.Option(None, "--operation", help="Only this operation."),
    "permission": typer.Option(None, "--permission", help="allow or deny."),
    "pattern": typer.Option(None, "--resource-pattern-type",
                            help="literal, prefixed, any, or match (every pattern that applies to the resource)."),
}


@acls_app.command("remove")
def acls_remove(principal: str = FILTER_OPTIONS["principal"], host: str = FILTER_OPTIONS["host"],
                operation: str = FILTER_OPTIONS["operation"], permission: str = FILTER_OPTIONS["permission"],
                topic: str = RESOURCE_OPTIONS["topic"], group: str = RESOURCE_OPTIONS["group"],
                cluster: bool = RESOURCE_OPTIONS["cluster"],
                transactional_id: str = RESOURCE_OPTIONS["transactional_id"],
                resource_pattern_type: str = FILTER_OPTIONS["pattern"],
                data: Optional[str] = DATA, bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG,
                debug: bool = DEBUG_OPTION) -> None:
    """Remove the ACLs that match (like kafka-acls --remove); what is not given matches anything."""
    from topiclake.security.acls import AclStore

    with usage_errors():
        f = _filter_from(principal, host, operation, permission, topic, group, cluster, transactional_id,
                         resource_pattern_type)
    with reported_errors(debug):
        if data is not None:
            [removed] = AclStore(_existing_root(data)).remove([f])
            removed = [b.describe() for b in removed]
        else:
            from topiclake.client import security

            with connect(bootstrap, command_config) as client:
                removed = [b.describe() for b in security.delete_acls(client, f)]
    for line in removed:
        typer.echo(f"removed: {line}")
    if not removed:
        typer.echo("no ACL matched")


@acls_app.command("list")
def acls_list(principal: str = FILTER_OPTIONS["principal"], host: str = FILTER_OPTIONS["host"],
              operation: str = FILTER_OPTIONS["operation"], permission: str = FILTER_OPTIONS["permission"],
              topic: str = RESOURCE_OPTIONS["topic"], group: str = RESOURCE_OPTIONS["group"],
              cluster: bool = RESOURCE_OPTIONS["cluster"], transactional_id: str = RESOURCE_OPTIONS["transactional_id"],
              resource_pattern_type: str = FILTER_OPTIONS["pattern"],
              data: Optional[str] = DATA, bootstrap: str = BOOTSTRAP, command_config: Path = COMMAND_CONFIG,
              debug: bool = DEBUG_OPTION) -> None:
    """List ACLs (like kafka-acls --list), grouped by resource pattern."""
    from topiclake.security.acls import AclStore

    with usage_errors():
        f = _filter_from(principal, host, operation, permission, topic, group, cluster, transactional_id,
                         resource_pattern_type)
    with reported_errors(debug):
        if data is not None:
            found = AclStore(_existing_root(data)).find(f)
        else:
            from topiclake.client import security

            with connect(bootstrap, command_config) as client:
                found = security.describe_acls(client, f)
        rows = [(b.resource_type.name, b.resource_name, b.pattern_type.name, b.principal, b.host,
                 b.operation.name, b.permission.name) for b in found]
    current = None
    for rtype, name, pattern, *entry in rows:
        if (rtype, name, pattern) != current:
            current = (rtype, name, pattern)
            typer.echo(f"Current ACLs for resource `ResourcePattern(resourceType={rtype}, name={name}, "
                       f"patternType={pattern})`:")
        who, host, op, perm = entry
        typer.echo(f" \t(principal={who}, host={host}, operation={op}, permissionType={perm})")
