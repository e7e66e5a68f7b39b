"""`[security]` of the settings file and Kafka's listener format.

Listeners are Kafka's `listeners` / `advertised.listeners`: comma-separated `NAME://host:port`,
where the name is the security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), each at
most once; an empty host binds every interface, `[::1]` is an IPv6 address.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields
from typing import Any, Mapping

from topiclake.security.acls import WILDCARD_PRINCIPAL
from topiclake.segments.errors import InvalidConfigError
from topiclake.segments.settings import check_types

PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL = "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"
PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
CLIENT_AUTH = ("none", "requested", "required")
AUTHORIZERS = ("", "acl")
_LISTENER = re.compile(r"^([A-Za-z_]+)://(\[[^\]]*\]|[^:/\[\]]*):(\d+)$")


@dataclass(frozen=True, slots=True)
class Listener:
    name: str  # the security protocol
    host: str  # "" binds every interface
    port: int

    @property
    def tls(self) -> bool:
        return self.name in (SSL, SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self.name in (SASL_PLAINTEXT, SASL_SSL)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_listeners(text: str, setting: str = "listeners") -> tuple[Listener, ...]:
    out: list[Listener] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        match = _LISTENER.match(item)
        if match is None:
            raise InvalidConfigError(f"{setting}: {item!r} is not NAME://host:port (e.g. SASL_SSL://0.0.0.0:9094)")
        name, host, port = match.group(1).upper(), match.group(2).strip("[]"), int(match.group(3))
        if name not in PROTOCOLS:
            raise InvalidConfigError(f"{setting}: listener name {name} is not a security protocol "
                                     f"({', '.join(PROTOCOLS)})")
        if not 0 <= port <= 65535:
            raise InvalidConfigError(f"{setting}: port {port} of {name} is out of range (0-65535)")
        if any(listener.name == name for listener in out):
            raise InvalidConfigError(f"{setting}: {name} appears twice (one listener per security protocol)")
        out.append(Listener(name, host, port))
    if not out:
        raise InvalidConfigError(f"{setting} is empty")
    return tuple(out)


def format_listeners(listeners) -> str:
    return ",".join(str(listener) for listener in listeners)


@dataclass(frozen=True, slots=True)
class SecurityConfig:
    # TLS (SSL and SASL_SSL listeners): PEM files.
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_key_password: str | None = None
    ssl_cafile: str | None = None  # the CA that signs client certificates (ssl.truststore)
    ssl_client_auth: str = "none"  # Kafka's ssl.client.auth
    # SASL (SASL_PLAINTEXT and SASL_SSL listeners).
    sasl_enabled_mechanisms: tuple[str, ...] = ("SCRAM-SHA-256", "SCRAM-SHA-512")
    failed_authentication_delay_ms: int = 100  # Kafka's connection.failed.authentication.delay.ms
    # Authorization: "" (none: every principal may do everything) or "acl" (StandardAuthorizer).
    authorizer: str = ""
    super_users: tuple[str, ...] = ()
    allow_everyone_if_no_acl_found: bool = False

    def check(self, listeners: tuple[Listener, ...]) -> None:
        """What the listeners need is configured, and every file can be read."""
        if self.ssl_client_auth not in CLIENT_AUTH:
            raise InvalidConfigError(f"[security] ssl_client_auth must be one of {', '.join(CLIENT_AUTH)}, "
                                     f"not {self.ssl_client_auth!r}")
        unknown = [m for m in self.sasl_enabled_mechanisms if m not in SASL_MECHANISMS]
        if unknown or not self.sasl_enabled_mechanisms:
            raise InvalidConfigError(f"[security] sasl_enabled_mechanisms: {', '.join(unknown) or 'empty'}; "
                                     f"supported: {', '.join(SASL_MECHANISMS)}")
        if self.authorizer not in AUTHORIZERS:
            raise InvalidConfigError(f"[security] authorizer must be \"acl\" or unset, not {self.authorizer!r}")
        for principal in self.super_users:
            if ":" not in principal:
                raise InvalidConfigError(f"[security] super_users: {principal!r} is not a principal like User:admin")
        if self.failed_authentication_delay_ms < 0:
            raise InvalidConfigError("[security] failed_authentication_delay_ms must not be negative")
        if any(listener.tls for listener in listeners):
            if not self.ssl_certfile:
                raise InvalidConfigError("an SSL or SASL_SSL listener needs [security] ssl_certfile "
                                         "(and ssl_keyfile unless the key is in the same PEM file)")
            if self.ssl_client_auth != "none" and not self.ssl_cafile:
                raise InvalidConfigError(f"[security] ssl_client_auth = {self.ssl_client_auth!r} needs ssl_cafile "
                                         "(the CA that signs client certificates)")
            for name in ("ssl_certfile", "ssl_keyfile", "ssl_cafile"):
                path = getattr(self, name)
                if path and not os.access(path, os.R_OK):
                    raise InvalidConfigError(f"[security] {name} {path} cannot be read")

    def is_super_user(self, principal: str) -> bool:
        return principal in self.super_users or WILDCARD_PRINCIPAL in self.super_users

    @classmethod
    def from_section(cls, values: Mapping[str, Any]) -> "SecurityConfig":
        values = dict(values)
        names = {f.name for f in fields(cls)}
        unknown = set(values) - names
        if unknown:
            raise InvalidConfigError(f"unknown [security] settings: {', '.join(sorted(unknown))}")
        for name in ("sasl_enabled_mechanisms", "super_users"):
            if name in values:
                value = values[name]
                if isinstance(value, str):  # Kafka's comma-separated form
                    value = [v for v in (p.strip() for p in value.split(",")) if v]
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise InvalidConfigError(f"[security] {name} must be a list of strings")
                values[name] = tuple(v.upper() if name == "sasl_enabled_mechanisms" else v for v in value)
        check_types(cls, "security", values)
        return cls(**values)
