"""Per-API request counters: requests by version, the error codes responses carry, and a latency
histogram (Kafka's RequestMetrics: RequestsPerSec, ErrorsPerSec, TotalTimeMs).

Plain ints in dicts, updated on the event loop by the connection after each response and read at
scrape time (`metrics.py`): no lock and no metrics-library object on the request path. The error
codes of a response are counted as Kafka's `AbstractResponse.errorCounts` does: every `error_code`
field of the response, at every level (one per partition of a Produce answer, NONE included).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import typing
from typing import Any

# Upper bounds (seconds) of the latency buckets: sub-millisecond requests up to long-polled
# fetches and parked JoinGroups.
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ApiStats:
    """One API's counters."""

    __slots__ = ("requests", "buckets", "latency_sum", "latency_count")

    def __init__(self) -> None:
        self.requests: dict[int, int] = {}  # version -> requests
        self.buckets = [0] * (len(LATENCY_BUCKETS_S) + 1)  # per bucket (not cumulative); the last: +Inf
        self.latency_sum = 0.0
        self.latency_count = 0

    def cumulative_buckets(self) -> list[tuple[float, int]]:
        """(upper bound, requests at or below it), +Inf last: a Prometheus histogram's buckets."""
        total, out = 0, []
        for bound, count in zip(LATENCY_BUCKETS_S + (float("inf"),), self.buckets):
            total += count
            out.append((bound, total))
        return out


class RequestMetrics:
    def __init__(self) -> None:
        self.apis: dict[int, ApiStats] = {}  # api key -> its counters
        self.errors: dict[tuple[int, int], int] = {}  # (api key, error code) -> occurrences in responses

    def record(self, api_key: int, version: int, seconds: float, response: Any) -> None:
        """One request answered (`response` None: none was sent, acks=0) after `seconds`."""
        stats = self.apis.get(api_key)
        if stats is None:
            stats = self.apis[api_key] = ApiStats()
        stats.requests[version] = stats.requests.get(version, 0) + 1
        stats.buckets[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        stats.latency_sum += seconds
        stats.latency_count += 1
        if response is not None:
            _count_error_codes(response, api_key, self.errors)


def _count_error_codes(entity: Any, api_key: int, into: dict[tuple[int, int], int]) -> None:
    codes, singles, arrays = _error_plan(type(entity))
    for name in codes:
        key = (api_key, int(getattr(entity, name)))
        into[key] = into.get(key, 0) + 1
    for name in singles:
        value = getattr(entity, name)
        if value is not None:
            _count_error_codes(value, api_key, into)
    for name in arrays:
        for value in getattr(entity, name) or ():
            _count_error_codes(value, api_key, into)


@functools.cache
def _error_plan(cls: type) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Of a kio schema class: its error-code fields, its nested structs and its arrays of structs
    that (at some depth) hold error codes. Worked out once per class from the type hints."""
    from kio.schema.errors import ErrorCode

    codes, singles, arrays = [], [], []
    for name, hint in typing.get_type_hints(cls).items():
        is_array = typing.get_origin(hint) is tuple
        inner = hint
        for _ in range(3):  # unwrap tuple[X, ...] and X | None
            args = [a for a in typing.get_args(inner) if a is not type(None) and a is not Ellipsis]
            if not args or dataclasses.is_dataclass(inner):
                break
            is_array = is_array or typing.get_origin(inner) is tuple
            inner = args[0]
        if inner is ErrorCode and not is_array:
            codes.append(name)
        elif isinstance(inner, type) and dataclasses.is_dataclass(inner) and any(_error_plan(inner)):
            (arrays if is_array else singles).append(name)
    return tuple(codes), tuple(singles), tuple(arrays)
