"""What the object store costs and how it fails, per operation (get, get_range, head, put, list,
delete): requests, errors by reason, bytes read and written, and a latency histogram.

Counted in plain ints under one lock (ObjectStore calls come from worker threads and from the
event loop alike) and turned into Prometheus families only when scraped:

    topiclake_object_store_requests_total{operation}
    topiclake_object_store_errors_total{operation,reason}        reason: ObjectStoreError.reason
    topiclake_object_store_bytes_total{operation,direction}      direction: read | written
    topiclake_object_store_request_seconds{operation}            histogram

Every ObjectStore of a process counts into `process_metrics()` unless given its own. A /metrics
endpoint adds them with one call, `registry.register(process_metrics().collector())`; the console
shows `snapshot()`.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any, Iterable

OPERATIONS = ("get", "get_range", "head", "put", "list", "delete")
# Upper bounds (seconds): a loopback request takes about a millisecond, a large object or a
# retried one seconds (the client gives up after its retry budget, well under 30 s).
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(slots=True)
class OperationStats:
    requests: int = 0
    errors: dict[str, int] = field(default_factory=dict)  # reason -> count
    bytes_read: int = 0
    bytes_written: int = 0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))  # +Inf last
    seconds: float = 0.0

    def cumulative_buckets(self) -> list[tuple[float, int]]:
        """(upper bound, requests at or below it), +Inf last: a Prometheus histogram's buckets."""
        return list(zip(LATENCY_BUCKETS_S + (float("inf"),), itertools.accumulate(self.buckets)))


class ObjectStoreMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats = {operation: OperationStats() for operation in OPERATIONS}

    def record(self, operation: str, seconds: float, *, bytes_read: int = 0, bytes_written: int = 0,
               error: str | None = None) -> None:
        """One request of `operation` ended after `seconds` (`error`: the failure's reason)."""
        with self._lock:
            stats = self._stats[operation]
            stats.requests += 1
            stats.bytes_read += bytes_read
            stats.bytes_written += bytes_written
            stats.buckets[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
            stats.seconds += seconds
            if error is not None:
                stats.errors[error] = stats.errors.get(error, 0) + 1

    def _copy(self) -> dict[str, OperationStats]:
        with self._lock:
            return {op: OperationStats(s.requests, dict(s.errors), s.bytes_read, s.bytes_written, list(s.buckets),
                                       s.seconds)
                    for op, s in self._stats.items()}

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Per operation: requests, errors (reason -> count), bytes_read, bytes_written, seconds
        (total time in requests) and mean_seconds: plain values for the console."""
        return {op: {"requests": s.requests, "errors": s.errors, "bytes_read": s.bytes_read,
                     "bytes_written": s.bytes_written, "seconds": s.seconds,
                     "mean_seconds": s.seconds / s.requests if s.requests else None}
                for op, s in self._copy().items()}

    def families(self) -> Iterable[Any]:
        """The Prometheus metric families of the counts now (for a collector's collect())."""
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
        from prometheus_client.utils import floatToGoString

        stats = self._copy()
        requests = CounterMetricFamily("topiclake_object_store_requests", "Object-store requests, by operation.",
                                       labels=["operation"])
        errors = CounterMetricFamily("topiclake_object_store_errors",
                                     "Object-store requests that failed, by operation and reason "
                                     "(not_found, exists, precondition, unavailable, denied, ...).",
                                     labels=["operation", "reason"])
        transferred = CounterMetricFamily("topiclake_object_store_bytes",
                                          "Object bytes read (get, get_range) and written (put).",
                                          labels=["operation", "direction"])
        latency = HistogramMetricFamily("topiclake_object_store_request_seconds",
                                        "Object-store request time, retries included, by operation.",
                                        labels=["operation"])
        for op, s in stats.items():
            requests.add_metric([op], s.requests)
            for reason, count in sorted(s.errors.items()):
                errors.add_metric([op, reason], count)
            if op in ("get", "get_range"):
                transferred.add_metric([op, "read"], s.bytes_read)
            if op == "put":
                transferred.add_metric([op, "written"], s.bytes_written)
            latency.add_metric([op], [(floatToGoString(b), c) for b, c in s.cumulative_buckets()], s.seconds)
        return [requests, errors, transferred, latency]

    def collector(self) -> "ObjectStoreCollector":
        return ObjectStoreCollector(self)


class ObjectStoreCollector:
    """A prometheus_client collector over ObjectStoreMetrics."""

    def __init__(self, metrics: ObjectStoreMetrics):
        self.metrics = metrics

    def collect(self) -> Iterable[Any]:
        yield from self.metrics.families()


_PROCESS_METRICS = ObjectStoreMetrics()


def process_metrics() -> ObjectStoreMetrics:
    """The counts every ObjectStore of this process adds to unless given its own."""
    return _PROCESS_METRICS
