"""Starting the console: which broker and how (bootstrap, security), then the web server."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from aiohttp import web

from topiclake.client.registrations import live_endpoints
from topiclake.security.client_config import PLAINTEXT, ClientSecurity
from topiclake.segments.storage import StorageLayout

from .access import Access
from .app import create_app


class ConsoleConfigError(Exception):
    """The console cannot start as asked (one line)."""


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ConsoleConfigError(f"--listen {listen!r} is not HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def resolve(layout: StorageLayout, bootstrap: str | None, security: ClientSecurity | None,
            security_protocol: str | None) -> tuple[str, ClientSecurity]:
    """(bootstrap, security): --bootstrap (host:port or a comma list), else every live broker
    registered in the root (the first's first listener's protocol, SASL_PLAINTEXT, ..., is then
    the one spoken unless said otherwise)."""
    if bootstrap is None:
        registered = live_endpoints(layout, security_protocol)
        if not registered:
            raise ConsoleConfigError(f"no live broker registered under {layout.brokers_dir}: start one, "
                                     "or give --bootstrap HOST:PORT")
        bootstrap = ",".join(address for _protocol, address in registered)
        security_protocol = security_protocol or registered[0][0]
    security = security or PLAINTEXT
    if security_protocol and security_protocol != security.security_protocol:
        try:  # a SASL protocol: the user and password come from each browser login (access.py)
            security = dataclasses.replace(security, security_protocol=security_protocol,
                                           sasl_mechanism=security.sasl_mechanism or "SCRAM-SHA-256",
                                           sasl_username=security.sasl_username or "-",
                                           sasl_password=security.sasl_password or "")
        except Exception as exc:  # noqa: BLE001 - InvalidConfigError: an unknown protocol name
            raise ConsoleConfigError(str(exc)) from None
    return bootstrap, security


def serve(root_dir: Path, *, bootstrap: str | None = None, listen: str = "127.0.0.1:8080",
          security: ClientSecurity | None = None, security_protocol: str | None = None,
          sample_interval_s: float = 5.0, broker_metrics: tuple[str, ...] = (), on_ready=None) -> None:
    """Run the console until interrupted. `on_ready(url)` is called once it listens;
    `broker_metrics`: /metrics URLs for the object store's figures (default: the registered ones)."""
    layout = StorageLayout(root_dir)
    if not layout.root.is_dir():
        raise ConsoleConfigError(f"storage root {layout.root} does not exist")
    host, port = parse_listen(listen)
    bootstrap, security = resolve(layout, bootstrap, security, security_protocol)
    app = create_app(layout, Access(bootstrap, security), sample_interval_s=sample_interval_s,
                     broker_metrics=broker_metrics)
    asyncio.run(_run(app, host, port, on_ready))


async def _run(app: web.Application, host: str, port: int, on_ready) -> None:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise ConsoleConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound = site._server.sockets[0].getsockname()[1] if port == 0 else port
    if on_ready is not None:
        on_ready(f"http://{host}:{bound}/")
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
