"""`[storage]` settings of a broker on a bucket root, and where its cache directory is.

The cache directory holds the broker's local Log tree (a file-root-shaped tree); nothing in it is
trusted on start: the broker empties it and takes every partition over from the bucket. Its
default is derived from the root URL, `./data-cache/<bucket>[-<prefix with / as ->]` (and
`-broker-<id>` for a cluster broker), so two roots, or two brokers of a cluster, never share one by default.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from topiclake.objectlog.lease import DEFAULT_LEASE_MS
from topiclake.objectlog.garbage import DEFAULT_DELETE_GRACE_MS
from topiclake.segments.errors import InvalidConfigError
from topiclake.segments.settings import check_types
from topiclake.store.root import S3Root

DEFAULT_CACHE_PARENT = Path("./data-cache")
_AT_LEAST_ONE = ("flush_ms", "flush_bytes", "seal_ms", "lease_ms", "flush_timeout_ms", "full_window_flush_ms",
                 "manifest_poll_ms")


@dataclass(frozen=True, slots=True)
class BucketSettings:
    root: S3Root
    cache_dir: Path
    flush_ms: int = 250  # the flush tick
    flush_bytes: int = 8 * 1024 * 1024  # a partition with this many unflushed bytes flushes at once
    seal_ms: int = 60_000  # a tail's flush objects are sealed into a segment this long after the first
    lease_ms: int = DEFAULT_LEASE_MS  # cluster/owner.json: another broker takes over after this long
    delete_grace_ms: int = DEFAULT_DELETE_GRACE_MS  # superseded objects are deleted once this old
    flush_timeout_ms: int = 10_000  # one flush round's retries when no produce request waits on it
    # A connection with CLIENT_IN_FLIGHT_LIMIT produce answers due (a client at its in-flight limit: it
    # sends nothing more until one is answered) brings the tick forward to this long after.
    full_window_flush_ms: int = 75
    # A sealed tail's local segment stays in the cache this long after its seal (reads of it stay
    # local), then is deleted: older offsets are read from the bucket. -1: kept until the next
    # takeover, and the local log rolls only by Kafka's rules (segment.bytes, segment.ms).
    cache_sealed_ms: int = 60_000
    # A leader lists each partition's manifests this often (spread over it), besides the partitions
    # the maintenance notices name every 5 s: it catches a job killed between commit and notice.
    manifest_poll_ms: int = 300_000

    def __post_init__(self) -> None:
        for name in _AT_LEAST_ONE:
            if getattr(self, name) < 1:
                raise InvalidConfigError(f"[storage] {name} must be at least 1")
        if self.cache_sealed_ms < -1:
            raise InvalidConfigError("[storage] cache_sealed_ms must be -1 (keep) or at least 0")
        if self.delete_grace_ms < 0:
            raise InvalidConfigError("[storage] delete_grace_ms must not be negative")

    @classmethod
    def from_section(cls, root: S3Root, values: Mapping[str, Any], cache_dir: str | None = None, *,
                     broker_id: int | None = None) -> "BucketSettings":
        """From `[storage]` (its root and s3 keys are the root's business) and --cache-dir.
        `broker_id`: a cluster broker's, in its default cache directory (brokers started in one
        directory never share one)."""
        known = {f.name for f in dataclasses.fields(cls)} - {"root"}
        unknown = set(values) - known - {"root", "s3"}
        if unknown:
            raise InvalidConfigError(f"unknown [storage] settings: {', '.join(sorted(unknown))}")
        own = {k: v for k, v in values.items() if k in known}
        check_types(cls, "storage", own)
        chosen = cache_dir if cache_dir is not None else own.pop("cache_dir", None)
        own.pop("cache_dir", None)
        return cls(root=root, cache_dir=Path(chosen) if chosen else default_cache_dir(root, broker_id), **own)


def default_cache_dir(root: S3Root, broker_id: int | None = None) -> Path:
    name = root.bucket + (f"-{root.prefix.replace('/', '-')}" if root.prefix else "")
    return DEFAULT_CACHE_PARENT / (name if broker_id is None else f"{name}-broker-{broker_id}")
