"""The one error family of the on-disk format and the log: one type per kind of failure.

Every problem with bytes (from a file or a socket) surfaces as CorruptRecordError, which names
where the bytes came from, the byte position and why they are bad, so that a reader of a log
message can go straight to the broken batch. Failures that are not about bad bytes have their
own types: a closed log is LogClosedError, a refused maintenance step maintenance.MaintenanceError
(which names its place as CorruptRecordError does: both are LocatedErrors).
"""

from __future__ import annotations


class TopiclakeError(Exception):
    """Base class of every error topiclake raises on purpose."""


class LocatedError(TopiclakeError):
    """A failure at a known place: `source` is a file path or a description such as "produce
    request"; `position` is the byte offset inside that source (None when unknown)."""

    def __init__(self, reason: str, *, source: str | None = None, position: int | None = None):
        self.reason = reason
        self.source = source
        self.position = position
        super().__init__(self._message())

    def _message(self) -> str:
        where = []
        if self.source is not None:
            where.append(str(self.source))
        if self.position is not None:
            where.append(f"position {self.position}")
        return f"{': '.join([', '.join(where), self.reason]) if where else self.reason}"

    def at(self, *, source: str | None = None, position: int | None = None):
        """The same error with the location filled in (for errors raised deep in a decoder)."""
        return type(self)(
            self.reason,
            source=self.source if self.source is not None else source,
            position=self.position if self.position is not None else position,
        )


class CorruptRecordError(LocatedError):
    """Bytes that are not a valid Kafka record batch / message set (`position`: where the bad
    batch starts)."""


class CorruptLogError(CorruptRecordError):
    """A partition's log is damaged at `offset` (the first offset that cannot be read): a reader
    names the topic, partition and offset besides the file and byte position, and says how to
    repair it (`hint`). Nothing at or past `offset` can be read until the log is repaired."""

    def __init__(self, reason: str, *, topic: str, partition: int, offset: int, source: str | None = None,
                 position: int | None = None):
        self.topic, self.partition, self.offset = topic, partition, offset
        self.hint = (f"nothing from offset {offset} on can be read; see what a repair drops with "
                     f"`topiclake repair-log --topic {topic} --partition {partition} --dry-run` (docs/LAKE.md)")
        super().__init__(reason, source=source, position=position)

    def _message(self) -> str:
        where = f"topic {self.topic!r} partition {self.partition} at offset {self.offset}"
        return f"corrupt log: {where}: {super()._message()}"

    @classmethod
    def of(cls, exc: CorruptRecordError, *, topic: str, partition: int, offset: int) -> "CorruptLogError":
        """`exc` (raised by a walk of one file) as the partition's damage at `offset`."""
        if isinstance(exc, CorruptLogError):
            return exc
        return cls(exc.reason, topic=topic, partition=partition, offset=offset, source=exc.source,
                   position=exc.position)


class LogClosedError(TopiclakeError):
    """An operation on a log after `close` (its partition was deleted, or the broker is stopping)."""


class InvalidTopicError(TopiclakeError):
    """A topic name that Kafka would reject (and that must never reach the file system)."""


class OffsetOutOfRangeError(TopiclakeError):
    """A read asked for an offset outside [log start offset, log end offset]."""


class RecordTooLargeError(TopiclakeError):
    """A batch larger than the topic's max.message.bytes."""


class RecordBatchTooLargeError(RecordTooLargeError):
    """An append larger than segment.bytes: it could never fit in a segment (Kafka's
    RecordBatchTooLargeException, RECORD_LIST_TOO_LARGE on the wire)."""


class InvalidConfigError(TopiclakeError, ValueError):
    """A topic/log config property with an unknown name or a value Kafka would reject."""


class TopicAlreadyExistsError(TopiclakeError):
    """CreateTopics for a name that is already registered."""


class UnknownTopicError(TopiclakeError):
    """A topic (or partition) that is not registered."""


class InvalidPartitionsError(TopiclakeError):
    """A partition count that is not positive, or that would shrink a topic."""


class StorageRootError(TopiclakeError):
    """A storage root that is not a directory, cannot be created or cannot be written."""
