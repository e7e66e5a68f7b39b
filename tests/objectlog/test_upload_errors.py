"""A segment upload that the server answers before reading its body: the store's own error reaches
the caller (a create refused is ObjectExists, so a sealer falls back to its own keys), not a
BufferError from the HTTP client still holding the memory-mapped file."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from topiclake.objectlog.seal import _mapped
from topiclake.store.errors import ObjectExists
from topiclake.store.objects import CREATE, ObjectStore
from topiclake.store.root import parse_root


class _AnswersEarly:
    """An HTTP server answering every request 412 as soon as its headers arrive, never reading a
    body, and keeping the connection open (as a busy S3 server may)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections.append(conn)
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = conn.recv(65536)
            if not chunk:
                return
            received += chunk
        conn.sendall(b"HTTP/1.1 412 Precondition Failed\r\nContent-Length: 0\r\n\r\n")

    def close(self) -> None:
        self.listener.close()
        for conn in self.connections:
            conn.close()


@pytest.fixture
def early_server():
    server = _AnswersEarly()
    yield server
    server.close()


def test_a_refused_upload_of_a_mapped_segment_raises_the_stores_error(early_server, tmp_path: Path):
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{early_server.port}", "AWS_ACCESS_KEY_ID": "k",
           "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
    store = ObjectStore(parse_root("s3://early/p", env=env), request_timeout_s=5, max_retries=0)
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(b"\x01" * (8 << 20))  # far more than the socket buffers take unread
    with pytest.raises(ObjectExists):
        with _mapped(segment) as data:
            store.put("log/t-0/00000000000000000000.log", data, mode=CREATE)
