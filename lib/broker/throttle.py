"""Client quotas enforced as Kafka's quota managers do (KIP-13, KIP-124, KIP-219, KIP-599, KIP-612).

Each produce request's record bytes count against the client's producer_byte_rate, each fetch
response's against its consumer_byte_rate. The quota that applies is the most specific stored
one, in Kafka's order: user + client-id, user + default client-id, user, default user +
client-id, default user + default client-id, default user, client-id, default client-id. A
default entity gives every user / client-id its own allowance; a named one is shared by the
clients it names.

The rate is measured over `SAMPLES` windows of `WINDOW_S` seconds (quota.window.num,
quota.window.size.seconds), counting at least SAMPLES - 1 windows of elapsed time, so a client
may burst up to that many seconds' worth of its quota. Over quota, the response carries
throttle_time_ms = (rate - quota) / quota * window, and the connection reads no further request
until that time has passed (Kafka mutes the channel); a throttled fetch returns no records
(they are not counted), as Kafka answers.

request_percentage (ClientRequestQuotaManager): the time spent handling a client's requests, as a
percentage of one thread (100 = one thread busy all the time), measured the same way and over
the same windows; over quota the response carries the throttle time (at most one window, as
Kafka bounds it) and the connection is muted. Every request counts.

controller_mutation_rate (ControllerMutationQuotaManager, KIP-599): partitions created or deleted
per second by CreateTopics, CreatePartitions and DeleteTopics, as a token bucket holding
SAMPLES * WINDOW_S seconds' worth of the rate. Strict (CreateTopics v6+, DeleteTopics v5+,
CreatePartitions v3+): a topic asked for while the bucket is empty fails with
THROTTLING_QUOTA_EXCEEDED; a topic that fits in what is left is done even if it overdraws the
bucket. Older versions are permissive: done, then throttled by the overdraft.

connection_creation_rate (KIP-612): new connections per second from one ip (the ip's own entity,
else the default ip entity), over the same windows; a connection over it is held unserved for
its throttle time, then closed (Kafka's acceptor does the same).

The user is the authenticated principal's name (ANONYMOUS on PLAINTEXT, SSL without a client
certificate: Kafka's User:ANONYMOUS).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Callable

from .client_quotas import CLIENT_ID, IP, USER, ClientQuotas

WINDOW_S = 1.0
SAMPLES = 11
ANONYMOUS = "ANONYMOUS"
PRODUCE, FETCH = "producer_byte_rate", "consumer_byte_rate"
REQUEST, MUTATIONS, CONNECTIONS = "request_percentage", "controller_mutation_rate", "connection_creation_rate"

# Each entity component is the client's own name (NAMED), the type's default entity (DEFAULT), or
# absent; (user, client-id) in the precedence of Kafka's DefaultQuotaCallback.
NAMED, DEFAULT, ABSENT = "named", "default", "absent"
_ORDER = ((NAMED, NAMED), (NAMED, DEFAULT), (NAMED, ABSENT), (DEFAULT, NAMED), (DEFAULT, DEFAULT),
          (DEFAULT, ABSENT), (ABSENT, NAMED), (ABSENT, DEFAULT))


class _Rate:
    """Kafka's sampled Rate: bytes per second over the last SAMPLES windows."""

    __slots__ = ("samples",)

    def __init__(self) -> None:
        self.samples: deque[list[float]] = deque()  # [window start, bytes]

    def record(self, now: float, nbytes: float) -> None:
        if not self.samples or now - self.samples[-1][0] >= WINDOW_S:
            self.samples.append([now, 0.0])
        self.samples[-1][1] += nbytes
        while now - self.samples[0][0] >= SAMPLES * WINDOW_S:
            self.samples.popleft()

    def window_s(self, now: float) -> float:
        elapsed = now - self.samples[0][0] if self.samples else 0.0
        return max(elapsed, (SAMPLES - 1) * WINDOW_S)

    def value(self, now: float) -> float:
        return sum(b for _start, b in self.samples) / self.window_s(now)


class _TokenBucket:
    """Kafka's TokenBucket (KIP-599): `burst` tokens, refilled at `rate` per second; may go negative."""

    __slots__ = ("tokens", "at")

    def __init__(self, burst: float, now: float) -> None:
        self.tokens, self.at = burst, now

    def refill(self, now: float, rate: float, burst: float) -> float:
        self.tokens = min(burst, self.tokens + (now - self.at) * rate)
        self.at = now
        return self.tokens


