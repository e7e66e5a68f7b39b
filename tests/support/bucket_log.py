"""A topic's log put into a bucket the way leaders write it (topiclake.objectlog), without a broker:
the topic object, each partition's epoch fence, flush objects, seals into closed segments and
manifests, and a fenced leader's late write. For the lake's tests on object-store roots."""

from __future__ import annotations

import time

import pytest

from topiclake.objectlog.fence import BucketFence, LeaderFenced
from topiclake.objectlog.flush import flush
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.reader import read_log, view_partition
from topiclake.objectlog.seal import seal_tail
from topiclake.segments.config import LogConfig
from topiclake.segments.storage import TopicMeta
from topiclake.store.objects import CREATE, ObjectStore

from tests.support.bucket_batches import batches, keyed_batches

# An index entry per batch: a closed segment splits into as many tasks as the target allows.
SEAL_CONFIG = LogConfig.from_properties({"index.interval.bytes": "1"})


def deadline() -> float:
    return time.monotonic() + 10


def create_topic(store: ObjectStore, topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
    """topics/<topic>.json, as a file root's topic file (`config`: its overrides, Kafka's names)."""
    store.put(f"topics/{topic}.json", TopicMeta(topic, partitions, dict(config or {}), f"id-{topic}").to_json(),
              mode=CREATE)


class BucketPartitionWriter:
    """One partition's leader, epoch by epoch: `flush` appends batches of `per_batch` records with
    values `<tag>-<offset>`; `seal` makes the tail a closed segment; `take_over` starts a new epoch
    from the bucket alone, as a broker on another machine would."""

    def __init__(self, store: ObjectStore, topic: str, partition: int):
        self.store = store
        self.keys = PartitionKeys(topic, partition)
        self.fence = BucketFence(store, self.keys)
        self.epoch = -1
        self.next_offset = 0

    def take_over(self) -> "BucketPartitionWriter":
        current = self.fence.current_epoch()
        self.epoch = 0 if current is None else current + 1
        self.fence.begin_takeover(self.epoch)
        ends = [batch.next_offset for batch in read_log(self.store, self.keys)]
        self.next_offset = ends[-1] if ends else 0
        self.fence.record_start(self.epoch, self.next_offset)
        return self

    def flush(self, count: int, *, tag: str, per_batch: int = 2) -> range:
        first = self.next_offset
        flush(self.fence, first, self.epoch, batches(first, count, epoch=self.epoch, per_batch=per_batch, tag=tag),
              deadline=deadline())
        self.next_offset += count * per_batch
        return range(first, self.next_offset)

    def flush_changes(self, changes, *, per_batch: int = 2) -> range:
        """`changes` (key, value; None a tombstone) appended as batches of up to `per_batch` records."""
        first = self.next_offset
        flush(self.fence, first, self.epoch, keyed_batches(first, changes, epoch=self.epoch, per_batch=per_batch),
              deadline=deadline())
        self.next_offset += len(changes)
        return range(first, self.next_offset)

    def late_write(self, count: int, *, tag: str) -> None:
        """A paused leader of this (now fenced) epoch wakes up and flushes: its fence check fails."""
        with pytest.raises(LeaderFenced):
            flush(self.fence, self.next_offset, self.epoch, batches(self.next_offset, count, epoch=self.epoch, tag=tag),
                  deadline=deadline())

    def seal(self) -> None:
        sealed = seal_tail(self.store, view_partition(self.store, self.keys), self.epoch, config=SEAL_CONFIG,
                           deadline=deadline())
        assert sealed is not None


def sealed_log(store: ObjectStore, topic: str, segments: int) -> BucketPartitionWriter:
    """Partition 0 of `topic`: `segments` closed segments of 4 offsets each, then a tail of 4 more."""
    writer = BucketPartitionWriter(store, topic, 0).take_over()
    for _ in range(segments):
        writer.flush(2, tag="v")
        writer.seal()
    writer.flush(2, tag="v")
    return writer
