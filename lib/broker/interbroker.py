"""Requests one broker of a cluster sends another (Kafka's BrokerToBrokerRequests /
InterBrokerSendThread): a transaction coordinator writing markers to the leaders of the
transaction's partitions (WriteTxnMarkers), a partition leader asking a remote transaction
coordinator to verify or add a partition (AddPartitionsToTxn v4/v5, KIP-890).

One connection per peer broker, opened on first use on the listener this broker's inter-broker
traffic uses (`listener`, the first one it binds), requests on it one at a time; a connection
that fails is dropped and the next request opens a new one. Addresses come from `leadership`
(the live brokers' registrations), so a peer that moved is found again.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import Any

from . import wire
from .errors import BrokerError
from .leadership import Leadership

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
REQUEST_TIMEOUT_S = 10.0


class PeerUnavailable(BrokerError):
    """The peer broker is not live, or did not answer in time."""

    def __init__(self, message: str):
        from kio.schema.errors import ErrorCode

        super().__init__(message, ErrorCode.coordinator_not_available)


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.lock = asyncio.Lock()
        self.correlation = 0

    def close(self) -> None:
        self.writer.close()


class InterBrokerClient:
    def __init__(self, leadership: Leadership, listener: str, broker_id: int):
        self.leadership = leadership
        self.listener = listener
        self.client_id = f"broker-{broker_id}"
        self._connections: dict[int, _Connection] = {}

    async def request(self, broker_id: int, body: Any, timeout: float = REQUEST_TIMEOUT_S) -> Any:
        """Send `body` (a kio request) to broker `broker_id`; its decoded response."""
        try:
            return await asyncio.wait_for(self._request(broker_id, body), timeout)
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError) as exc:
            self._drop(broker_id)
            raise PeerUnavailable(f"broker {broker_id} did not answer {type(body).__name__}: "
                                  f"{type(exc).__name__}: {exc}") from None

    async def _request(self, broker_id: int, body: Any) -> Any:
        connection = await self._connect(broker_id)
        async with connection.lock:
            connection.correlation += 1
            correlation = connection.correlation
            connection.writer.write(wire.encode_request(correlation, body, self.client_id))
            await connection.writer.drain()
            (size,) = _SIZE.unpack(await connection.reader.readexactly(4))
            frame = await connection.reader.readexactly(size)
        answered, response = wire.decode_response(frame, body)
        if answered != correlation:
            self._drop(broker_id)
            raise ConnectionError(f"broker {broker_id} answered correlation id {answered}, not {correlation}")
        return response

    async def _connect(self, broker_id: int) -> _Connection:
        connection = self._connections.get(broker_id)
        if connection is not None and not connection.writer.is_closing():
            return connection
        node = next((b for b in self.leadership.brokers(self.listener) if b.broker_id == broker_id), None)
        if node is None:
            raise PeerUnavailable(f"broker {broker_id} is not live (no {self.listener} endpoint registered)")
        reader, writer = await asyncio.open_connection(node.host, node.port, limit=1 << 20)
        connection = self._connections[broker_id] = _Connection(reader, writer)
        return connection

    def _drop(self, broker_id: int) -> None:
        connection = self._connections.pop(broker_id, None)
        if connection is not None:
            connection.close()

    def close(self) -> None:
        for broker_id in list(self._connections):
            self._drop(broker_id)