class Throttler:
    def __init__(self, quotas: ClientQuotas, clock: Callable[[], float] = time.monotonic):
        self.quotas = quotas
        self.clock = clock
        self._rates: dict[tuple, _Rate] = {}
        self._buckets: dict[tuple, _TokenBucket] = {}

    def _quota(self, key: str, user: str, client_id: str) -> tuple[float, tuple] | None:
        """(quota, the key its rate is counted under) of the most specific entity with `key`."""
        stored = self.quotas.entities()
        if not stored:
            return None
        for user_part, client_part in _ORDER:
            entity = {(kind, name if part == NAMED else None)
                      for kind, name, part in ((USER, user, user_part), (CLIENT_ID, client_id, client_part))
                      if part != ABSENT}
            values = stored.get(frozenset(entity))
            if values and key in values:
                # Counted per client of the entity's types: a default entity is everyone's own allowance.
                counted = (key, user if user_part != ABSENT else None, client_id if client_part != ABSENT else None)
                return values[key], counted
        return None

    def record(self, key: str, user: str | None, client_id: str | None, nbytes: int) -> int:
        """Count `nbytes` against the client's `key` quota; the throttle time in ms (0: within quota)."""
        found = self._quota(key, user or ANONYMOUS, client_id or "")
        if found is None:
            return 0
        quota, counted = found
        now = self.clock()
        rate = self._rates.setdefault(counted, _Rate())
        rate.record(now, nbytes)
        value = rate.value(now)
        if quota <= 0:  # nothing allowed: hold the client off for the whole measured window
            return int(SAMPLES * WINDOW_S * 1000)
        if value <= quota:
            return 0
        return int((value - quota) / quota * rate.window_s(now) * 1000)

    def limits(self, key: str, user: str | None, client_id: str | None) -> bool:
        """Whether a `key` quota applies to this client at all (counting nothing)."""
        return self._quota(key, user or ANONYMOUS, client_id or "") is not None

    def unrecord(self, key: str, user: str | None, client_id: str | None, nbytes: int) -> None:
        """Take back bytes that were not sent after all (a throttled fetch)."""
        found = self._quota(key, user or ANONYMOUS, client_id or "")
        if found is not None and found[1] in self._rates:
            self._rates[found[1]].record(self.clock(), -nbytes)

    def record_request_time(self, user: str | None, client_id: str | None, seconds: float) -> int:
        """Count the time one request took against request_percentage; the throttle time in ms,
        at most one window (ClientRequestQuotaManager's bound)."""
        throttle_ms = self.record(REQUEST, user, client_id, seconds * 100)  # Kafka's nanosToPercentage
        return min(throttle_ms, int(WINDOW_S * 1000))

    def request_throttle_ms(self, user: str | None, client_id: str | None) -> int:
        """What the request quota holds a client off for now, without counting anything."""
        return self.record_request_time(user, client_id, 0.0)

    def record_mutations(self, user: str | None, client_id: str | None, partitions: int,
                         strict: bool) -> tuple[bool, int]:
        """Count `partitions` created or deleted against controller_mutation_rate: (done?, the
        throttle time in ms). Strict: refused (False) while the bucket is empty; otherwise done
        and throttled by what it overdraws."""
        found = self._quota(MUTATIONS, user or ANONYMOUS, client_id or "")
        if found is None:
            return True, 0
        quota, counted = found
        if quota <= 0:
            return (not strict), int(SAMPLES * WINDOW_S * 1000)
        now, burst = self.clock(), quota * SAMPLES * WINDOW_S
        bucket = self._buckets.get(counted)
        if bucket is None:
            bucket = self._buckets[counted] = _TokenBucket(burst, now)
        tokens = bucket.refill(now, quota, burst)
        if strict and tokens < 0:
            return False, int(-tokens / quota * 1000)
        bucket.tokens -= partitions
        return True, (0 if strict or bucket.tokens >= 0 else int(-bucket.tokens / quota * 1000))

    def record_connection(self, ip: str) -> int:
        """Count a new connection from `ip` against connection_creation_rate; ms to hold it off
        before closing it (0: serve it)."""
        stored = self.quotas.entities()
        for entity in (frozenset({(IP, ip)}), frozenset({(IP, None)})):
            values = stored.get(entity)
            if values and CONNECTIONS in values:
                quota = values[CONNECTIONS]
                break
        else:
            return 0
        now = self.clock()
        rate = self._rates.setdefault((CONNECTIONS, ip), _Rate())
        rate.record(now, 1)
        if quota <= 0:
            return int(SAMPLES * WINDOW_S * 1000)
        value = rate.value(now)
        return 0 if value <= quota else int((value - quota) / quota * rate.window_s(now) * 1000)
