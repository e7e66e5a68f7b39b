"""The time a request keeps the broker busy, for the request quota (request_percentage).

Kafka counts the time a request spends in its network and request-handler threads, not the time
it waits in purgatory (a fetch's max_wait, a JoinGroup parked until the rebalance completes).
Here one task handles a connection's request: its wall time counts, minus the stretches the
handler marks with `waiting()`."""

from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

_waited: ContextVar[list[float] | None] = ContextVar("topiclake_request_waited", default=None)


class Stopwatch:
    def __init__(self) -> None:
        self._start = time.perf_counter()
        self._waited = [0.0]
        self._token = _waited.set(self._waited)
        self._busy: float | None = None

    def busy_seconds(self) -> float:
        """Elapsed time minus what the handler spent waiting; the first call ends the measurement
        (in the handling task: a response answered later waits in purgatory, not busy)."""
        if self._busy is None:
            _waited.reset(self._token)
            self._busy = max(time.perf_counter() - self._start - self._waited[0], 0.0)
        return self._busy


@contextmanager
def waiting() -> Iterator[None]:
    """A stretch the request waits for something else (purgatory): not counted as busy."""
    start = time.perf_counter()
    try:
        yield
    finally:
        waited = _waited.get()
        if waited is not None:
            waited[0] += time.perf_counter() - start
