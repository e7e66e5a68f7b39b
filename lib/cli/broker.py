"""`topiclake broker start`: run the Kafka-protocol broker until SIGTERM/SIGINT."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import typer

from .output import DEBUG_OPTION, fail, reported_errors

broker_app = typer.Typer(help="Run the Kafka-protocol broker.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(broker_app, name="broker")


@broker_app.command("start")
def start(
    config: Path = typer.Option(None, "--config", help="Settings file (default conf/topiclake.toml if present)."),
    host: str = typer.Option(None, "--host", help="Address to bind (default 127.0.0.1)."),
    port: int = typer.Option(None, "--port", help="Port to listen on (default 9092; 0 picks a free one)."),
    listeners: str = typer.Option(None, "--listeners",
                                  help="Kafka's listeners, e.g. PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9094 "
                                       "(instead of --host/--port; TLS and SASL are set in [security])."),
    advertised_listeners: str = typer.Option(None, "--advertised-listeners",
                                             help="What clients are told per listener (default: the listeners)."),
    data: Optional[str] = typer.Option(None, "--data", help="Shared storage root: a directory or s3://bucket/prefix "
                                                            "(default $TOPICLAKE_ROOT or ./data)."),
    cache_dir: Optional[str] = typer.Option(None, "--cache-dir",
                                            help="With an s3:// root: the local cache directory, emptied on start "
                                                 "(default [storage] cache_dir, else ./data-cache/<bucket>-<prefix>)."),
    broker_id: int = typer.Option(None, "--broker-id", help="Broker id (default 0)."),
    registry_listen: str = typer.Option(None, "--registry-listen",
                                        help="Also serve the schema registry's REST API on HOST:PORT "
                                             "(default: [registry] listen; port 0 picks a free one)."),
    metrics_listen: str = typer.Option(None, "--metrics-listen",
                                       help="Serve Prometheus' /metrics on HOST:PORT (default: [metrics] listen; "
                                            "unset: off). docs/METRICS.md lists the series."),
    log_level: str = typer.Option("INFO", "--log-level", help="Python logging level."),
    debug: bool = DEBUG_OPTION,
) -> None:
    """Start the broker in the foreground; SIGTERM/SIGINT stop it cleanly (exit 0). A broker that
    cannot start (bad settings, storage it cannot write, an address it cannot bind) says why in
    one line and exits 1."""
    from topiclake.broker.config import BrokerConfig
    from topiclake.broker.server import run_broker
    from topiclake.segments.settings import load_settings
    from topiclake.segments.storage import StorageLayout

    if not isinstance(logging.getLevelName(log_level.upper()), int):
        fail(f"--log-level {log_level} is not a logging level (DEBUG, INFO, WARNING, ERROR)")
    with reported_errors(debug):
        logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        settings = load_settings(config)
        broker_config = BrokerConfig.from_settings(settings, root=data, host=host, port=port, broker_id=broker_id,
                                                   registry_listen=registry_listen, metrics_listen=metrics_listen,
                                                   listeners=listeners, cache_dir=cache_dir,
                                                   advertised_listeners=advertised_listeners)
        StorageLayout(broker_config.root).ensure_writable()
        run_broker(broker_config)
