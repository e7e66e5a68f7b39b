"""`[share]` of conf/topiclake.toml: share groups (KIP-932). Kafka's group.share.* broker
properties (the group coordinator's side) and share.coordinator.* ones (`__share_group_state`),
in milliseconds unless the Kafka name says otherwise; Kafka's defaults and bounds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from topiclake.segments.errors import InvalidConfigError
from topiclake.segments.settings import section_dataclass


@dataclass(frozen=True, slots=True)
class ShareConfig:
    # Acquisition locks (group.share.record.lock.duration.ms and its bounds; a group's
    # share.record.lock.duration.ms must lie within the bounds).
    record_lock_duration_ms: int = 30_000
    min_record_lock_duration_ms: int = 15_000
    max_record_lock_duration_ms: int = 60_000
    # Deliveries of one record before it is archived (group.share.delivery.count.limit).
    delivery_count_limit: int = 5
    min_delivery_count_limit: int = 2
    max_delivery_count_limit: int = 10
    # Records in a share-partition's in-flight window (group.share.partition.max.record.locks).
    partition_max_record_locks: int = 2_000
    min_partition_max_record_locks: int = 100
    max_partition_max_record_locks: int = 10_000
    # Members (group.share.session.timeout.ms, group.share.heartbeat.interval.ms, bounds, max size).
    session_timeout_ms: int = 45_000
    min_session_timeout_ms: int = 45_000
    max_session_timeout_ms: int = 60_000
    heartbeat_interval_ms: int = 5_000
    min_heartbeat_interval_ms: int = 5_000
    max_heartbeat_interval_ms: int = 15_000
    max_size: int = 200  # group.share.max.size
    # Open share sessions (fetch contexts) the broker keeps (group.share.max.share.sessions).
    max_share_sessions: int = 2_000
    # __share_group_state (share.coordinator.state.topic.*): partitions fixed once it exists.
    state_topic_partitions: int = 50
    state_topic_segment_bytes: int = 100 * 1024 * 1024
    snapshot_update_records_per_snapshot: int = 500
    state_topic_prune_interval_ms: int = 300_000
    # How often acquisition locks and member sessions are checked.
    tick_interval_ms: int = 100

    def __post_init__(self) -> None:
        for low, value, high in (
                ("min_record_lock_duration_ms", "record_lock_duration_ms", "max_record_lock_duration_ms"),
                ("min_delivery_count_limit", "delivery_count_limit", "max_delivery_count_limit"),
                ("min_partition_max_record_locks", "partition_max_record_locks", "max_partition_max_record_locks"),
                ("min_session_timeout_ms", "session_timeout_ms", "max_session_timeout_ms"),
                ("min_heartbeat_interval_ms", "heartbeat_interval_ms", "max_heartbeat_interval_ms")):
            lo, v, hi = getattr(self, low), getattr(self, value), getattr(self, high)
            if not 0 < lo <= v <= hi:
                raise InvalidConfigError(f"[share] {value} = {v} must lie within {low} = {lo} and {high} = {hi}")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise InvalidConfigError("[share] heartbeat_interval_ms must be less than session_timeout_ms")
        for name in ("max_size", "max_share_sessions", "state_topic_partitions", "state_topic_segment_bytes",
                     "snapshot_update_records_per_snapshot", "state_topic_prune_interval_ms", "tick_interval_ms"):
            if getattr(self, name) < 1:
                raise InvalidConfigError(f"[share] {name} must be at least 1")

    @classmethod
    def from_section(cls, values: Mapping[str, Any]) -> "ShareConfig":
        return section_dataclass(cls, "share", values)
