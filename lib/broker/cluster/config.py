"""`[cluster]` of conf/topiclake.toml: where the ZooKeeper ensemble is. Unset (the default), the
broker runs alone on its root exactly as before.

    [cluster]
    zookeeper = "zk1:2181,zk2:2181,zk3:2181"   # Kafka's zookeeper.connect, without a chroot
    chroot = "/topiclake"                      # every znode of this cluster lives below it
    session_timeout_ms = 2000                  # failover takes about this long (Kafka: 18000)
    connection_timeout_ms = 10000              # giving up on the first connect
    rack = "rack-a"                            # broker.rack, in the registration
    preferred_leader_delay_ms = 5000           # a broker back this long gets its preferred partitions back
    default_replication_factor = 1             # Kafka's default.replication.factor (CreateTopics' -1)

A chroot in the connect string itself ("host:port/path", Kafka's way) is accepted too, once.
ZooKeeper bounds the session timeout to 2-20 of its tickTime (the server's choice wins).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from topiclake.segments.errors import InvalidConfigError
from topiclake.segments.settings import section, section_dataclass

_HOST_PORT = re.compile(r"^[A-Za-z0-9_.\-]+:\d{1,5}$|^\[[0-9A-Fa-f:]+\]:\d{1,5}$")
_CHROOT = re.compile(r"^(/[A-Za-z0-9_.\-]+)+$")
DEFAULT_CHROOT = "/topiclake"


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    zookeeper: str | None = None
    chroot: str = DEFAULT_CHROOT
    session_timeout_ms: int = 2000
    # How long a broker that came back must be live before its preferred partitions move home
    # (Kafka's auto.leader.rebalance, which checks every leader.imbalance.check.interval.seconds).
    preferred_leader_delay_ms: int = 5000
    connection_timeout_ms: int = 10_000
    rack: str | None = None
    # Kafka's default.replication.factor: a partition's replicas are the brokers that should lead
    # it, preferred first (nothing is copied: the storage is shared).
    default_replication_factor: int = 1

    def __post_init__(self) -> None:
        if self.zookeeper is None:
            return
        hosts, slash, inline_chroot = self.zookeeper.partition("/")
        if slash:
            if self.chroot not in (DEFAULT_CHROOT, "/" + inline_chroot):
                raise InvalidConfigError(f"[cluster] zookeeper names chroot /{inline_chroot} and chroot names "
                                         f"{self.chroot}: give it once")
            object.__setattr__(self, "zookeeper", hosts)
            object.__setattr__(self, "chroot", "/" + inline_chroot)
        servers = [s.strip() for s in hosts.split(",")]
        bad = [s for s in servers if not _HOST_PORT.match(s) or not 0 < int(s.rsplit(":", 1)[1]) <= 65535]
        if not servers or bad:
            raise InvalidConfigError(f"[cluster] zookeeper must be host:port[,host:port...], not {self.zookeeper!r}")
        object.__setattr__(self, "zookeeper", ",".join(servers))
        if not _CHROOT.match(self.chroot):
            raise InvalidConfigError(f"[cluster] chroot must be an absolute znode path like /topiclake, "
                                     f"not {self.chroot!r}")
        if not 100 <= self.session_timeout_ms <= 600_000:
            raise InvalidConfigError("[cluster] session_timeout_ms must lie within 100 and 600000")
        if self.connection_timeout_ms < 1:
            raise InvalidConfigError("[cluster] connection_timeout_ms must be at least 1")
        if self.default_replication_factor < 1:
            raise InvalidConfigError("[cluster] default_replication_factor must be at least 1")

    @property
    def enabled(self) -> bool:
        return self.zookeeper is not None

    @classmethod
    def from_section(cls, values: Mapping[str, Any]) -> "ClusterConfig":
        return section_dataclass(cls, "cluster", values)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> "ClusterConfig":
        return cls.from_section(section(settings, "cluster"))
