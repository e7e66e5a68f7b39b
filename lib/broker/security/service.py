"""The broker's security, one object on BrokerContext.security: the stores in shared storage,
the TLS context, SASL, and the authorizer (None unless `[security] authorizer = "acl"`)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

from topiclake.security.acls import AclStore
from topiclake.security.credentials import CredentialStore

from ..session import ANONYMOUS, Session
from . import tls
from .authorizer import AclAuthorizer
from .config import Listener, SecurityConfig
from .sasl import SaslService

log = logging.getLogger(__name__)


class SecurityService:
    def __init__(self, config: SecurityConfig, root, listeners: tuple[Listener, ...]):
        self.config = config
        self.credentials = CredentialStore(root)
        self.acls = AclStore(root)
        self.sasl = SaslService(config.sasl_enabled_mechanisms, self.credentials,
                                config.failed_authentication_delay_ms)
        self.authorizer = AclAuthorizer(config, self.acls) if config.authorizer == "acl" else None
        self.tls_context = tls.server_context(config) if any(listener.tls for listener in listeners) else None
        self.tls_failures: Counter[str] = Counter()  # failed TLS handshakes per listener name

    def failed_authentications(self) -> Counter[str]:
        """Per listener name: failed TLS handshakes and SASL logins (Kafka counts both as
        failed-authentication-total)."""
        return self.tls_failures + self.sasl.failures

    async def open_session(self, listener: Listener, writer: asyncio.StreamWriter) -> Session | None:
        """The session of a new connection on `listener` (TLS handshake done); None if the
        handshake failed (logged, connection closed)."""
        peer = writer.get_extra_info("peername")
        address, host = (f"{peer[0]}:{peer[1]}", peer[0]) if isinstance(peer, tuple) else (str(peer), "")
        principal = ANONYMOUS
        if listener.tls:
            if not await tls.handshake(writer, self.tls_context, address):
                self.tls_failures[listener.name] += 1
                return None
            principal = tls.principal_of(writer.get_extra_info("ssl_object")) or ANONYMOUS
        return Session(listener.name, address, host, principal, authenticated=not listener.sasl)
