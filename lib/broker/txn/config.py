"""`[transactions]` of conf/topiclake.toml: the transaction coordinator's settings (Kafka's
transaction.* broker properties, in milliseconds unless the Kafka name says otherwise)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from topiclake.segments.errors import InvalidConfigError
from topiclake.segments.settings import section_dataclass


@dataclass(frozen=True, slots=True)
class TransactionsConfig:
    state_topic_partitions: int = 50  # transaction.state.log.num.partitions
    state_topic_segment_bytes: int = 100 * 1024 * 1024  # transaction.state.log.segment.bytes
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    abort_check_interval_ms: int = 10_000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    id_expiration_check_interval_ms: int = 3_600_000  # transaction.remove.expired.transaction.cleanup.interval.ms

    @classmethod
    def from_section(cls, values: Mapping[str, Any]) -> "TransactionsConfig":
        config = section_dataclass(cls, "transactions", values)
        names = {f.name for f in dataclasses.fields(cls)}
        for name in names:
            if getattr(config, name) < 1:
                raise InvalidConfigError(f"[transactions] {name} must be at least 1")
        return config
