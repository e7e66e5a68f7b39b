"""A fault-injecting HTTP proxy in front of the real versitygw: it forwards every request as it
came (the Host header too, so the client's SigV4 signature still holds) and fails the requests
matching a rule the test sets while it runs, so one chosen store request of a broker fails and
nothing else does (no mock of the store client: the broker's own obstore client talks to it).

    proxy = StoreFaults(server.port).start()          # point AWS_ENDPOINT_URL at proxy.endpoint
    rule = proxy.fail("PUT", r"/log/t-0/\\d+\\.e\\d+\\.log$", times=None)   # 503 until cleared
    ...; proxy.clear(rule); assert rule.hits > 0

Actions: an HTTP error with an S3 error document, the request not forwarded (503 SlowDown, 500
InternalError, 403 AccessDenied: obstore retries 5xx, never 4xx), DROP (the connection closed
before the request is forwarded: the store never saw it), LOSE_ANSWER (forwarded and applied, then the connection
closed before the answer: the client cannot know it landed), HOLD (kept until the rule is
cleared, then forwarded: a request in flight as long as the test wants); `applied=True` makes an HTTP error
come after the store applied the request (S3 documents that a 500 may have). Each request
reaches the store once, on a connection of its own (`_forward`): the proxy never sends one again.
"""

from __future__ import annotations

import http.client
import re
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

DROP = "drop"
LOSE_ANSWER = "lose-answer"
HOLD = "hold"
HELD_AT_MOST_S = 60.0  # a held request goes on by itself after this (a test that forgot to clear)
S3_ERRORS = {500: "InternalError", 503: "SlowDown", 403: "AccessDenied", 400: "InvalidRequest"}
# Hop-by-hop: the proxy sends each answer with its own Content-Length.
_NOT_FORWARDED = {"transfer-encoding", "connection", "keep-alive"}


@dataclass
class FaultRule:
    """Fail requests whose method is `method` and whose unquoted path (query included) matches
    `pattern`, `times` times (None: until cleared), with `action` (an HTTP status, DROP or
    LOSE_ANSWER). `hits`: the requests it failed; `seen`: their paths, for the test's messages."""

    method: str
    pattern: re.Pattern
    action: int | str
    times: int | None
    applied: bool = False  # an HTTP error sent after the store applied the request (S3 may do so)
    hits: int = 0
    seen: list[str] = field(default_factory=list)
    cleared: threading.Event = field(default_factory=threading.Event)  # HOLD's requests go on once set

    def takes(self, method: str, path: str) -> bool:
        """Whether this request is one to fail (and count it)."""
        if method != self.method or not self.pattern.search(path):
            return False
        if self.times is not None and self.hits >= self.times:
            return False
        self.hits += 1
        self.seen.append(path)
        return True


class StoreFaults:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1"):
        self.upstream = (upstream_host, upstream_port)
        self.rules: list[FaultRule] = []
        self.forwarded = 0  # requests passed to the store unharmed
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        self.port = self._server.server_address[1]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self, server_env: dict[str, str]) -> dict[str, str]:
        """The store's AWS variables with the endpoint replaced by this proxy's."""
        return {**server_env, "AWS_ENDPOINT_URL": self.endpoint}

    def start(self) -> "StoreFaults":
        threading.Thread(target=self._server.serve_forever, daemon=True, name="store-faults").start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def fail(self, method: str, pattern: str, *, action: int | str = 503, times: int | None = 1,
             applied: bool = False) -> FaultRule:
        """`applied`: an HTTP error `action` answered after forwarding the request (it took effect)."""
        rule = FaultRule(method.upper(), re.compile(pattern), action, times, applied)
        with self._lock:
            self.rules.append(rule)
        return rule

    def clear(self, rule: FaultRule | None = None) -> None:
        """Forward everything again (only `rule`'s requests, when given)."""
        with self._lock:
            for cleared in (self.rules if rule is None else [rule]):
                cleared.cleared.set()
            self.rules = [r for r in self.rules if rule is not None and r is not rule]

    def _fault_of(self, method: str, path: str) -> FaultRule | None:
        with self._lock:
            return next((rule for rule in self.rules if rule.takes(method, path)), None)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """A client closing its kept-alive connection mid-read is no error of the proxy's."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _handler_for(faults: StoreFaults) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive with the client, as it expects of S3

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
            pass  # the broker's log says what its requests met

        def _proxy(self) -> None:
            body = self._read_body()
            rule = faults._fault_of(self.command, unquote(self.path))
            if rule is not None and rule.action == HOLD:
                rule.cleared.wait(HELD_AT_MOST_S)
                rule = None  # then forwarded as it came
            if rule is not None and rule.action == DROP:
                self._drop()
                return
            if rule is not None and rule.action != LOSE_ANSWER and not rule.applied:
                self._error(int(rule.action))  # refused: the store never sees it
                return
            try:
                status, reason, headers, answer = self._forward(body)
            except OSError:
                self._drop()  # the store is down: the client sees the connection go, as without us
                return
            if rule is not None and rule.action == LOSE_ANSWER:  # applied, and the client never hears so
                self._drop()
                return
            if rule is not None:  # applied, and the client hears it failed
                self._error(int(rule.action))
                return
            with faults._lock:
                faults.forwarded += 1
            self.send_response_only(status, reason)
            for name, value in headers:
                if name.lower() not in _NOT_FORWARDED and name.lower() != "content-length":
                    self.send_header(name, value)
            if self.command != "HEAD" or not any(n.lower() == "content-length" for n, _ in headers):
                self.send_header("Content-Length", str(len(answer)))
            else:  # a HEAD's length is the object's, not of a body sent
                self.send_header("Content-Length", next(v for n, v in headers if n.lower() == "content-length"))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(answer)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _proxy

        def _read_body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
            """The request, as the client signed it, to the store, once, on a connection of its own;
            its answer. Never sent again: a store connection that closes unanswered may have applied
            it, and a second send would apply a write twice (a LOSE_ANSWER rule's too) or meet a
            conditional PUT's own first copy (412). The client sees that connection go and retries
            as it would without the proxy. (A kept-alive store connection would need exactly such a
            second send whenever the store had closed it while idle: so none is kept.)"""
            upstream = http.client.HTTPConnection(*faults.upstream, timeout=30)
            try:
                upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for name, value in self.headers.items():
                    if name.lower() not in _NOT_FORWARDED and name.lower() != "content-length":
                        upstream.putheader(name, value)
                upstream.putheader("Content-Length", str(len(body)))
                upstream.endheaders(body)
                response = upstream.getresponse()
                answer = response.read()
                return response.status, response.reason, response.getheaders(), answer
            finally:
                upstream.close()

        def _error(self, status: int) -> None:
            code = S3_ERRORS.get(status, "InternalError")
            document = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                        f"<Message>injected by the test's store proxy</Message>"
                        f"<Resource>{self.path}</Resource><RequestId>store-faults</RequestId></Error>").encode()
            self.send_response_only(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(document)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(document)

        def _drop(self) -> None:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    return Handler
