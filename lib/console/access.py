"""Who the console talks to the broker as.

Without SASL on the broker's listener the console has one identity (its own client settings).
With SASL, every browser session logs in with a broker user (PLAIN or SCRAM): the login is
checked by the broker itself (a SASL handshake with those credentials), and the console then
makes that session's describe calls as that user. Each identity has one cluster client
(topiclake.client), which keeps a connection to each broker it needs and outlives any one of
them: a broker that dies, the bootstrap one included, costs no page. Credentials live only in this process's
memory, for as long as the session (idle sessions expire); the browser holds a random token in
an HttpOnly cookie.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from topiclake.client import AuthenticationError, ClusterClient
from topiclake.security.client_config import SASL_MECHANISMS, ClientSecurity

SESSION_IDLE_S = 8 * 3600
REQUEST_TIMEOUT_S = 15.0
RETRY_S = 10.0  # a page waits this long for a partition's or a group's new broker after a failover
CLIENT_ID = "topiclake-console"


class LoginRefused(Exception):
    """The broker refused the user's credentials (or is not reachable to check them)."""


@dataclass
class Identity:
    """One broker user (or the console's own settings when the broker has no SASL), with one
    cluster client used by its requests one at a time."""

    name: str
    security: ClientSecurity
    bootstrap: str
    _client: ClusterClient | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @contextmanager
    def client(self) -> Iterator[ClusterClient]:
        """The identity's cluster client for a few requests (it learns the cluster's brokers on
        first use, and drops and reopens broken connections itself)."""
        with self._lock:
            if self._client is None:
                self._client = cluster_client(self.bootstrap, self.security)
            yield self._client

    def _drop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def close(self) -> None:
        with self._lock:
            self._drop()


def cluster_client(bootstrap: str, security: ClientSecurity) -> ClusterClient:
    return ClusterClient(bootstrap, security=security, client_id=CLIENT_ID, timeout_s=REQUEST_TIMEOUT_S,
                         retry_s=RETRY_S)


class Access:
    """The console's identities: one fixed one, or one per logged-in session."""

    def __init__(self, bootstrap: str, security: ClientSecurity):
        self.bootstrap = bootstrap
        self.base = security
        self.login_required = security.uses_sasl
        self._sessions: dict[str, tuple[Identity, float]] = {}
        self._lock = threading.Lock()
        self.anonymous = None if self.login_required else Identity("", security, bootstrap)

    def login(self, username: str, password: str, mechanism: str) -> tuple[str, Identity]:
        """(session token, identity) once the broker accepted the credentials."""
        if mechanism not in SASL_MECHANISMS:
            raise LoginRefused(f"unknown mechanism {mechanism!r}")
        if not username:
            raise LoginRefused("a user name is needed")
        security = dataclasses.replace(self.base, sasl_mechanism=mechanism, sasl_username=username,
                                       sasl_password=password)
        identity = Identity(username, security, self.bootstrap)
        client = cluster_client(self.bootstrap, security)
        try:
            identity._client = client.connect()
        except AuthenticationError:
            client.close()
            raise LoginRefused("the broker refused this user name and password") from None
        except OSError as exc:
            client.close()
            raise LoginRefused(f"cannot reach the broker at {self.bootstrap}: {exc}") from None
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._expire()
            self._sessions[token] = (identity, time.monotonic())
        return token, identity

    def identity(self, token: str | None) -> Identity | None:
        """The identity of a request: the fixed one, or its session's (None: log in first)."""
        if not self.login_required:
            return self.anonymous
        with self._lock:
            found = self._sessions.get(token or "")
            if found is None or time.monotonic() - found[1] > SESSION_IDLE_S:
                return None
            self._sessions[token] = (found[0], time.monotonic())
            return found[0]

    def logout(self, token: str | None) -> Identity | None:
        with self._lock:
            found = self._sessions.pop(token or "", None)
        if found is None:
            return None
        found[0].close()
        return found[0]

    def identities(self) -> list[Identity]:
        """Everyone the console currently acts for (the sampler samples as each)."""
        if not self.login_required:
            return [self.anonymous]
        with self._lock:
            self._expire()
            unique = {identity.name: identity for identity, _ in self._sessions.values()}
        return list(unique.values())

    def _expire(self) -> None:
        now = time.monotonic()
        for token in [t for t, (_, seen) in self._sessions.items() if now - seen > SESSION_IDLE_S]:
            self._sessions.pop(token)[0].close()

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        for identity, _ in sessions:
            identity.close()
        if self.anonymous is not None:
            self.anonymous.close()
