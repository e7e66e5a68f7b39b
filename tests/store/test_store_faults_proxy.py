"""The fault-injecting store proxy the bucket fault tests stand on (tests/support/store_faults.py)
forwards each request once: a store connection that goes without an answer is the client's to see
(as without the proxy), never a request the proxy sends again on its own. A second send would apply
a write twice, apply a "lost answer" rule's write again, or make a conditional PUT meet its own
first copy (412) as if another writer had won.

The upstream here is a plain TCP server standing in for a store that read the request (it may
have applied it) and closed the connection before answering: the one behaviour versitygw cannot
be made to show on cue."""

from __future__ import annotations

import http.client
import socket
import threading

import pytest

from tests.support.store_faults import StoreFaults
from tests.support.waits import wait_for


class _AnswerlessStore:
    """Reads each request on each connection (headers and Content-Length body), counts it, then
    closes the connection without a word."""

    def __init__(self):
        self.requests: list[bytes] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True, name="answerless-store").start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with conn, conn.makefile("rb") as reader:  # both: the file keeps the socket open
                head = b"".join(iter(lambda: reader.readline(), b"\r\n"))
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                reader.read(length)
                self.requests.append(head.split(b"\r\n", 1)[0])

    def close(self) -> None:
        self._server.close()


def test_a_request_whose_store_connection_closed_unanswered_is_forwarded_once():
    store = _AnswerlessStore()
    proxy = StoreFaults(store.port).start()
    try:
        client = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        client.request("PUT", "/bucket/data/topics/once.json", body=b"{}", headers={"If-None-Match": "*"})
        with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
            client.getresponse()  # the client sees the connection go, as it would without the proxy
        client.close()
        wait_for(lambda: store.requests, 5, 0.05, what="the request at the store")
        threading.Event().wait(0.5)  # time for a second send, if the proxy made one
        assert store.requests == [b"PUT /bucket/data/topics/once.json HTTP/1.1"], store.requests
        assert proxy.forwarded == 0
    finally:
        proxy.stop()
        store.close()
