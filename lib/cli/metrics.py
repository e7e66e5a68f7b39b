"""`topiclake metrics`: the lake's Prometheus metrics (the jobs' last runs, each table's snapshot,
lag and freshness), printed once or served on /metrics. No Spark: deltalake and the segment files.
On an object-store root (s3://...), each table's snapshot figures.
docs/PIPELINE-METRICS.md lists the series."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Optional

import typer

from .output import DEBUG_OPTION, fail, reported_errors


def register(app: typer.Typer) -> None:
    app.command("metrics")(metrics)


def metrics(
    data: Optional[str] = typer.Option(None, "--data", help="Storage root."),
    config: Optional[Path] = typer.Option(None, "--config", help="Settings file (default conf/topiclake.toml)."),
    listen: Optional[str] = typer.Option(None, "--listen", metavar="HOST:PORT",
                                         help="Serve /metrics here instead of printing once."),
    debug: bool = DEBUG_OPTION,
) -> None:
    """Print the lake's metrics in Prometheus' text format (or serve them with --listen)."""
    from topiclake.lake.jobs import preflight
    from topiclake.lake.metrics import scrape

    address = parse_listen(listen) if listen is not None else None
    with reported_errors(debug):
        root = preflight.resolve_tables_root(str(config) if config else None, data)  # a bucket too
        if address is None:
            sys.stdout.buffer.write(scrape.exposition(root))
            sys.stdout.flush()
            return
        host, port = address
        try:
            server, _thread = scrape.serve(root, host, port)
        except OSError as exc:
            fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    bound = server.server_address
    print(f"serving the metrics of {root} on http://{bound[0]}:{bound[1]}/metrics", file=sys.stderr, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        fail(f"--listen {value!r}: expected HOST:PORT, e.g. 127.0.0.1:9309", code=2)
    return host.strip("[]") or "0.0.0.0", int(port)
