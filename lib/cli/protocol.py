"""What the commands that talk to a running broker share: the --bootstrap option and connecting."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import typer

from .output import describe_exception, fail

BOOTSTRAP = typer.Option("127.0.0.1:9092", "--bootstrap", "--bootstrap-server", help="Broker host:port.")


@contextmanager
def connect(bootstrap: str) -> Iterator:
    """A protocol client to the broker for the `with` block. A broker that cannot be reached, or
    that closes the connection or stops answering during the command, is one error line and
    exit code 1."""
    from topiclake.broker.client import ProtocolClient

    try:
        client = ProtocolClient(bootstrap)
    except OSError as exc:
        fail(f"cannot reach a broker at {bootstrap}: {exc}")
    with client:
        try:
            yield client
        except OSError as exc:
            fail(f"lost the broker at {bootstrap}: {describe_exception(exc)}")
