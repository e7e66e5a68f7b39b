"""`topiclake broker start`: run the Kafka-protocol broker until SIGTERM/SIGINT."""

from __future__ import annotations

import logging
from pathlib import Path

import typer

broker_app = typer.Typer(help="Run the Kafka-protocol broker.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(broker_app, name="broker")


@broker_app.command("start")
def start(
    config: Path = typer.Option(None, "--config", help="Settings file (default conf/topiclake.toml if present)."),
    host: str = typer.Option(None, "--host", help="Address to bind (default 127.0.0.1)."),
    port: int = typer.Option(None, "--port", help="Port to listen on (default 9092; 0 picks a free one)."),
    data: Path = typer.Option(None, "--data", help="Shared storage root (default $TOPICLAKE_ROOT or ./data)."),
    broker_id: int = typer.Option(None, "--broker-id", help="Broker id (default 0)."),
    registry_listen: str = typer.Option(None, "--registry-listen",
                                        help="Also serve the schema registry's REST API on HOST:PORT "
                                             "(default: [registry] listen; port 0 picks a free one)."),
    log_level: str = typer.Option("INFO", "--log-level", help="Python logging level."),
) -> None:
    """Start the broker in the foreground; SIGTERM/SIGINT stop it cleanly (exit 0)."""
    from topiclake.broker.config import BrokerConfig
    from topiclake.broker.server import run_broker
    from topiclake.segments.errors import InvalidConfigError
    from topiclake.segments.ownership import StorageRootInUseError, StorageRootNotWritableError
    from topiclake.segments.settings import load_settings

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings(config)
        broker_config = BrokerConfig.from_settings(settings, root=data, host=host, port=port, broker_id=broker_id,
                                                   registry_listen=registry_listen)
    except InvalidConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        run_broker(broker_config)
    except (StorageRootInUseError, StorageRootNotWritableError, OSError) as exc:
        # another broker owns the root; an address in use (Kafka or registry port)
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
