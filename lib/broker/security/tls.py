"""TLS for SSL and SASL_SSL listeners: the server context from `[security]`, the handshake on an
accepted connection, and the principal of a client certificate.

The handshake is done per connection (not by asyncio's server) so that a failure is logged with
the peer's address and a reason a person can act on, e.g. a plaintext client on the TLS port.
"""

from __future__ import annotations

import asyncio
import logging
import ssl

from topiclake.segments.errors import InvalidConfigError

from .config import SecurityConfig

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 10.0
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
# RFC 4514 short names for the attributes Python reports by long name.
_SHORT = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
          "localityName": "L", "stateOrProvinceName": "ST", "streetAddress": "STREET", "domainComponent": "DC",
          "userId": "UID"}


def server_context(config: SecurityConfig) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(config.ssl_certfile, config.ssl_keyfile, password=config.ssl_key_password)
        if config.ssl_cafile:
            context.load_verify_locations(cafile=config.ssl_cafile)
    except (ssl.SSLError, OSError) as exc:
        raise InvalidConfigError(f"[security] cannot load the TLS certificate or key: {exc}") from None
    context.verify_mode = _CLIENT_AUTH[config.ssl_client_auth]
    return context


def principal_of(ssl_object) -> str | None:
    """User:<subject DN in RFC 2253 order> of a verified client certificate (Kafka's default
    principal builder: X500Principal.getName()), or None without one."""
    cert = ssl_object.getpeercert() if ssl_object is not None else None
    if not cert:
        return None
    rdns = []
    for rdn in reversed(cert.get("subject", ())):
        rdns.append("+".join(f"{_SHORT.get(k, k)}={_escape(v)}" for k, v in rdn))
    return "User:" + ",".join(rdns)


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


async def handshake(writer: asyncio.StreamWriter, context: ssl.SSLContext, peer: str) -> bool:
    """TLS on an accepted connection; False (logged, connection closed) if it fails."""
    try:
        await writer.start_tls(context, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)
        return True
    except (ssl.SSLError, ConnectionError, asyncio.TimeoutError, OSError) as exc:
        log.warning("closing %s: TLS handshake failed: %s", peer, _reason(exc))
        writer.transport.abort()
        return False


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, ssl.SSLError):
        if exc.reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNKNOWN_PROTOCOL", "RECORD_LAYER_FAILURE"):
            return f"the client does not speak TLS (a plaintext client on an SSL listener?) [{exc.reason}]"
        if exc.reason in ("PEER_DID_NOT_RETURN_A_CERTIFICATE", "CERTIFICATE_VERIFY_FAILED",
                          "TLSV13_ALERT_CERTIFICATE_REQUIRED"):
            return f"the client's certificate was missing or not signed by ssl_cafile [{exc.reason}]"
        if exc.reason:
            return f"{exc.reason} ({text})"
    if isinstance(exc, asyncio.TimeoutError):
        return f"no TLS handshake within {HANDSHAKE_TIMEOUT_S:.0f} s"
    return text
