"""One INFO line per leadership change of a broker, instead of one per partition.

A failover moves tens or hundreds of partitions at once (50 of `__consumer_offsets` alone), and
each used to log its own lines on every broker involved. `LeadershipLog` gathers what one event
did on this broker (partitions taken over and how long that took, partitions let go, leader
changes written as controller) and `summary()` says it in one line, partition lists compacted
(`__consumer_offsets-0..5,9`) and cut after a few topics. The node decides when an event ends
(no transition left in flight for a moment).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

TOPICS_SHOWN = 6  # topics named in a summary before "and N more"
RUNS_SHOWN = 8  # runs of partitions named per topic before ",..."


def compact(keys: Iterable[tuple[str, int]], topics_shown: int = TOPICS_SHOWN, runs_shown: int = RUNS_SHOWN) -> str:
    """`orders-0..3,7, __consumer_offsets-12`: partitions per topic, consecutive ones as ranges,
    at most `runs_shown` runs per topic and `topics_shown` topics."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(set(keys)):
        by_topic.setdefault(topic, []).append(partition)
    parts = []
    for topic, indexes in list(by_topic.items())[:topics_shown]:
        runs, start, previous = [], indexes[0], indexes[0]
        for index in indexes[1:]:
            if index != previous + 1:
                runs.append((start, previous))
                start = index
            previous = index
        runs.append((start, previous))
        shown = ",".join(str(a) if a == b else f"{a}..{b}" for a, b in runs[:runs_shown])
        parts.append(f"{topic}-{shown}" + (",..." if len(runs) > runs_shown else ""))
    hidden = len(by_topic) - topics_shown
    return ", ".join(parts) + (f" and {hidden} more topics" if hidden > 0 else "")


@dataclass
class LeadershipLog:
    """What the current leadership event did on this broker."""

    clock: object = time.monotonic
    started: float | None = None
    taken: list[tuple[str, int]] = field(default_factory=list)
    let_go: list[tuple[str, int]] = field(default_factory=list)
    failed: list[tuple[str, int]] = field(default_factory=list)
    elections: Counter = field(default_factory=Counter)  # reason kind -> leader changes written

    def begin(self) -> None:
        if self.started is None:
            self.started = self.clock()

    def took_over(self, key: tuple[str, int]) -> None:
        self.taken.append(key)

    def resigned(self, key: tuple[str, int]) -> None:
        self.let_go.append(key)

    def failed_on(self, key: tuple[str, int]) -> None:
        self.failed.append(key)

    def elected(self, reason: str) -> None:
        self.elections[_reason_kind(reason)] += 1

    @property
    def empty(self) -> bool:
        return not (self.taken or self.let_go or self.failed or self.elections)

    def summary(self, broker_id: int, leading: int) -> str:
        """The event's line; the log starts over for the next event."""
        took_ms = (self.clock() - self.started) * 1000 if self.started is not None else 0.0
        parts = []
        if self.elections:
            parts.append("wrote " + ", ".join(f"{n} leader changes ({kind})"
                                              for kind, n in sorted(self.elections.items())))
        if self.taken:
            parts.append(f"took over {len(self.taken)} ({compact(self.taken)})")
        if self.let_go:
            parts.append(f"let go of {len(self.let_go)} ({compact(self.let_go)})")
        if self.failed:
            parts.append(f"failed to change {len(self.failed)} ({compact(self.failed)}; see the errors above)")
        line = f"broker {broker_id} leads {leading} partitions after {took_ms:.0f} ms of changes: " + "; ".join(parts)
        self.started, self.taken, self.let_go, self.failed, self.elections = None, [], [], [], Counter()
        return line


def _reason_kind(reason: str) -> str:
    """A LeaderChange's reason without its broker ids, so that changes of one kind are counted
    together ("leader 3 is not live" and "leader 2 is not live" are both "leader is not live")."""
    return " ".join(word for word in reason.split() if not word.strip("[],").isdigit())
