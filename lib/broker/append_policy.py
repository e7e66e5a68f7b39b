"""Topic-config rules a produced batch must meet before it is appended (the config-dependent
checks of Kafka's Partition.appendRecordsToLeader and LogValidator).

- min.insync.replicas: acks=all needs that many in-sync replicas; a partition here has one, so
  a larger value is NOT_ENOUGH_REPLICAS for acks=all (acks 0/1 do not wait for replicas).
- message.timestamp.before.max.ms / after.max.ms: with CreateTime, every record's timestamp must
  lie within [now - before, now + after], else the batch is INVALID_TIMESTAMP with the offending
  records listed. The batch header's max timestamp settles the common case (no "before" limit,
  nothing in the future) without decoding records.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from topiclake.segments.batch import NO_TIMESTAMP, BatchHeader, RecordBatch
from topiclake.segments.config import LONG_MAX, LogConfig

from .errors import BrokerError

IN_SYNC_REPLICAS = 1  # the leader is the only replica
ACKS_ALL = -1


class NotEnoughReplicas(BrokerError):
    code = ErrorCode.not_enough_replicas


class InvalidTimestamp(BrokerError):
    """`record_errors`: (index of the record in its batch, message) for the produce response."""

    code = ErrorCode.invalid_timestamp

    def __init__(self, message: str, record_errors: list[tuple[int, str]]):
        super().__init__(message)
        self.record_errors = record_errors


def check_append(config: LogConfig, header: BatchHeader, data: bytes, acks: int, now_ms: int, where: str) -> None:
    if acks == ACKS_ALL and config.min_insync_replicas > IN_SYNC_REPLICAS:
        raise NotEnoughReplicas(f"{where}: min.insync.replicas={config.min_insync_replicas} but the partition has "
                                f"{IN_SYNC_REPLICAS} in-sync replica")
    if config.log_append_time:
        return  # the broker stamps the batch itself
    earliest = now_ms - config.message_timestamp_before_max_ms if config.message_timestamp_before_max_ms < LONG_MAX \
        else None
    latest = now_ms + config.message_timestamp_after_max_ms
    if earliest is None and header.max_timestamp <= latest:
        return
    low = earliest if earliest is not None else -LONG_MAX
    errors = [(i, f"timestamp {r.timestamp} of the record at offset delta {i} is out of range: it should be "
                  f"within [{low}, {latest}]")
              for i, r in enumerate(RecordBatch(header, data, 0, where).records())
              if r.timestamp != NO_TIMESTAMP and not low <= r.timestamp <= latest]
    if errors:
        raise InvalidTimestamp(f"{where}: {len(errors)} record(s) rejected for an invalid timestamp "
                               "(message.timestamp.before.max.ms / message.timestamp.after.max.ms)", errors)


def plain_timestamp_bound(config: LogConfig, acks: int, now_ms: int) -> int | None:
    """The largest header max timestamp with which `check_append` passes on its first checks (the
    usual topic: no replicas wanted beyond the leader, no lower timestamp bound), so a request's
    batches are compared with one number, not each asked; None: ask `check_append` for each."""
    if acks == ACKS_ALL and config.min_insync_replicas > IN_SYNC_REPLICAS:
        return None
    if config.log_append_time:
        return LONG_MAX  # any timestamp: the broker stamps the batch
    if config.message_timestamp_before_max_ms < LONG_MAX:
        return None
    return now_ms + config.message_timestamp_after_max_ms
