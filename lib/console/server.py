"""Starting the console: which broker and how (bootstrap, security), then the web server."""

from __future__ import annotations

import asyncio
import dataclasses

from aiohttp import web

from topiclake.security.client_config import PLAINTEXT, ClientSecurity

from .access import Access
from .app import create_app
from .storage import BucketRoot, DirectoryRoot, console_root


class ConsoleConfigError(Exception):
    """The console cannot start as asked (one line)."""


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ConsoleConfigError(f"--listen {listen!r} is not HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def resolve(at: DirectoryRoot | BucketRoot, bootstrap: str | None, security: ClientSecurity | None,
            security_protocol: str | None) -> tuple[str, ClientSecurity]:
    """(bootstrap, security): --bootstrap (host:port or a comma list), else every live broker
    registered in the root (the first's first listener's protocol, SASL_PLAINTEXT, ..., is then
    the one spoken unless said otherwise)."""
    if bootstrap is None:
        registered = at.live_endpoints(security_protocol)
        if not registered:
            where = at.layout.brokers_dir if isinstance(at, DirectoryRoot) else f"{at.root} (a bucket registers none)"
            raise ConsoleConfigError(f"no live broker registered under {where}: start one, "
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


def serve(storage_root, *, bootstrap: str | None = None, listen: str = "127.0.0.1:8080",
          security: ClientSecurity | None = None, security_protocol: str | None = None,
          sample_interval_s: float = 5.0, broker_metrics: tuple[str, ...] = (), on_ready=None) -> None:
    """Run the console until interrupted. `on_ready(url)` is called once it listens;
    `broker_metrics`: /metrics URLs for the object store's figures (default: the registered ones).
    `storage_root`: a directory (a Path), or an object-store root (topiclake.store's S3Root)."""
    from topiclake.store.errors import StoreError

    at = console_root(storage_root)
    try:
        if not at.exists():
            raise ConsoleConfigError(f"storage root {at.root} does not exist")
    except StoreError as exc:  # a bucket root whose server does not answer, or refuses us: one line
        raise ConsoleConfigError(f"storage root {at.root}: {exc}") from None
    host, port = parse_listen(listen)
    bootstrap, security = resolve(at, bootstrap, security, security_protocol)
    app = create_app(at, Access(bootstrap, security), sample_interval_s=sample_interval_s,
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
