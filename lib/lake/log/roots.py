"""The log a job reads, on either kind of storage root: a directory (segment files, log/source.py
and log/plan.py) or an object-store root (objectlog's layout, log/bucket.py). Both answer the same
questions, so ingest plans, runs and commits the same way on either:

    topic(name) / partitions(topic)   the registered topic and its partitions
    plan(topic, partition, ...)       a PartitionPlan whose tasks decode.read_task reads
    metrics_root                      where runs and quality results are recorded (the root itself)
    delta_storage_options             what deltalake needs for the root's tables
"""

from __future__ import annotations

from pathlib import Path

from topiclake.segments.storage import StorageLayout, TopicMeta, TopicRegistry

from .offsets import OffsetSpec
from .plan import PartitionPlan, plan_partition
from .source import list_partition


class FileLog:
    """A directory root: exactly what the jobs did before object-store roots."""

    is_bucket = False

    def __init__(self, root: Path):
        self.root = Path(root)
        self.layout = StorageLayout(self.root)
        self.metrics_root: Path | None = self.root
        self.delta_storage_options: dict[str, str] | None = None

    def topic(self, name: str) -> TopicMeta:
        return TopicRegistry(self.layout).get(name)

    def partitions(self, topic: str) -> list[int]:
        return list(range(self.topic(topic).partitions))

    def plan(self, topic: str, partition: int, *, table_uri: str, committed: int | None, starting: OffsetSpec,
             ending: OffsetSpec, target_task_bytes: int, allow_data_loss: bool) -> PartitionPlan:
        return plan_partition(list_partition(self.layout, topic, partition), table_uri=table_uri, committed=committed,
                              starting=starting, ending=ending, target_task_bytes=target_task_bytes,
                              allow_data_loss=allow_data_loss)


class BucketLog:
    """An object-store root (topiclake.store's S3Root): partitions in objectlog's layout, topics
    as topics/<topic>.json objects, tables under tables/."""

    is_bucket = True

    def __init__(self, root):
        from topiclake.store.objects import ObjectStore

        self.root = root
        self.store = ObjectStore(root)
        self.layout = None  # no broker registrations on a bucket yet
        self.metrics_root = root  # run records and quality results under metrics/ and quality/, as on a directory
        self.delta_storage_options = root.delta_storage_options()

    def topic(self, name: str) -> TopicMeta:
        from .bucket import bucket_topic

        return bucket_topic(self.store, name)

    def topics(self) -> dict[str, TopicMeta]:
        from .bucket import bucket_topics

        return bucket_topics(self.store)

    def partitions(self, topic: str) -> list[int]:
        return list(range(self.topic(topic).partitions))

    def plan(self, topic: str, partition: int, *, table_uri: str, committed: int | None, starting: OffsetSpec,
             ending: OffsetSpec, target_task_bytes: int, allow_data_loss: bool) -> PartitionPlan:
        from .bucket import plan_bucket_partition

        return plan_bucket_partition(self.store, topic, partition, table_uri=table_uri, committed=committed,
                                     starting=starting, ending=ending, target_task_bytes=target_task_bytes,
                                     allow_data_loss=allow_data_loss)


def log_root(root) -> FileLog | BucketLog:
    """The log under a storage root: a Path (or a LocalRoot's path) or an S3Root."""
    from topiclake.store.root import LocalRoot, S3Root

    if isinstance(root, S3Root):
        return BucketLog(root)
    return FileLog(root.path if isinstance(root, LocalRoot) else root)
