"""`topiclake console`: the web console over a storage root and its broker (topiclake.console),
in its own process: the broker never loads the lake, the console never loads the broker."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .output import fail, reported_errors
from .protocol import COMMAND_CONFIG, client_security


def register(app: typer.Typer) -> None:
    app.command("console")(console)


def console(
    data: str = typer.Option(..., "--data", help="Storage root (the broker's and the tables'): a directory or "
                                                 "s3://bucket/prefix."),
    bootstrap: Optional[str] = typer.Option(None, "--bootstrap", "--bootstrap-server",
                                            help="Broker host:port (default: a live broker registered in the root)."),
    listen: str = typer.Option("127.0.0.1:8080", "--listen", help="HOST:PORT the console serves on."),
    security_protocol: Optional[str] = typer.Option(
        None, "--security-protocol", help="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (default: the registered "
                                          "listener's, else the --command-config's). With SASL every browser logs in "
                                          "with a broker user."),
    command_config: Path = COMMAND_CONFIG,
    sample_interval: float = typer.Option(5.0, "--sample-interval", help="Seconds between throughput/lag samples."),
    broker_metrics: Optional[str] = typer.Option(
        None, "--broker-metrics", help="The brokers' Prometheus /metrics URLs, comma-separated, for the object "
                                       "store's figures (default: the URLs the live brokers register)."),
) -> None:
    """Serve the web console: cluster, topics and records, groups and lag, Delta tables, schemas."""
    from topiclake.console.server import ConsoleConfigError, serve
    from topiclake.lake.jobs import preflight

    with reported_errors(False):
        root = preflight.resolve_tables_root(None, data)  # a directory, or a bucket root (needs --bootstrap)
    security = client_security(command_config) if command_config is not None else None
    try:
        serve(root, bootstrap=bootstrap, listen=listen, security=security, security_protocol=security_protocol,
              sample_interval_s=sample_interval,
              broker_metrics=tuple(u.strip() for u in (broker_metrics or "").split(",") if u.strip()),
              on_ready=lambda url: typer.echo(f"topiclake console on {url} (root {root}); Ctrl-C stops it", err=True))
    except ConsoleConfigError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        pass
