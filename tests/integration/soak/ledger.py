"""What the soak's clients were told, recorded as it happens: the source of truth the checker
judges the log, the tables and the group offsets against.

Thread-safe: delivery callbacks, consumer threads and the offsets observer all write here.
Every acknowledged record also goes to `<work>/ledger.jsonl` as it is acknowledged, so a failed
soak can be read back after the fact.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Ack:
    """A record the broker acknowledged (acks=all): where it says the record is."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    txn: int | None  # the transaction it was produced in (transactional producer only)
    produced_at: float  # time.monotonic() of produce()
    acked_at: float  # time.monotonic() of the delivery report


@dataclass(frozen=True, slots=True)
class OffsetSample:
    """A group's committed offset for one partition: acknowledged to a member (`commits`) or read
    back from the broker (`observations`, `at` = when the request was sent)."""

    at: float
    group: str
    topic: str
    partition: int
    offset: int


@dataclass(slots=True)
class Ledger:
    path: Path | None = None
    acks: list[Ack] = field(default_factory=list)
    sent: dict[bytes, int | None] = field(default_factory=dict)  # every value produced -> its transaction
    delivery_errors: list[tuple[str, bytes, str]] = field(default_factory=list)  # (topic, value, error)
    fatal_errors: list[str] = field(default_factory=list)
    txn_outcomes: dict[int, str] = field(default_factory=dict)  # committed | aborted | unknown
    commits: list[OffsetSample] = field(default_factory=list)
    commit_failures: int = 0
    observations: list[OffsetSample] = field(default_factory=list)
    consumed: dict[tuple[str, int, int], tuple[bytes | None, bytes]] = field(default_factory=dict)
    consumed_count: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _file: object = None

    def __post_init__(self):
        if self.path is not None:
            self._file = open(self.path, "a", encoding="ascii")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def produced(self, value: bytes, txn: int | None = None) -> float:
        with self._lock:
            self.sent[value] = txn
        return time.monotonic()

    def delivered(self, err, msg, produced_at: float, txn: int | None = None) -> None:
        """A confluent-kafka delivery report."""
        with self._lock:
            if err is not None:
                self.delivery_errors.append((msg.topic(), msg.value(), str(err)))
                return
            ack = Ack(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), txn, produced_at,
                      time.monotonic())
            self.acks.append(ack)
            if self._file is not None:
                row = asdict(ack)
                row["key"] = None if ack.key is None else ack.key.decode("latin-1")
                row["value"] = ack.value.decode("latin-1")
                self._file.write(json.dumps(row) + "\n")

    def fatal(self, who: str, err) -> None:
        with self._lock:
            self.fatal_errors.append(f"{who}: {err}")

    def transaction_ended(self, txn: int, outcome: str) -> None:
        with self._lock:
            self.txn_outcomes[txn] = outcome

    def committed(self, group: str, partitions) -> None:
        """What OffsetCommit acknowledged to a member (TopicPartitions without error)."""
        now = time.monotonic()
        with self._lock:
            for tp in partitions:
                if tp.error is None and tp.offset >= 0:
                    self.commits.append(OffsetSample(now, group, tp.topic, tp.partition, tp.offset))

    def commit_failed(self) -> None:
        with self._lock:
            self.commit_failures += 1

    def observed(self, at: float, group: str, offsets: list[tuple[str, int, int]]) -> None:
        """(topic, partition, offset) as OffsetFetch returned them, asked at `at`."""
        with self._lock:
            self.observations.extend(OffsetSample(at, group, t, p, o) for t, p, o in offsets if o >= 0)

    def consumed_record(self, msg) -> None:
        with self._lock:
            self.consumed[(msg.topic(), msg.partition(), msg.offset())] = (msg.key(), msg.value())
            self.consumed_count += 1
