"""Who is on the other end of one connection: the listener it came in on, its address and, once
known, its principal (Kafka's KafkaPrincipal as "Type:name").

A PLAINTEXT connection is User:ANONYMOUS from the start; an SSL one is its client certificate's
subject (or ANONYMOUS without one); a SASL one is unauthenticated until SaslAuthenticate succeeds,
and then the SASL user.

It sits below the codec and the services (Kafka's RequestContext): `wire.Request` carries it to
the handlers, and security (TLS, SASL, the authorizer) fills it in and reads it, so the codec never
depends on security.
"""

from __future__ import annotations

import logging

ANONYMOUS = "User:ANONYMOUS"


class Session:
    __slots__ = ("listener", "peer", "host", "principal", "authenticated", "sasl", "close_after_response",
                 "_close_hooks")

    def __init__(self, listener: str = "PLAINTEXT", peer: str = "", host: str = "", principal: str = ANONYMOUS,
                 authenticated: bool = True):
        self.listener = listener  # the security protocol of the listener (Metadata answers its endpoints)
        self.peer = peer  # "ip:port", for logs
        self.host = host  # the client's IP address, as ACL hosts name it
        self.principal = principal
        self.authenticated = authenticated
        self.sasl = None  # the SASL exchange in progress (security.sasl.SaslExchange)
        self.close_after_response = False  # a failed authentication: answer, then close
        self._close_hooks: dict | None = None  # key -> what to do when the connection closes

    def on_close(self, key, hook) -> None:
        """Call `hook()` once when this connection closes (once per key: a share session's
        records, released at the disconnect as Kafka's broker does)."""
        if self._close_hooks is None:
            self._close_hooks = {}
        self._close_hooks.setdefault(key, hook)

    def closed(self) -> None:
        hooks, self._close_hooks = self._close_hooks or {}, None
        for hook in hooks.values():
            try:
                hook()
            except Exception:  # one failing hook must not keep the others from running
                logging.getLogger(__name__).exception("a connection close hook of %s failed", self.peer)

    @property
    def user(self) -> str:
        """The principal's name: the user entity of client quotas (Kafka's sanitized user)."""
        return self.principal.partition(":")[2]


DEFAULT_SESSION = Session()  # handlers called without a connection (tests)
