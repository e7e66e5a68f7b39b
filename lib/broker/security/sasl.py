"""SASL on SASL_PLAINTEXT and SASL_SSL listeners: SaslHandshake (17) and SaslAuthenticate (36),
as Kafka's SaslServerAuthenticator runs them.

Before authentication a SASL connection may send only ApiVersions, SaslHandshake and
SaslAuthenticate; anything else closes it (Kafka: IllegalSaslStateException). SaslHandshake
picks a mechanism among `[security] sasl_enabled_mechanisms` (UNSUPPORTED_SASL_MECHANISM lists
them); with handshake v1 the tokens travel in SaslAuthenticate requests, with v0 as bare
size-prefixed frames (Kafka 0.10's form, still accepted by Kafka).

PLAIN checks the password against the credential store; SCRAM-SHA-256/512 run RFC 5802 against
the stored SCRAM credential. A failure is logged with the peer address, answered
SASL_AUTHENTICATION_FAILED after `failed_authentication_delay_ms` (Kafka's
connection.failed.authentication.delay.ms, which slows password guessing) and the connection is
closed; the broker's other connections are not affected (the password hash runs off the loop).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

from kio.schema.errors import ErrorCode

from topiclake.security import scram
from topiclake.security.credentials import CredentialStore

from ..api_keys import ApiKey
from ..session import Session

log = logging.getLogger(__name__)

PRE_AUTH_KEYS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.API_VERSIONS})
PLAIN = "PLAIN"


class AuthenticationFailed(Exception):
    """The credentials were wrong (or the exchange broke the mechanism's rules)."""


class SaslExchange:
    """One connection's SASL state after SaslHandshake chose `mechanism`."""

    def __init__(self, mechanism: str, credentials: CredentialStore, raw_tokens: bool):
        self.mechanism = mechanism
        self.raw_tokens = raw_tokens  # handshake v0: tokens are bare frames
        self.user: str | None = None
        self._credentials = credentials
        self._scram: scram.ScramServer | None = None
        if mechanism != PLAIN:
            mech = scram.MECHANISMS[mechanism]
            self._scram = scram.ScramServer(mech, lambda user: credentials.get(user, mechanism))

    async def step(self, token: bytes) -> tuple[bytes, bool]:
        """(the server's answer, whether authentication is complete); AuthenticationFailed."""
        if self._scram is None:
            return await self._plain(token), True
        try:
            if self._scram.user is None:
                return self._scram.client_first(token), False
            self.user = self._scram.user
            return self._scram.client_final(token), True
        except scram.ScramError as exc:
            self.user = self.user or self._scram.user
            raise AuthenticationFailed(str(exc)) from None

    async def _plain(self, token: bytes) -> bytes:
        parts = bytes(token).split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("invalid PLAIN message: expected authzid NUL user NUL password")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("PLAIN message is not UTF-8") from None
        self.user = user
        if not user or not password:
            raise AuthenticationFailed("PLAIN needs a user name and a password")
        if authzid and authzid != user:
            raise AuthenticationFailed("an authorization id different from the user name is not supported")
        if not await asyncio.to_thread(self._credentials.verify_password, user, password):
            raise AuthenticationFailed("invalid credentials")
        return b""


class SaslService:
    """The broker's SASL side: which mechanisms, where credentials live, the failure delay."""

    def __init__(self, mechanisms: tuple[str, ...], credentials: CredentialStore, failure_delay_ms: int):
        self.mechanisms = mechanisms
        self.credentials = credentials
        self.failure_delay_s = failure_delay_ms / 1000
        # Per listener name (Kafka's failed-/successful-authentication-total; read by metrics.py).
        self.failures: Counter[str] = Counter()
        self.successes: Counter[str] = Counter()

    def handshake(self, session: Session, mechanism: str, version: int) -> tuple[ErrorCode, str | None]:
        if session.authenticated or session.sasl is not None:
            return (ErrorCode.illegal_sasl_state,
                    "SaslHandshake is not expected now (re-authentication is not supported)")
        if mechanism not in self.mechanisms:
            log.warning("failed authentication with %s: unsupported SASL mechanism %r (enabled: %s)",
                        session.peer, mechanism, ", ".join(self.mechanisms))
            session.close_after_response = True
            self.failures[session.listener] += 1
            return ErrorCode.unsupported_sasl_mechanism, f"Unsupported SASL mechanism {mechanism}"
        session.sasl = SaslExchange(mechanism, self.credentials, raw_tokens=version == 0)
        return ErrorCode.none, None

    async def authenticate(self, session: Session, token: bytes) -> tuple[ErrorCode, str | None, bytes]:
        """(error, message, the server's token). On success the session takes the SASL user."""
        exchange = session.sasl
        if exchange is None or session.authenticated:
            session.close_after_response = True
            return ErrorCode.illegal_sasl_state, "SaslAuthenticate before SaslHandshake or after authentication", b""
        try:
            answer, done = await exchange.step(token)
        except AuthenticationFailed as exc:
            await self.failed(session, str(exc))
            return (ErrorCode.sasl_authentication_failed,
                    f"Authentication failed during authentication due to invalid credentials with SASL mechanism "
                    f"{exchange.mechanism}", b"")
        if done:
            session.principal = f"User:{exchange.user}"
            session.authenticated = True
            session.sasl = None
            self.successes[session.listener] += 1
            log.debug("%s authenticated as %s (%s)", session.peer, session.principal, exchange.mechanism)
        return ErrorCode.none, None, answer

    async def raw_token(self, session: Session, frame: bytes) -> bytes | None:
        """After SaslHandshake v0 a token is a bare frame, and so is the answer; None closes the
        connection (v0 has no way to carry an error)."""
        error, _message, answer = await self.authenticate(session, bytes(frame))
        return answer if error == ErrorCode.none else None

    async def failed(self, session: Session, reason: str) -> None:
        """Log the failure with the peer, wait as Kafka does, and have the connection closed."""
        exchange = session.sasl
        who = f"user {exchange.user!r}" if exchange is not None and exchange.user else "unknown user"
        mechanism = exchange.mechanism if exchange is not None else "SASL"
        log.warning("failed authentication with %s (%s, %s): %s", session.peer, mechanism, who, reason)
        self.failures[session.listener] += 1
        session.close_after_response = True
        await asyncio.sleep(self.failure_delay_s)
