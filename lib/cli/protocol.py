"""What the commands that talk to a running cluster share: the --bootstrap option and connecting
(topiclake.client: each request goes to the broker that serves it)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import typer

from .output import describe_exception, fail

BOOTSTRAP = typer.Option(None, "--bootstrap", "--bootstrap-server",
                         help="Brokers host:port[,host:port...], any of the cluster's (default: the live brokers "
                              "registered in the storage root, else 127.0.0.1:9092).")
COMMAND_CONFIG = typer.Option(None, "--command-config",
                              help="Client properties for a secured listener (security.protocol, sasl.mechanism, "
                                   "sasl.jaas.config, ssl.truststore.location, ...), as Kafka's tools take them. "
                                   "Default: [client] of the settings file.")


def client_security(command_config: Path | None = None):
    """How to reach the broker: --command-config, else [client] of the settings file."""
    from topiclake.security.client_config import load
    from topiclake.segments.errors import InvalidConfigError
    from topiclake.segments.settings import load_settings

    try:
        return load(load_settings() if command_config is None else {}, command_config)
    except InvalidConfigError as exc:
        fail(str(exc))


def bootstrap_servers(bootstrap: str | None, protocol: str | None) -> str:
    """--bootstrap, else the live brokers registered in the storage root ($TOPICLAKE_ROOT,
    [storage] root, ./data), else 127.0.0.1:9092."""
    from topiclake.client.registrations import bootstrap_or_registered
    from topiclake.segments.errors import InvalidConfigError
    from topiclake.segments.settings import load_settings, storage_root

    if bootstrap is not None:
        return bootstrap
    try:
        root = storage_root(load_settings())
    except InvalidConfigError:
        root = None
    return bootstrap_or_registered(None, root, protocol)


@contextmanager
def connect(bootstrap: str | None, command_config: Path | None = None) -> Iterator:
    """A cluster client for the `with` block (TLS and SASL as --command-config or [client] say).
    No broker of the bootstrap list reachable, a refused login, a broker lost during the command
    with no other to turn to, or a request the cluster refuses: one error line, exit code 1."""
    from topiclake.client import AuthenticationError, CannotConnect, ClientError, ClusterClient

    security = client_security(command_config)
    bootstrap = bootstrap_servers(bootstrap, security.security_protocol)
    client = ClusterClient(bootstrap, security=security, client_id="topiclake-cli")
    with client:
        try:
            yield client.connect()
        except AuthenticationError as exc:
            fail(f"the broker at {bootstrap} refused the login of {security.sasl_username!r}: {exc}")
        except CannotConnect as exc:
            fail(f"cannot reach a broker at {bootstrap} ({security.security_protocol}): {describe_exception(exc)}")
        except OSError as exc:
            fail(f"lost the broker at {bootstrap}: {describe_exception(exc)}")
        except ClientError as exc:
            fail(str(exc))
