"""`[registry]` of conf/topiclake.toml: where the schema registry's REST API listens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from topiclake.segments.errors import InvalidConfigError
from topiclake.segments.settings import section, section_dataclass

SCHEMAS_TOPIC = "_schemas"  # Confluent's default kafkastore.topic


@dataclass(frozen=True, slots=True)
class RegistryConfig:
    listen: str | None = None  # "host:port" ("127.0.0.1:8081"); None: the broker serves no registry
    topic: str = SCHEMAS_TOPIC
    # For the lake jobs (typed tables): an external registry to ask instead of replaying `topic`
    # from the storage root, and RecordNameStrategy subjects per topic ({"orders": ["com.acme.Order"]}).
    url: str | None = None
    record_subjects: dict | None = None

    def __post_init__(self) -> None:
        if self.listen is not None:
            parse_listen(self.listen)

    @property
    def address(self) -> tuple[str, int] | None:
        return None if self.listen is None else parse_listen(self.listen)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], **overrides: Any) -> "RegistryConfig":
        values = section(settings, "registry")
        values.update({k: v for k, v in overrides.items() if v is not None})
        return section_dataclass(cls, "registry", values)


def parse_listen(listen: str, section: str = "registry") -> tuple[str, int]:
    """"host:port" (IPv6 as "[::1]:8081") -> (host, port); `section` names the setting in errors."""
    host, sep, port = str(listen).rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidConfigError(f"[{section}] listen must be host:port, not {listen!r}")
    return host.strip("[]") or "127.0.0.1", int(port)
