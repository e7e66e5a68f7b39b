"""Single-broker ownership of a bucket root: the lease `cluster/owner.json` (docs/OBJECT-STORAGE.md,
"Ownership and takeover").

Created with If-None-Match, renewed with If-Match every lease_ms / 3. A broker that finds it held
takes it only after seeing the same ETag for a whole lease_ms on its own monotonic clock (no clock
is compared between machines), and then with If-Match on that ETag, so of two waiting brokers
exactly one wins. A clean shutdown deletes it, so a restart takes over at once. The lease only
decides who starts leading; what a paused previous owner writes afterwards is fenced by leader
epochs (fence.py), never by the lease.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass
from typing import Callable

from topiclake.segments.errors import TopiclakeError
from topiclake.store.errors import ObjectExists, ObjectNotFound, PreconditionFailed
from topiclake.store.objects import CREATE, IfMatch, ObjectStore

OWNER_KEY = "cluster/owner.json"
DEFAULT_LEASE_MS = 10_000


class LeaseLost(TopiclakeError):
    """Another broker took the lease: this one must stop serving the root."""


class LeaseTimeout(TopiclakeError):
    """The lease was held and renewed by another broker for the whole wait."""


@dataclass(frozen=True, slots=True)
class Owner:
    broker_id: int
    host: str
    port: int
    generation: int
    pid: int
    # Bumped by every renewal: S3's ETag is a digest of the bytes, so a renewal writing the same
    # bytes would keep the ETag, and a waiting broker would take a lease that is being renewed.
    renewal: int = 0

    def to_json(self) -> bytes:
        return json.dumps({"broker_id": self.broker_id, "host": self.host, "port": self.port,
                           "generation": self.generation, "pid": self.pid, "renewal": self.renewal},
                          sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "Owner | None":
        try:
            body = json.loads(data)
            return cls(int(body["broker_id"]), str(body["host"]), int(body["port"]), int(body["generation"]),
                       int(body["pid"]), int(body.get("renewal", 0)))
        except (ValueError, KeyError, TypeError):
            return None  # unreadable: still a held lease (its ETag is what counts)


class OwnerLease:
    def __init__(self, store: ObjectStore, *, broker_id: int, host: str, port: int,
                 lease_ms: int = DEFAULT_LEASE_MS, clock: Callable[[], float] = time.monotonic,
                 poll_s: float | None = None):
        self.store = store
        self.broker_id, self.host, self.port = broker_id, host, port
        self.lease_ms = lease_ms
        self.clock = clock
        self.poll_s = poll_s if poll_s is not None else min(1.0, lease_ms / 10_000)
        self.etag: str | None = None
        self.owner: Owner | None = None
        self.previous: Owner | None = None  # whom the lease was taken from (None: it was free)

    @property
    def held(self) -> bool:
        return self.etag is not None

    def acquire(self, timeout_s: float | None = None) -> Owner:
        """Hold the lease: at once when it is free, else once the holder stopped renewing it for
        lease_ms. LeaseTimeout when `timeout_s` passes first."""
        give_up = None if timeout_s is None else self.clock() + timeout_s
        watched: tuple[str, float] | None = None  # (etag, when first seen on our clock)
        while True:
            info = self.store.head(OWNER_KEY)
            if info is None:
                if self._write(1, mode=CREATE, previous=None):
                    return self._held()
                watched = None
                continue
            now = self.clock()
            if watched is None or watched[0] != info.etag:
                watched = (info.etag or "", now)
            elif (now - watched[1]) * 1000 >= self.lease_ms:
                previous = self._read_owner()
                generation = (previous.generation if previous else 0) + 1
                if self._write(generation, mode=IfMatch(info.etag), previous=previous):
                    return self._held()
                watched = None
                continue
            if give_up is not None and now >= give_up:
                holder = self._read_owner()
                said = f"broker {holder.broker_id} at {holder.host}:{holder.port}" if holder else "another broker"
                raise LeaseTimeout(f"{self.store.root.uri(OWNER_KEY)} is held by {said}, "
                                   f"renewed within every {self.lease_ms} ms")
            time.sleep(self.poll_s)

    def _held(self) -> Owner:
        if self.owner is None:  # _write sets it when it returns True
            raise LeaseLost("the lease is not held")
        return self.owner

    def renew(self) -> None:
        """Every lease_ms / 3 while serving; LeaseLost when someone else took it."""
        if self.owner is None or self.etag is None:
            raise LeaseLost("the lease is not held")
        renewed = dataclasses.replace(self.owner, renewal=self.owner.renewal + 1)
        try:
            self.etag = self.store.put(OWNER_KEY, renewed.to_json(), mode=IfMatch(self.etag))
        except (PreconditionFailed, ObjectNotFound):
            self.etag = None
            raise LeaseLost(f"{self.store.root.uri(OWNER_KEY)} was taken by another broker") from None
        self.owner = renewed

    def update(self, *, port: int) -> None:
        """The port bound (0 asked for one): renew with it."""
        if self.owner is not None:
            self.owner = dataclasses.replace(self.owner, port=port)
            self.port = port
        self.renew()

    def release(self) -> None:
        """Clean shutdown: delete the lease if it is still ours (a HEAD first: S3 has no
        conditional delete, so a takeover between the two is only possible past lease_ms)."""
        if self.etag is None:
            return
        current = self.store.head(OWNER_KEY)
        if current is not None and current.etag == self.etag:
            self.store.delete(OWNER_KEY)
        self.etag = None

    def _read_owner(self) -> Owner | None:
        try:
            return Owner.from_json(self.store.get(OWNER_KEY))
        except ObjectNotFound:
            return None

    def _write(self, generation: int, *, mode, previous: Owner | None) -> bool:
        owner = Owner(self.broker_id, self.host, self.port, generation, os.getpid())
        try:
            self.etag = self.store.put(OWNER_KEY, owner.to_json(), mode=mode)
        except (ObjectExists, PreconditionFailed):
            return False
        self.owner, self.previous = owner, previous
        return True
