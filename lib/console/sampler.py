"""Throughput and lag over time, sampled in memory while the console runs.

Every `interval_s` a background thread asks the cluster, as each identity the console acts for
(so a user's plots hold only what they may describe): the topics (Metadata), every partition's
log end offset (ListOffsets at each leader), every group's committed offsets (OffsetFetch at each
coordinator; share groups: DescribeShareGroupOffsets); and reads the partitions' bytes on disk
from the root. A bounded history per identity is kept (`keep` samples); nothing is written
anywhere. An outage is logged once when it starts and once when it ends, not at every sample.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass

from topiclake.client import ClientError, admin, groups
from topiclake.client.results import LATEST

from .storage import BucketRoot, DirectoryRoot, topic_bytes
from .access import Access, Identity

log = logging.getLogger(__name__)

TP = tuple[str, int]


@dataclass(frozen=True)
class Sample:
    at: float  # unix seconds
    ends: dict[TP, int]
    topic_bytes: dict[str, int]
    lags: dict[str, dict[TP, int]]  # group -> partition -> lag


class Sampler:
    def __init__(self, access: Access, root: DirectoryRoot | BucketRoot, *, interval_s: float = 5.0, keep: int = 720):
        self.access = access
        self.root = root
        self.interval_s = interval_s
        self.keep = keep
        self._history: dict[str, deque[Sample]] = {}
        self._failing: set[str] = set()  # identities whose last sample failed (logged once)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-sampler", daemon=True)

    def start(self) -> "Sampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            for identity in self.access.identities():
                self.sample(identity)
            self._stop.wait(max(self.interval_s - (time.monotonic() - started), 0.1))

    def sample(self, identity: Identity) -> Sample | None:
        """One sample as `identity`, added to its history (None when the broker failed)."""
        who = identity.name or "console"
        try:
            with identity.client() as client:
                topics = admin.topics(client)
                keys = [(t.name, p.partition) for t in topics for p in t.partitions]
                ends = admin.list_offsets(client, keys, LATEST)
                lags = groups.group_lags(client, groups.list_groups(client), ends)
        except (OSError, ClientError) as exc:
            if who not in self._failing:
                self._failing.add(who)
                log.warning("console samples as %r fail (logged again when they work): %s", who, exc)
            return None
        if who in self._failing:
            self._failing.discard(who)
            log.warning("console samples as %r work again", who)
        sizes = {t.name: topic_bytes(self.root, t.name, [p.partition for p in t.partitions]) for t in topics}
        sample = Sample(time.time(), ends, sizes, lags)
        with self._lock:
            self._history.setdefault(identity.name, deque(maxlen=self.keep)).append(sample)
        return sample

    def history(self, identity: Identity) -> list[Sample]:
        with self._lock:
            return list(self._history.get(identity.name, ()))

    def forget(self, identity: Identity) -> None:
        with self._lock:
            self._history.pop(identity.name, None)


def rates(samples: list[Sample], value) -> list[tuple[float, float]]:
    """Per second between consecutive samples of `value(sample)` (a number): (time, rate)."""
    out = []
    for before, after in zip(samples, samples[1:]):
        dt = after.at - before.at
        if dt > 0:
            out.append((after.at, max(value(after) - value(before), 0) / dt))
    return out


def topic_records(topic: str | None):
    """value() for `rates`: a topic's (or every topic's) summed log end offsets."""
    return lambda s: sum(end for (t, _p), end in s.ends.items() if topic is None or t == topic)


def topic_size(topic: str | None):
    return lambda s: sum(n for t, n in s.topic_bytes.items() if topic is None or t == topic)


def group_lag_series(samples: list[Sample], group: str) -> dict[str, list[tuple[float, float]]]:
    """Per topic: (time, the group's summed lag over its partitions) at each sample that has it."""
    out: dict[str, list[tuple[float, float]]] = {}
    for s in samples:
        per_topic: dict[str, int] = {}
        for (topic, _p), lag in s.lags.get(group, {}).items():
            per_topic[topic] = per_topic.get(topic, 0) + lag
        for topic, lag in per_topic.items():
            out.setdefault(topic, []).append((s.at, float(lag)))
    return out
