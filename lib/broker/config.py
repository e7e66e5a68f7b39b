"""The broker's own settings: `[broker]` of conf/topiclake.toml, overridden by command-line flags."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from topiclake.registry.config import RegistryConfig
from topiclake.segments.errors import InvalidConfigError
from topiclake.segments.settings import check_types, section, storage_root

from . import producer_state
from .group.config import GroupsConfig
from .share.config import ShareConfig
from .txn.config import TransactionsConfig


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    root: Path = Path("./data")
    host: str = "127.0.0.1"
    port: int = 9092
    broker_id: int = 0
    advertised_host: str | None = None
    advertised_port: int | None = None
    auto_create_topics: bool = True
    num_partitions: int = 1
    max_request_bytes: int = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
    lease_interval_s: float = 10.0
    # Idle idempotent/transactional producers' state is dropped from each partition after this
    # long (Kafka's producer.id.expiration.ms; never while a transaction of theirs is open),
    # checked this often (producer.id.expiration.check.interval.ms).
    producer_id_expiration_ms: int = producer_state.EXPIRATION_MS
    producer_id_expiration_check_interval_ms: int = producer_state.EXPIRATION_CHECK_INTERVAL_MS
    groups: GroupsConfig = GroupsConfig()  # [groups] of the settings file
    transactions: TransactionsConfig = TransactionsConfig()  # [transactions] of the settings file
    share: ShareConfig = ShareConfig()  # [share]: share groups (KIP-932)
    registry: RegistryConfig = RegistryConfig()  # [registry]: the schema registry this process serves

    def __post_init__(self) -> None:
        for name in ("producer_id_expiration_ms", "producer_id_expiration_check_interval_ms", "num_partitions",
                     "max_request_bytes"):
            if getattr(self, name) < 1:
                raise InvalidConfigError(f"[broker] {name} must be at least 1")
        if not 0 <= self.port <= 65535:  # 0: a free port picked by the OS
            raise InvalidConfigError(f"port {self.port} is out of range (0-65535)")
        if self.advertised_port is not None and not 1 <= self.advertised_port <= 65535:
            raise InvalidConfigError(f"advertised port {self.advertised_port} is out of range (1-65535)")
        if self.broker_id < 0:
            raise InvalidConfigError(f"broker id {self.broker_id} must not be negative")

    @property
    def public_host(self) -> str:
        if self.advertised_host:
            return self.advertised_host
        # A wildcard bind is not an address a client can dial.
        return "127.0.0.1" if self.host in ("", "0.0.0.0", "::") else self.host

    @property
    def public_port(self) -> int:
        return self.advertised_port or self.port

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], *, root: str | Path | None = None,
                      registry_listen: str | None = None, **overrides: Any) -> "BrokerConfig":
        """`[broker]` values, then non-None overrides (command-line flags) on top."""
        values = section(settings, "broker")
        names = {f.name for f in dataclasses.fields(cls)} - {"root", "groups", "transactions", "registry", "share"}
        unknown = set(values) - names
        if unknown:
            raise InvalidConfigError(f"unknown [broker] settings: {', '.join(sorted(unknown))}")
        check_types(cls, "broker", values)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(root=storage_root(settings, root), groups=GroupsConfig.from_section(section(settings, "groups")),
                   transactions=TransactionsConfig.from_section(section(settings, "transactions")),
                   share=ShareConfig.from_section(section(settings, "share")),
                   registry=RegistryConfig.from_settings(settings, listen=registry_listen), **values)
