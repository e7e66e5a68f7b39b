"""A minimal blocking Kafka protocol client over kio: one connection, one request at a time.

Used by the `topiclake topics` commands (they talk to a running broker like kafka-topics) and by
tests that need exact control over what goes on the wire.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from . import wire

_SIZE = struct.Struct(">i")


class ProtocolClient:
    def __init__(self, bootstrap: str, *, timeout: float = 30.0, client_id: str = "topiclake-cli"):
        host, _, port = bootstrap.rpartition(":")
        self.address = (host or "127.0.0.1", int(port))
        self.client_id = client_id
        self.sock = socket.create_connection(self.address, timeout=timeout)
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "ProtocolClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        (size,) = _SIZE.unpack(self._read_exactly(4))
        return self._read_exactly(size)

    def _read_exactly(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                raise ConnectionError(f"{self.address[0]}:{self.address[1]} closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def request(self, body: Any, *, expect_response: bool = True) -> Any:
        """Send a kio request dataclass; return the decoded response dataclass."""
        self._correlation += 1
        self.send_raw(wire.encode_request(self._correlation, body, self.client_id))
        if not expect_response:
            return None
        correlation_id, response = wire.decode_response(self.read_frame(), body)
        if correlation_id != self._correlation:
            raise ConnectionError(f"response for correlation id {correlation_id}, expected {self._correlation}")
        return response
