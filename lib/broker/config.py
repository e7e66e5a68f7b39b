"""The broker's own settings: `[broker]` of conf/topiclake.toml, overridden by command-line flags."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from topiclake.registry.config import RegistryConfig, parse_listen
from topiclake.segments.errors import InvalidConfigError
from topiclake.segments.settings import check_types, section, section_dataclass, storage_location, storage_root
from topiclake.store.root import S3Root

from . import fetch_sessions, producer_state
from .bucket.settings import BucketSettings
from .group.config import GroupsConfig
from .security.config import PLAINTEXT, Listener, SecurityConfig, parse_listeners
from .cluster.config import ClusterConfig
from .group.share_config import ShareConfig
from .txn.config import TransactionsConfig


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """`[metrics]`: where the broker serves Prometheus' /metrics (docs/METRICS.md)."""

    listen: str | None = None  # "host:port" ("127.0.0.1:9404"); None: no metrics endpoint

    def __post_init__(self) -> None:
        if self.listen is not None:
            parse_listen(self.listen, "metrics")

    @property
    def address(self) -> tuple[str, int] | None:
        return None if self.listen is None else parse_listen(self.listen, "metrics")


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
    # KIP-227 fetch sessions: how many the broker keeps (0: none, every fetch is full) and how long
    # one stays safe from eviction (Kafka's max.incremental.fetch.session.cache.slots and
    # min.incremental.fetch.session.eviction.ms).
    max_incremental_fetch_session_cache_slots: int = fetch_sessions.DEFAULT_SLOTS
    min_incremental_fetch_session_eviction_ms: int = fetch_sessions.DEFAULT_EVICTION_MS
    groups: GroupsConfig = GroupsConfig()  # [groups] of the settings file
    transactions: TransactionsConfig = TransactionsConfig()  # [transactions] of the settings file
    share: ShareConfig = ShareConfig()  # [share]: share groups (KIP-932)
    cluster: ClusterConfig = ClusterConfig()  # [cluster]: many brokers on one root (ZooKeeper); unset: one broker
    registry: RegistryConfig = RegistryConfig()  # [registry]: the schema registry this process serves
    # Kafka's listeners / advertised.listeners ("SASL_SSL://0.0.0.0:9094,..."); unset: one PLAINTEXT
    # listener on host:port, advertised as advertised_host:advertised_port.
    listeners: str | None = None
    advertised_listeners: str | None = None
    security: SecurityConfig = SecurityConfig()  # [security]: TLS, SASL, the authorizer
    metrics: MetricsConfig = MetricsConfig()  # [metrics]: the Prometheus endpoint; unset: off
    # A bucket root (s3://...): the bucket and the [storage] flush settings; `root` is then the
    # local cache directory (docs/OBJECT-STORAGE.md). None: a file root.
    bucket: BucketSettings | None = None

    def __post_init__(self) -> None:
        for name in ("producer_id_expiration_ms", "producer_id_expiration_check_interval_ms", "num_partitions",
                     "max_request_bytes"):
            if getattr(self, name) < 1:
                raise InvalidConfigError(f"[broker] {name} must be at least 1")
        for name in ("max_incremental_fetch_session_cache_slots", "min_incremental_fetch_session_eviction_ms"):
            if getattr(self, name) < 0:
                raise InvalidConfigError(f"[broker] {name} must not be negative")
        if not 0 <= self.port <= 65535:  # 0: a free port picked by the OS
            raise InvalidConfigError(f"port {self.port} is out of range (0-65535)")
        if self.advertised_port is not None and not 1 <= self.advertised_port <= 65535:
            raise InvalidConfigError(f"advertised port {self.advertised_port} is out of range (1-65535)")
        if self.broker_id < 0:
            raise InvalidConfigError(f"broker id {self.broker_id} must not be negative")
        bound = self.bound_listeners
        if self.advertised_listeners is not None:
            names = {listener.name for listener in bound}
            extra = [a.name for a in parse_listeners(self.advertised_listeners, "advertised_listeners")
                     if a.name not in names]
            if extra:
                raise InvalidConfigError(f"advertised_listeners names {', '.join(extra)}, which is not a listener")
        self.security.check(bound)

    @property
    def bound_listeners(self) -> tuple[Listener, ...]:
        """Where the broker listens: `listeners`, or one PLAINTEXT listener on host:port."""
        if self.listeners is None:
            return (Listener(PLAINTEXT, self.host, self.port),)
        return parse_listeners(self.listeners)

    def endpoint_for(self, listener_name: str) -> tuple[str, int]:
        """(host, port) clients are told for the listener they connected to (Kafka answers
        Metadata with the endpoints of the request's listener)."""
        if self.advertised_listeners is not None:
            for advertised in parse_listeners(self.advertised_listeners, "advertised_listeners"):
                if advertised.name == listener_name:
                    return advertised.host, advertised.port
        for listener in self.bound_listeners:
            if listener.name == listener_name:
                if self.listeners is None:  # the single host/port listener: advertised_host/port
                    return self.advertised_host or _dialable(listener.host), self.advertised_port or listener.port
                return _dialable(listener.host), listener.port
        raise KeyError(listener_name)

    @property
    def public_host(self) -> str:
        """The first listener's advertised host (the registration file, the root lock's owner)."""
        return self.endpoint_for(self.bound_listeners[0].name)[0]

    @property
    def public_port(self) -> int:
        return self.endpoint_for(self.bound_listeners[0].name)[1]

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], *, root: str | Path | None = None,
                      registry_listen: str | None = None, metrics_listen: str | None = None,
                      cache_dir: str | None = None, **overrides: Any) -> "BrokerConfig":
        """`[broker]` values, then non-None overrides (command-line flags) on top. A bucket root
        (s3://...) runs on the cache directory `cache_dir` (else [storage] cache_dir, else one
        derived from the URL)."""
        metrics = section(settings, "metrics")
        if metrics_listen is not None:
            metrics["listen"] = metrics_listen
        values = section(settings, "broker")
        names = {f.name for f in dataclasses.fields(cls)} - {"root", "groups", "transactions", "registry", "security",
                                                             "share", "cluster", "metrics", "bucket"}
        unknown = set(values) - names
        if unknown:
            raise InvalidConfigError(f"unknown [broker] settings: {', '.join(sorted(unknown))}")
        check_types(cls, "broker", values)
        given = {k: v for k, v in overrides.items() if v is not None}
        legacy = {"host", "port", "advertised_host", "advertised_port"}
        if "listeners" in given:  # a flag wins over the file's other way of saying where to listen
            values = {k: v for k, v in values.items() if k not in legacy}
        elif legacy & set(given):
            values = {k: v for k, v in values.items() if k not in ("listeners", "advertised_listeners")}
        values.update(given)
        if values.get("listeners") is not None:
            if {"host", "port", "advertised_host", "advertised_port"} & set(values):
                raise InvalidConfigError("set either listeners (and advertised_listeners) or host/port "
                                         "(and advertised_host/advertised_port), not both")
            first = parse_listeners(values["listeners"])[0]  # host/port: the first listener's
            values["host"], values["port"] = first.host, first.port
        location = storage_location(settings, root)
        bucket = None
        if isinstance(location, S3Root):
            cluster_broker = values.get("broker_id", 0) if section(settings, "cluster").get("zookeeper") else None
            bucket = BucketSettings.from_section(location, section(settings, "storage"), cache_dir,
                                                 broker_id=cluster_broker)
        return cls(root=bucket.cache_dir if bucket else storage_root(settings, root), bucket=bucket,
                   groups=GroupsConfig.from_section(section(settings, "groups")),
                   transactions=TransactionsConfig.from_section(section(settings, "transactions")),
                   share=ShareConfig.from_section(section(settings, "share")),
                   cluster=ClusterConfig.from_section(section(settings, "cluster")),
                   registry=RegistryConfig.from_settings(settings, listen=registry_listen),
                   security=SecurityConfig.from_section(section(settings, "security")),
                   metrics=section_dataclass(MetricsConfig, "metrics", metrics), **values)


def _dialable(host: str) -> str:
    """A wildcard bind is not an address a client can dial."""
    return "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
