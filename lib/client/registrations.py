"""The brokers registered in a storage root (`<root>/brokers/<id>.json`, each broker's endpoints
and lease): where the tools find the cluster when no --bootstrap is given."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from topiclake.segments.storage import StorageLayout


@dataclass(frozen=True)
class Registration:
    broker_id: int
    endpoints: tuple[str, ...]  # PROTOCOL://host:port, the broker's listeners
    registry_url: str | None
    pid: int | None
    lease_expires_ms: int
    error: str | None = None  # an unreadable registration file
    metrics_url: str | None = None  # the broker's Prometheus /metrics, when it serves one

    @property
    def alive(self) -> bool:
        return self.lease_expires_ms > time.time() * 1000

    def address(self, protocol: str | None = None) -> tuple[str, str]:
        """(protocol, host:port) of the listener speaking `protocol`, else of the first."""
        listeners = [e.partition("://")[::2] for e in self.endpoints]
        return next((found for found in listeners if found[0] == protocol), listeners[0])


def registrations(layout: StorageLayout) -> list[Registration]:
    out = []
    for path in sorted(layout.brokers_dir.glob("*.json")) if layout.brokers_dir.is_dir() else []:
        try:
            reg = json.loads(path.read_text())
            endpoints = tuple(reg.get("endpoints") or (f"PLAINTEXT://{reg['host']}:{int(reg['port'])}",))
            out.append(Registration(int(reg.get("broker_id", path.stem)), endpoints, reg.get("schema_registry"),
                                    reg.get("pid"), int(reg.get("lease_expires_ms", 0)),
                                    metrics_url=reg.get("metrics")))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            out.append(Registration(-1, (), None, None, 0, error=f"{path.name}: {exc}"))
    return out


def live_endpoints(layout: StorageLayout, protocol: str | None = None) -> list[tuple[str, str]]:
    """(protocol, host:port) of every live registered broker, for `protocol` where it listens
    with it, else its first listener."""
    return [reg.address(protocol) for reg in registrations(layout) if reg.alive and reg.endpoints]


def bootstrap_or_registered(bootstrap: str | None, root: Path | None, protocol: str | None = None,
                            default: str = "127.0.0.1:9092") -> str:
    """The bootstrap list to use: `bootstrap` when given, else every live broker registered in
    `root` (for `protocol`), else `default`."""
    if bootstrap is not None:
        return bootstrap
    live = live_endpoints(StorageLayout(root), protocol) if root is not None else []
    return ",".join(address for _protocol, address in live) or default
