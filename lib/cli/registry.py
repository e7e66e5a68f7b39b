"""`topiclake registry start`: the Confluent-compatible schema registry beside a broker."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import typer

from .protocol import COMMAND_CONFIG

registry_app = typer.Typer(help="Run the schema registry (Confluent's REST API).", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(registry_app, name="registry")


@registry_app.command("start")
def start(
    bootstrap: str = typer.Option("127.0.0.1:9092", "--bootstrap", help="The broker holding _schemas."),
    listen: str = typer.Option(None, "--listen",
                               help="HOST:PORT for the REST API (default: listen of the settings' registry table, "
                                    "else 127.0.0.1:8081)."),
    config: Path = typer.Option(None, "--config", help="Settings file (default conf/topiclake.toml if present)."),
    read_only: bool = typer.Option(False, "--read-only", help="Serve reads only (another registry writes)."),
    command_config: Path = COMMAND_CONFIG,
    users_from: Path = typer.Option(None, "--users-from", metavar="DIR",
                                    help="A storage root whose SASL users the REST API's HTTP basic auth checks, "
                                         "as the broker's own registry does (default: no basic auth)."),
    log_level: str = typer.Option("INFO", "--log-level", help="Python logging level."),
) -> None:
    """Serve the registry until SIGTERM/SIGINT; _schemas is read and written over the Kafka protocol
    (a secured listener with --command-config or [client]). A broker with a registry listen address
    serves the same API itself: run one writing registry per cluster (others --read-only)."""
    from topiclake.registry.basic_auth import basic_auth
    from topiclake.registry.config import RegistryConfig
    from topiclake.registry.errors import RegistryError
    from topiclake.registry.standalone import run
    from topiclake.security.client_config import load as load_client_security
    from topiclake.security.credentials import CredentialStore
    from topiclake.segments.errors import InvalidConfigError
    from topiclake.segments.settings import load_settings

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        loaded = load_settings(config)
        settings = RegistryConfig.from_settings(loaded, listen=listen)
        security = load_client_security(loaded if command_config is None else {}, command_config)
        address = settings.listen or "127.0.0.1:8081"
        authenticate = None
        if users_from is not None:
            store = CredentialStore(users_from)
            if not store.path.is_file():
                raise InvalidConfigError(f"--users-from {users_from}: no users there ({store.path} does not exist)")
            authenticate = basic_auth(store.verify_password)
        asyncio.run(run(bootstrap, address, topic=settings.topic, read_only=read_only,
                        client_config=security.librdkafka(), authenticate=authenticate,
                        on_ready=lambda url: typer.echo(f"schema registry at {url}")))
    except (InvalidConfigError, RegistryError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
