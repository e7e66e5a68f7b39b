"""`[groups]` of conf/topiclake.toml: the group coordinator's settings (Kafka's group.* and
offsets.* broker properties, in milliseconds unless the Kafka name says otherwise)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from topiclake.segments.errors import InvalidConfigError
from topiclake.segments.settings import section_dataclass

from .classic import ClassicGroupSettings
from .migration import MigrationPolicy


@dataclass(frozen=True, slots=True)
class GroupsConfig:
    offsets_topic_partitions: int = 50  # offsets.topic.num.partitions
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024  # offsets.topic.segment.bytes
    offsets_retention_minutes: int = 10080  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size
    # KIP-848 (ConsumerGroupHeartbeat) groups
    consumer_session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    consumer_heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    # group.consumer.migration.policy: bidirectional | upgrade | downgrade | disabled (KIP-848
    # online migration of non-empty groups between the classic and the consumer protocol)
    consumer_migration_policy: str = "bidirectional"
    tick_interval_ms: int = 100  # how often session/rebalance deadlines are checked

    def classic(self) -> ClassicGroupSettings:
        return ClassicGroupSettings(
            min_session_timeout_ms=self.min_session_timeout_ms, max_session_timeout_ms=self.max_session_timeout_ms,
            initial_rebalance_delay_ms=self.initial_rebalance_delay_ms, max_size=self.max_size,
            offsets_retention_ms=self.offsets_retention_minutes * 60_000)

    @classmethod
    def from_section(cls, values: Mapping[str, Any]) -> "GroupsConfig":
        config = section_dataclass(cls, "groups", values)
        if config.offsets_topic_partitions < 1:
            raise InvalidConfigError("[groups] offsets_topic_partitions must be at least 1")
        config.migration_policy()  # refuses an unknown policy at start
        return config

    def migration_policy(self) -> MigrationPolicy:
        return MigrationPolicy.parse(self.consumer_migration_policy)
