"""Byte-rate quotas enforced as Kafka's ClientQuotaManager does (KIP-13, KIP-219).

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

The user is the authenticated principal's name (ANONYMOUS on PLAINTEXT, SSL without a client
certificate: Kafka's User:ANONYMOUS). request_percentage,
controller_mutation_rate and connection_creation_rate are stored, not enforced.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Callable

from .client_quotas import CLIENT_ID, USER, ClientQuotas

WINDOW_S = 1.0
SAMPLES = 11
ANONYMOUS = "ANONYMOUS"
PRODUCE, FETCH = "producer_byte_rate", "consumer_byte_rate"

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


class Throttler:
    def __init__(self, quotas: ClientQuotas, clock: Callable[[], float] = time.monotonic):
        self.quotas = quotas
        self.clock = clock
        self._rates: dict[tuple, _Rate] = {}

    def _quota(self, key: str, user: str, client_id: str) -> tuple[float, tuple] | None:
        """(quota, the key its rate is counted under) of the most specific entity with `key`."""
        stored = {frozenset(entity): values for entity, values in self.quotas.describe([], strict=False).items()}
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

    def unrecord(self, key: str, user: str | None, client_id: str | None, nbytes: int) -> None:
        """Take back bytes that were not sent after all (a throttled fetch)."""
        found = self._quota(key, user or ANONYMOUS, client_id or "")
        if found is not None and found[1] in self._rates:
            self._rates[found[1]].record(self.clock(), -nbytes)
