"""What the commands that talk to a running broker share: the --bootstrap option and connecting."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import typer

from .output import describe_exception, fail

BOOTSTRAP = typer.Option("127.0.0.1:9092", "--bootstrap", "--bootstrap-server", help="Broker host:port.")
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


@contextmanager
def connect(bootstrap: str, command_config: Path | None = None) -> Iterator:
    """A protocol client to the broker for the `with` block (TLS and SASL as --command-config or
    [client] say). A broker that cannot be reached, refuses the login, or closes the connection
    or stops answering during the command, is one error line and exit code 1."""
    from topiclake.broker.client import AuthenticationError, ProtocolClient

    security = client_security(command_config)
    try:
        client = ProtocolClient(bootstrap, security=security)
    except AuthenticationError as exc:
        fail(f"the broker at {bootstrap} refused the login of {security.sasl_username!r}: {exc}")
    except OSError as exc:
        fail(f"cannot reach a broker at {bootstrap} ({security.security_protocol}): {describe_exception(exc)}")
    with client:
        try:
            yield client
        except OSError as exc:
            fail(f"lost the broker at {bootstrap}: {describe_exception(exc)}")
