"""`topiclake registry start`: the Confluent-compatible schema registry beside a broker."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import typer

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
    log_level: str = typer.Option("INFO", "--log-level", help="Python logging level."),
) -> None:
    """Serve the registry until SIGTERM/SIGINT; _schemas is read and written over the Kafka protocol.
    A broker with a registry listen address serves the same API itself: run one writing registry per
    cluster (others --read-only)."""
    from topiclake.registry.config import RegistryConfig
    from topiclake.registry.errors import RegistryError
    from topiclake.registry.standalone import run
    from topiclake.segments.errors import InvalidConfigError
    from topiclake.segments.settings import load_settings

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = RegistryConfig.from_settings(load_settings(config), listen=listen)
        address = settings.listen or "127.0.0.1:8081"
        asyncio.run(run(bootstrap, address, topic=settings.topic, read_only=read_only,
                        on_ready=lambda url: typer.echo(f"schema registry at {url}")))
    except (InvalidConfigError, RegistryError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
