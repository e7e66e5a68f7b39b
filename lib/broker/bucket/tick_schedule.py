"""When a bucket root's flush tick runs next (docs/OBJECT-STORAGE.md, "Write path"): every
`flush_ms`, and earlier in three cases, each of which would otherwise hold records back:

- a partition holds `flush_bytes` unflushed: at once (`now`);
- a connection's client has CLIENT_IN_FLIGHT_LIMIT answers due and sends nothing more until one
  is answered: `full_window_flush_ms` later (`window_full`), one early tick however many ask;
- a produce arrives whose records are already old (`records_waiting`): a client that keeps one
  request in flight per partition (librdkafka's idempotent producer) holds every record produced
  while one request waits for its tick, and sends them only when it is answered. Waiting out a
  whole tick more would make those records wait two ticks. The tick comes when the oldest of them
  is `flush_ms` old (by its batch's base timestamp, the producer's clock), so a record waits about
  one tick however it was held. Records older than two ticks were not held for one (replayed
  records keep their timestamps, a clock may be far behind ours): they bring nothing forward. At
  most one such early tick between two regular ones, and none that would come within a tenth of
  `flush_ms` of the regular one (it would spend the allowance for nothing): the PUTs at most
  double, whatever the producers' clocks say (a clock a little behind ours makes every record
  look old, one ahead makes none).

Everything here runs on the event loop.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Iterable

HELD_AT_MOST_TICKS = 2  # a record older than this many ticks was not held back for one
NOT_WORTH_TICKS = 0.1  # an early tick this close to the regular one is not worth its allowance


class TickSchedule:
    def __init__(self, flush_ms: int, full_window_flush_ms: int):
        self.flush_s = flush_ms / 1000
        self.full_window_s = full_window_flush_ms / 1000
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._window_timer: asyncio.TimerHandle | None = None
        self._aged_timer: asyncio.TimerHandle | None = None
        self._early_allowed = True  # no early tick for old records since the last regular tick
        self._regular_at = math.inf  # loop time of the next tick if nothing brings it forward

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()

    async def next_tick(self, *, hold: bool = False) -> None:
        """Until the next tick is due: `flush_ms` after the last one, or earlier if asked (never
        with `hold`)."""
        assert self._loop is not None and self._wake is not None, "start() first"
        self._regular_at = self._loop.time() + self.flush_s
        if hold:
            await asyncio.sleep(self.flush_s)
        else:
            try:
                await asyncio.wait_for(self._wake.wait(), self.flush_s)
            except asyncio.TimeoutError:
                pass
        if hold or not self._wake.is_set():  # the regular tick
            self._early_allowed = True
        self._wake.clear()
        self._regular_at = math.inf  # while the tick runs: flush_ms after it ends (regular_at)
        if self._aged_timer is not None:  # this tick flushes what it was for
            self._aged_timer.cancel()
            self._aged_timer = None

    def regular_at(self) -> float:
        """Loop time of the next tick if nothing brings it forward (while a tick runs, at least
        flush_ms from now)."""
        assert self._loop is not None
        return min(self._regular_at, self._loop.time() + self.flush_s)

    def now(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def window_full(self) -> None:
        if self._window_timer is not None or self._loop is None:
            return

        def due() -> None:
            self._window_timer = None
            self.now()
        self._window_timer = self._loop.call_later(self.full_window_s, due)

    def records_waiting(self, created_ms: Iterable[int]) -> None:
        """A produce waits for the tick; `created_ms`: its batches' base timestamps."""
        if self._loop is None or not self._early_allowed:
            return
        now = time.time()
        ages = [age for age in (now - ms / 1000 for ms in created_ms) if age <= HELD_AT_MOST_TICKS * self.flush_s]
        if not ages:
            return
        at = self._loop.time() + max(0.0, self.flush_s - max(ages))
        if at >= self.regular_at() - NOT_WORTH_TICKS * self.flush_s:
            return  # the regular tick is soon enough
        self._early_allowed = False
        self._aged_timer = self._loop.call_at(at, self.now)

    def cancel(self) -> None:
        for timer in (self._window_timer, self._aged_timer):
            if timer is not None:
                timer.cancel()
