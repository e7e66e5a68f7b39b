"""What the commands that talk to a running broker share: the --bootstrap option and connecting."""

from __future__ import annotations

import typer

from .output import fail

BOOTSTRAP = typer.Option("127.0.0.1:9092", "--bootstrap", "--bootstrap-server", help="Broker host:port.")


def connect(bootstrap: str):
    """A protocol client to the broker, or a clear error and exit code 1."""
    from topiclake.broker.client import ProtocolClient

    try:
        return ProtocolClient(bootstrap)
    except OSError as exc:
        fail(f"cannot reach a broker at {bootstrap}: {exc}")
