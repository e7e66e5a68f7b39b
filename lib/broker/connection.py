"""One client connection: size-prefixed frames in, responses out, in request order.

Requests on a connection are handled one at a time, like Kafka's SocketServer, which mutes a
channel until its in-flight request is answered: responses are therefore in order by
construction. A frame with a negative or oversized size prefix, or one kio cannot decode,
closes this connection only (Kafka's InvalidReceiveException / InvalidRequestException).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import Any

from . import wire
from .context import BrokerContext
from .errors import CloseConnection
from .handlers import REGISTRY
from .handlers.api_versions import API_VERSIONS_KEY, unsupported_version_response

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
SENDFILE_MIN_BYTES = 64 * 1024  # below this, a copy is cheaper than draining for sendfile


class Connection:
    def __init__(self, broker: BrokerContext, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.broker = broker
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.busy = False  # a request is being handled (shutdown waits for it)

    async def serve(self) -> None:
        try:
            while not self.broker.shutting_down.is_set():
                frame = await self._read_frame()
                if frame is None:
                    return
                self.busy = True
                try:
                    if not await self._handle(frame):
                        return
                finally:
                    self.busy = False
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("connection %s failed", self.peer)
        finally:
            self.close()

    def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()

    async def _read_frame(self) -> bytes | None:
        try:
            head = await self.reader.readexactly(4)
        except asyncio.IncompleteReadError:
            return None
        (size,) = _SIZE.unpack(head)
        limit = self.broker.config.max_request_bytes
        if size < 0 or size > limit:
            log.warning("closing %s: frame size %d is outside [0, %d] (socket.request.max.bytes)",
                        self.peer, size, limit)
            return None
        return await self.reader.readexactly(size)

    async def _handle(self, frame: bytes) -> bool:
        """Handle one request; False closes the connection."""
        try:
            request = wire.parse_request(frame, REGISTRY.supports)
        except wire.UnsupportedVersion as exc:
            if exc.api_key == API_VERSIONS_KEY:
                # KIP-511: answer an unknown ApiVersions version with v0 and our versions, so the
                # client can retry with one we serve.
                await self._send(exc.correlation_id, unsupported_version_response())
                return True
            log.warning("closing %s: %s", self.peer, exc)
            return False
        except wire.MalformedRequest as exc:
            log.warning("closing %s: %s", self.peer, exc)
            return False
        route = REGISTRY.get(request.api_key)
        try:
            response = await route.handler(self.broker, request)
        except CloseConnection as exc:
            log.info("closing %s: %s", self.peer, exc)
            return False
        except Exception:
            log.exception("%s v%d from %s (%s) failed", route.name, request.api_version, self.peer,
                          request.client_id)
            return False
        if response is not None:
            await self._send(request.correlation_id, response)
        return True

    async def _send(self, correlation_id: int, response: Any) -> None:
        chunks = wire.encode_response(correlation_id, response)
        transport = self.writer.transport
        loop = asyncio.get_running_loop()
        for chunk in chunks:
            if type(chunk) is bytes:
                self.writer.write(chunk)
            elif chunk.size >= SENDFILE_MIN_BYTES and transport.get_extra_info("sslcontext") is None:
                await self.writer.drain()
                await loop.sendfile(transport, chunk.fileobj, chunk.position, chunk.size)
            else:
                self.writer.write(chunk.read())
        await self.writer.drain()

