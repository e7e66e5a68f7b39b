"""One blocking connection to one broker over kio, one request at a time: the bottom layer of
the client (conn -> client -> admin, as aiokafka layers it).

`security` (a client-properties file or `[client]`, security.client_config) adds TLS and a SASL
login (PLAIN, SCRAM-SHA-256/512) before the first request. The cluster client (client.py) keeps
one per broker; tests use one directly when they need exact control over what goes on the wire
and which broker answers.
"""

from __future__ import annotations

import socket
from typing import Any

from topiclake.security import scram
from topiclake.security.client_config import PLAINTEXT, ClientSecurity

from topiclake.protocol import codec


class AuthenticationError(Exception):
    """The broker refused the login (wrong password, mechanism not enabled, not a SASL listener)."""


class BrokerConnection:
    def __init__(self, address: str, *, timeout: float = 30.0, client_id: str = "topiclake-cli",
                 security: ClientSecurity = PLAINTEXT, connect_timeout: float | None = None):
        host, _, port = address.rpartition(":")
        self.address = (host.strip("[]") or "127.0.0.1", int(port))
        self.client_id = client_id
        self.sock = socket.create_connection(self.address, timeout=connect_timeout or timeout)
        self.sock.settimeout(timeout)
        self._correlation = 0
        try:
            if security.uses_tls:
                self.sock = security.ssl_context().wrap_socket(self.sock, server_hostname=self.address[0])
            if security.uses_sasl:
                self._login(security)
        except BaseException:
            self.sock.close()
            raise

    def _login(self, security: ClientSecurity) -> None:
        from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
        from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

        mechanism = security.sasl_mechanism
        handshake = self.request(SaslHandshakeRequest(mechanism=mechanism))
        if handshake.error_code.value != 0:
            raise AuthenticationError(f"{mechanism} refused ({handshake.error_code.name.upper()}); the broker "
                                      f"enables {', '.join(handshake.mechanisms) or 'no SASL on this listener'}")

        def step(token: bytes) -> bytes:
            answer = self.request(SaslAuthenticateRequest(auth_bytes=token))
            if answer.error_code.value != 0:
                raise AuthenticationError(answer.error_message or answer.error_code.name.upper())
            return answer.auth_bytes

        if mechanism == "PLAIN":
            step(f"\0{security.sasl_username}\0{security.sasl_password}".encode())
            return
        exchange = scram.ScramClient(scram.MECHANISMS[mechanism], security.sasl_username, security.sasl_password)
        try:
            exchange.verify(step(exchange.final(step(exchange.first()))))
        except scram.ScramError as exc:
            raise AuthenticationError(str(exc)) from None

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "BrokerConnection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        (size,) = codec.SIZE.unpack(self._read_exactly(4))
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
        self.send_raw(codec.encode_request(self._correlation, body, self.client_id))
        if not expect_response:
            return None
        correlation_id, response = codec.decode_response(self.read_frame(), body)
        if correlation_id != self._correlation:
            raise ConnectionError(f"response for correlation id {correlation_id}, expected {self._correlation}")
        return response
