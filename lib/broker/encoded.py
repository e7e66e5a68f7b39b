"""A response body its handler encoded itself (see `PreEncoded`): below both the wire, which frames
it, and the request metrics, which count its error codes. An authorization policy that merges
refusals into a handler's answer needs kio objects instead: it says so for the handler's call
(`objects_wanted`), and a handler that may pre-encode asks `pre_encoding_allowed()`."""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Any, Iterator

_OBJECTS_WANTED = contextvars.ContextVar("topiclake_response_objects_wanted", default=False)


@contextlib.contextmanager
def objects_wanted() -> Iterator[None]:
    """Within this (the handler's call, in the same task), answers are kio objects."""
    token = _OBJECTS_WANTED.set(True)
    try:
        yield
    finally:
        _OBJECTS_WANTED.reset(token)


def pre_encoding_allowed() -> bool:
    return not _OBJECTS_WANTED.get()


@dataclass(frozen=True, slots=True)
class PreEncoded:
    """A response body its handler encoded itself, where kio's objects and writers cost too much
    (a Fetch naming 2,000 partitions: ~20 us a partition; a Produce of one partition: ~25 us of
    a small request). Its throttle_time_ms field is kept apart so the connection can still replace
    it (`dataclasses.replace`); `before_throttle` is the body before it (empty for a Fetch, whose
    first field it is; a Produce's topics) and `rest` the body after it, bytes and FileRegions in
    order; `error_counts` (code -> occurrences) is what the request metrics count, as they count a
    kio response's error_code fields."""

    throttle_time: Any  # datetime.timedelta, as kio's field
    flexible_header: bool  # response header v1 (a tagged-field buffer after the correlation id)
    rest: tuple
    error_counts: dict
    before_throttle: tuple = ()
