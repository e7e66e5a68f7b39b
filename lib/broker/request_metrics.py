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
from typing import Any, Callable

from .encoded import PreEncoded

# Upper bounds (seconds) of the latency buckets: sub-millisecond requests up to long-polled
# fetches and parked JoinGroups.
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ApiStats:
    """One API's counters."""

    __slots__ = ("requests", "errors", "buckets", "latency_sum", "latency_count")

    def __init__(self) -> None:
        self.requests: dict[int, int] = {}  # version -> requests
        self.errors: dict[int, int] = {}  # error code -> occurrences in responses
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

    def record(self, api_key: int, version: int, seconds: float, response: Any) -> None:
        """One request answered (`response` None: none was sent, acks=0) after `seconds`."""
        stats = self.apis.get(api_key)
        if stats is None:
            stats = self.apis[api_key] = ApiStats()
        stats.requests[version] = stats.requests.get(version, 0) + 1
        stats.buckets[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        stats.latency_sum += seconds
        stats.latency_count += 1
        if type(response) is PreEncoded:
            for code, count in response.error_counts.items():
                stats.errors[code] = stats.errors.get(code, 0) + count
        elif response is not None:
            _error_counter(type(response))(response, stats.errors)


@functools.cache
def _error_counter(cls: type) -> Callable[[Any, dict], None]:
    """A function counting the error codes of a `cls` response: nested loops over its arrays down
    to each error-code field, generated once per class (a generic recursive walk cost ~5 us per
    Produce response, a few percent of a small request's handling; this is a fraction of it).
    `+ 0` turns kio's ErrorCode (an IntEnum, whose hash is a Python-level call) into a plain int."""
    lines = ["def count(e0, into):"]

    def walk(cls: type, var: str, depth: int) -> None:
        codes, singles, arrays = _error_plan(cls)
        pad = "    " * depth
        for name in codes:
            lines.append(f"{pad}code = {var}.{name} + 0; into[code] = into.get(code, 0) + 1")
        for name in singles:
            inner = f"e{depth}"
            lines.append(f"{pad}{inner} = {var}.{name}")
            lines.append(f"{pad}if {inner} is not None:")
            walk(_element(cls, name), inner, depth + 1)
        for name in arrays:
            inner = f"e{depth}"
            lines.append(f"{pad}for {inner} in {var}.{name} or ():")
            walk(_element(cls, name), inner, depth + 1)

    walk(cls, "e0", 1)
    lines.append("    return None")
    namespace: dict[str, Any] = {}
    exec("\n".join(lines), namespace)  # noqa: S102  (source built from the schema's field names only)
    return namespace["count"]


def _element(cls: type, name: str) -> type:
    """The struct class of a nested field (X, X | None or tuple[X, ...])."""
    hint = typing.get_type_hints(cls)[name]
    for _ in range(3):
        args = [a for a in typing.get_args(hint) if a is not type(None) and a is not Ellipsis]
        if not args or dataclasses.is_dataclass(hint):
            break
        hint = args[0]
    return hint


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
