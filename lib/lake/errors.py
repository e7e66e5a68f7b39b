"""Errors of the lake jobs. Each names the table, topic, partition and offsets involved, so a
failed Airflow task's log says what to look at without opening the code."""

from __future__ import annotations

from topiclake.segments.errors import TopiclakeError


class LakeError(TopiclakeError):
    """Base class of the lake's own errors."""


class DataLossError(LakeError):
    """Offsets that should be read next were deleted (retention) before they were ingested."""

    def __init__(self, topic: str, partition: int, first: int, end: int):
        self.topic, self.partition, self.first, self.end = topic, partition, first, end
        super().__init__(
            f"data loss in topic {topic!r} partition {partition}: offsets [{first}, {end}) were deleted "
            f"(retention) before they were ingested; the log now starts at {end}. Rerun with "
            f"--allow-data-loss to record the gap and continue from offset {end}")


class ConcurrentWriterError(LakeError):
    """Another writer committed offsets of the same group/partitions after this run planned."""


class SegmentChangedError(LakeError):
    """A segment file was replaced (compaction swap) or deleted between planning and reading."""


class OffsetSpecError(LakeError, ValueError):
    """A --starting-offsets / --ending-offsets value that cannot be understood."""


class UsageError(LakeError, ValueError):
    """A command-line value that cannot work (a bad flag, an unknown topic, a storage root that
    does not exist, a backfill range outside what was ingested). `hint` says what to do."""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.hint = hint
