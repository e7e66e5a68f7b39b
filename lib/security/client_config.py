"""How a client of ours (the CLI's protocol client, the offsets mirror) reaches a secured broker.

Two sources, as Kafka's tools take them:
- a client-properties file (`--command-config FILE`, as kafka-topics/kafka-acls/kafka-configs):
  `security.protocol`, `sasl.mechanism` (or librdkafka's `sasl.mechanisms`), the user in
  `sasl.jaas.config` (PlainLoginModule/ScramLoginModule `username="..." password="..."`) or
  `sasl.username`/`sasl.password`, and PEM files: `ssl.truststore.location` (with
  `ssl.truststore.type=PEM`) or `ssl.ca.location`, `ssl.keystore.location` (PEM, key and
  certificate) or `ssl.certificate.location` + `ssl.key.location`, `ssl.key.password`,
  `ssl.endpoint.identification.algorithm` (empty: no host name check). JKS/PKCS12 stores cannot
  be read here: the error says so.
- `[client]` of the settings file: `security_protocol`, `sasl_mechanism`, `sasl_username`,
  `sasl_password`, `ssl_cafile`, `ssl_certfile`, `ssl_keyfile`, `ssl_key_password`,
  `ssl_check_hostname`.
A properties file wins over `[client]`; with neither, PLAINTEXT.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping

from topiclake.segments.errors import InvalidConfigError
from topiclake.segments.settings import section

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_key_password: str | None = None
    ssl_check_hostname: bool = True

    def __post_init__(self) -> None:
        if self.security_protocol not in PROTOCOLS:
            raise InvalidConfigError(f"security.protocol {self.security_protocol!r} is not one of "
                                     f"{', '.join(PROTOCOLS)}")
        if self.uses_sasl:
            if self.sasl_mechanism not in SASL_MECHANISMS:
                raise InvalidConfigError(f"sasl.mechanism {self.sasl_mechanism!r} is not one of "
                                         f"{', '.join(SASL_MECHANISMS)}")
            if not self.sasl_username or self.sasl_password is None:
                raise InvalidConfigError(f"{self.security_protocol} needs a user name and password "
                                         "(sasl.jaas.config, or sasl.username and sasl.password)")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ssl_cafile)
        context.check_hostname = self.ssl_check_hostname
        if self.ssl_certfile:
            context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile, password=self.ssl_key_password)
        return context

    def librdkafka(self) -> dict[str, Any]:
        """The same settings as confluent-kafka (librdkafka) configuration."""
        out: dict[str, Any] = {"security.protocol": self.security_protocol}
        if self.uses_sasl:
            out.update({"sasl.mechanism": self.sasl_mechanism, "sasl.username": self.sasl_username,
                        "sasl.password": self.sasl_password})
        if self.uses_tls:
            optional = {"ssl.ca.location": self.ssl_cafile, "ssl.certificate.location": self.ssl_certfile,
                        "ssl.key.location": self.ssl_keyfile, "ssl.key.password": self.ssl_key_password}
            out.update({k: v for k, v in optional.items() if v})
            out["ssl.endpoint.identification.algorithm"] = "https" if self.ssl_check_hostname else "none"
        return out


def read_properties(path: str | Path) -> dict[str, str]:
    """A Java properties file: `key=value` or `key: value` lines, `#`/`!` comments, `\\` continuations."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InvalidConfigError(f"cannot read client properties {path}: {exc.strerror or exc}") from None
    out: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\"):
            logical += line[:-1]
            continue
        logical += line
        match = _PROPERTY.match(logical)
        out[match.group(1)] = match.group(2).strip()
        logical = ""
    return out


_PROPERTY = re.compile(r"([^=:\s]+)\s*[=:]?\s*(.*)")  # the key ends at the first '=', ':' or blank
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def from_properties(props: Mapping[str, str], source: str = "client properties") -> ClientSecurity:
    values: dict[str, Any] = {"security_protocol": props.get("security.protocol", "PLAINTEXT").upper()}
    mechanism = props.get("sasl.mechanism") or props.get("sasl.mechanisms")
    if mechanism:
        values["sasl_mechanism"] = mechanism.upper()
    jaas = dict(_JAAS_OPTION.findall(props.get("sasl.jaas.config", "")))
    values["sasl_username"] = props.get("sasl.username") or jaas.get("username")
    values["sasl_password"] = props.get("sasl.password") or jaas.get("password")
    for store in ("truststore", "keystore"):
        kind = props.get(f"ssl.{store}.type", "PEM" if f"ssl.{store}.location" not in props else "JKS").upper()
        if f"ssl.{store}.location" in props and kind != "PEM":
            raise InvalidConfigError(f"{source}: ssl.{store}.type {kind} cannot be read here; give a PEM file "
                                     f"(ssl.{store}.type=PEM) or ssl.ca.location / ssl.certificate.location")
    values["ssl_cafile"] = props.get("ssl.ca.location") or props.get("ssl.truststore.location")
    keystore = props.get("ssl.keystore.location")
    values["ssl_certfile"] = props.get("ssl.certificate.location") or keystore
    values["ssl_keyfile"] = props.get("ssl.key.location") or keystore
    values["ssl_key_password"] = props.get("ssl.key.password")
    identification = props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    values["ssl_check_hostname"] = identification not in ("", "none")
    try:
        return ClientSecurity(**values)
    except InvalidConfigError as exc:
        raise InvalidConfigError(f"{source}: {exc}") from None


def from_settings(settings: Mapping[str, Any]) -> ClientSecurity:
    values = section(settings, "client")
    unknown = set(values) - {f.name for f in fields(ClientSecurity)}
    if unknown:
        raise InvalidConfigError(f"unknown [client] settings: {', '.join(sorted(unknown))}")
    try:
        return ClientSecurity(**values)
    except (InvalidConfigError, TypeError) as exc:
        raise InvalidConfigError(f"[client]: {exc}") from None


def load(settings: Mapping[str, Any], command_config: str | Path | None = None) -> ClientSecurity:
    """`--command-config` if given, else `[client]` of the settings file, else PLAINTEXT."""
    if command_config is not None:
        return from_properties(read_properties(command_config), str(command_config))
    return from_settings(settings)


PLAINTEXT = ClientSecurity()
