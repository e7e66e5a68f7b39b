"""The object store's figures per broker, read from each broker's Prometheus /metrics.

The counts live in the broker process (topiclake.store.metrics, `topiclake_object_store_*`,
reported by a broker on a bucket root): the console is another process, whose own counts would
be its own requests, so it reads the broker's endpoint, as Prometheus does. Where: the URL each
live broker registers in the root (`metrics` in cluster/brokers/<id>.json), or --broker-metrics.
"""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass, field

PREFIX = "topiclake_object_store_"
TIMEOUT_S = 5.0  # a scrape reads counters in memory: tens of milliseconds


@dataclass
class OperationFigures:
    operation: str
    requests: int = 0
    errors: dict[str, int] = field(default_factory=dict)  # reason -> count
    bytes_read: int | None = None  # None: the operation moves no object bytes that way
    bytes_written: int | None = None
    seconds: float = 0.0  # time spent in requests
    buckets: list[tuple[float, float]] = field(default_factory=list)  # (upper bound, cumulative count)

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    @property
    def mean_ms(self) -> float | None:
        return self.seconds / self.requests * 1000 if self.requests else None

    def quantile_ms(self, q: float) -> float | None:
        """The upper bound of the histogram bucket holding quantile `q` (as coarse as the buckets);
        None without requests or when it is past the last finite bound."""
        if not self.requests or not self.buckets:
            return None
        wanted = q * self.buckets[-1][1]
        bound = next(b for b, cumulative in self.buckets if cumulative >= wanted)
        return None if bound == float("inf") else bound * 1000


@dataclass
class BrokerObjectStore:
    url: str
    operations: list[OperationFigures]  # empty: the broker reports no object store (a file root)
    error: str | None = None  # the endpoint did not answer


def parse(text: str) -> list[OperationFigures]:
    """The object-store series of a Prometheus text exposition, per operation (in its order)."""
    from prometheus_client.parser import text_string_to_metric_families

    ops: dict[str, OperationFigures] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(PREFIX):
            continue
        for s in family.samples:
            op = s.labels.get("operation")
            if op is None:
                continue
            figures = ops.setdefault(op, OperationFigures(op))
            if s.name == PREFIX + "requests_total":
                figures.requests = int(s.value)
            elif s.name == PREFIX + "errors_total":
                figures.errors[s.labels["reason"]] = int(s.value)
            elif s.name == PREFIX + "bytes_total":
                if s.labels.get("direction") == "read":
                    figures.bytes_read = int(s.value)
                else:
                    figures.bytes_written = int(s.value)
            elif s.name == PREFIX + "request_seconds_sum":
                figures.seconds = s.value
            elif s.name == PREFIX + "request_seconds_bucket":
                figures.buckets.append((float(s.labels["le"]), s.value))
    for figures in ops.values():
        figures.buckets.sort()
    return list(ops.values())


def read(url: str, timeout_s: float = TIMEOUT_S) -> BrokerObjectStore:
    """One broker's figures (blocking: a worker thread); an endpoint that fails is reported, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:  # noqa: S310 - http(s) from the registration
            return BrokerObjectStore(url, parse(answer.read().decode()))
    except (OSError, ValueError) as exc:  # refused, timed out, HTTP error, not Prometheus' text
        return BrokerObjectStore(url, [], error=str(getattr(exc, "reason", None) or exc))


def read_all(urls: list[str]) -> list[BrokerObjectStore]:
    return [read(url) for url in urls]
