"""`[metrics] listen`: Prometheus' /metrics over HTTP, on the broker's own event loop (aiohttp, as
the schema registry). A scrape copies in-memory state on the loop and does its disk reads and
text formatting on other threads (metrics.MetricsCollector), so the loop is never held for long.
"""

from __future__ import annotations

import logging
import socket
from typing import TYPE_CHECKING

from .metrics import MetricsCollector

if TYPE_CHECKING:
    from aiohttp import web

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text format


def bind(host: str, port: int) -> socket.socket:
    """The endpoint's listening socket, bound with the broker's listeners (before the storage root
    is touched), so an address in use fails the start like a listener's does (OSError)."""
    return socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)


class MetricsServer:
    def __init__(self, collector: MetricsCollector, sock: socket.socket):
        self.collector = collector
        self.sock = sock
        self.host, self.port = sock.getsockname()[:2]
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        from aiohttp import web  # on use: ~0.1 s of every broker's start otherwise, with or without metrics

        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.SockSite(self._runner, self.sock).start()
        log.info("Prometheus metrics on http://%s:%d/metrics", self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.sock.close()

    async def _metrics(self, _request: web.Request) -> web.Response:
        from aiohttp import web

        try:
            body = await self.collector.scrape()
        except Exception:  # a failed scrape answers 500; the broker carries on
            log.exception("collecting the metrics failed")
            return web.Response(status=500, text="collecting the metrics failed; see the broker's log\n")
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})
