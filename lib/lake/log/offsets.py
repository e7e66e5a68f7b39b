"""Where a new consumer group starts and where a run stops: --starting-offsets/--ending-offsets.

Spark's Kafka source spellings: `earliest`, `latest`, or JSON per topic and partition
(`{"orders": {"0": 23, "1": -2}}`, -2 = earliest, -1 = latest); for starting offsets also an
ISO-8601 time (`2024-05-01T00:00:00Z`, naive means UTC): each partition starts at its first
record with a timestamp at or after it (Kafka's ListOffsets by time). Partitions a JSON value
does not name start at the earliest offset and stop at the latest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Mapping

from topiclake.segments.read_constants import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

from ..errors import OffsetSpecError

EARLIEST, LATEST = EARLIEST_TIMESTAMP, LATEST_TIMESTAMP  # Spark's Kafka source spells them as ListOffsets does


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    default: int = EARLIEST  # EARLIEST or LATEST for partitions not named
    offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)
    timestamp_ms: int | None = None

    def resolve(self, topic: str, partition: int) -> tuple[str, int]:
        """("offset", n), ("earliest", -2), ("latest", -1) or ("time", ms) for one partition."""
        if self.timestamp_ms is not None:
            return "time", self.timestamp_ms
        value = self.offsets.get((topic, partition), self.default)
        if value == EARLIEST:
            return "earliest", value
        if value == LATEST:
            return "latest", value
        return "offset", value


def parse_offset_spec(text: str | None, *, default: int, allow_time: bool) -> OffsetSpec:
    name = "--starting-offsets" if allow_time else "--ending-offsets"
    if text is None or text.strip() == "":
        return OffsetSpec(default)
    text = text.strip()
    if text == "earliest":
        if not allow_time:
            raise OffsetSpecError(f"{name}: 'earliest' makes no sense as an end; use 'latest' or JSON")
        return OffsetSpec(EARLIEST)
    if text == "latest":
        return OffsetSpec(LATEST)
    if text.startswith("{"):
        return OffsetSpec(default, _parse_json(text, name))
    if allow_time:
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            pass
        else:
            if when.tzinfo is None:
                when = when.replace(tzinfo=timezone.utc)
            return OffsetSpec(default, timestamp_ms=int(when.timestamp() * 1000))
    raise OffsetSpecError(f"{name} {text!r}: expected earliest, latest, JSON such as "
                          '{"topic": {"0": 42}}' + (" or an ISO-8601 time" if allow_time else ""))


def _parse_json(text: str, name: str) -> dict[tuple[str, int], int]:
    try:
        obj = json.loads(text)
        out = {}
        for topic, partitions in obj.items():
            for partition, offset in partitions.items():
                offset = int(offset)
                if offset < EARLIEST:
                    raise ValueError(f"offset {offset} of {topic}/{partition} (use -2 earliest, -1 latest)")
                out[(str(topic), int(partition))] = offset
        return out
    except (ValueError, AttributeError, TypeError) as exc:
        raise OffsetSpecError(f"{name}: bad JSON offsets ({exc})") from None
