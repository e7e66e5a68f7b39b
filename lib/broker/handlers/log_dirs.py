"""DescribeLogDirs (35) and AlterReplicaLogDirs (34): the one log dir, `<root>/log`.

Every partition of every topic lives in the storage root's log dir, so DescribeLogDirs answers
one dir, with each partition's size (its `.log` files) and no lag (there is no follower or
"future" replica), and AlterReplicaLogDirs moves nothing: a replica asked into that dir is
already there (NONE), any other path is LOG_DIR_NOT_FOUND, as Kafka answers for a dir it does
not have.
"""

from __future__ import annotations

import os
from pathlib import Path

from kio.schema.alter_replica_log_dirs.v2.request import AlterReplicaLogDirsRequest
from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest
from kio.schema.errors import ErrorCode

from topiclake.segments import filenames

from ..api_keys import ApiKey
from ..context import BrokerContext
from ..errors import error_code
from ..wire import Request, make, nested
from ._common import NO_THROTTLE
from .registry import REGISTRY


def partition_size(directory: Path) -> int:
    """Bytes of the partition's segment `.log` files (Kafka's UnifiedLog.size); 0 if it has none yet."""
    total = 0
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return 0
    for entry in entries:
        parsed = filenames.parse_name(entry.name)
        if parsed is not None and not parsed.transient and parsed.kind == filenames.LOG_SUFFIX:
            try:
                total += entry.stat().st_size
            except FileNotFoundError:  # retired by a maintenance swap meanwhile
                pass
    return total


def _describe(layout, wanted: dict[str, set[int] | None]) -> tuple[dict[str, dict[int, int]], int, int]:
    """(topic -> partition -> size, total bytes, usable bytes) on a reader thread."""
    sizes = {topic: {p: partition_size(layout.log_dir(topic, p)) for p in sorted(parts)}
             for topic, parts in wanted.items()}
    stat = os.statvfs(layout.logs_dir)
    return sizes, stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize


@REGISTRY.route(ApiKey.DESCRIBE_LOG_DIRS, (1, 4))
async def describe_log_dirs(broker: BrokerContext, request: Request[DescribeLogDirsRequest]):
    body, cls = request.body, request.response_type
    result_cls = nested(cls, "results")
    topic_cls = nested(result_cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    metas = {m.name: m for m in broker.partitions.topics()}
    if body.topics is None:
        wanted = {name: set(range(m.partitions)) for name, m in metas.items()}
    else:  # partitions this broker does not host are left out, as Kafka does
        wanted = {}
        for t in body.topics:
            if t.topic in metas:
                wanted.setdefault(t.topic, set()).update(p for p in t.partitions if 0 <= p < metas[t.topic].partitions)
    sizes, total, usable = await broker.partitions.run_read(_describe, broker.layout, wanted)
    topics = tuple(make(topic_cls, name=name, partitions=tuple(
        make(part_cls, partition_index=p, partition_size=size, offset_lag=0, is_future_key=False)
        for p, size in parts.items())) for name, parts in sizes.items())
    result = make(result_cls, error_code=ErrorCode.none, log_dir=str(broker.layout.logs_dir.resolve()), topics=topics,
                  total_bytes=total, usable_bytes=usable, is_cordoned=False)
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results=(result,))


@REGISTRY.route(ApiKey.ALTER_REPLICA_LOG_DIRS, (1, 2))
async def alter_replica_log_dirs(broker: BrokerContext, request: Request[AlterReplicaLogDirsRequest]):
    body, cls = request.body, request.response_type
    topic_cls = nested(cls, "results")
    part_cls = nested(topic_cls, "partitions")
    here = broker.layout.logs_dir.resolve()
    by_topic: dict[str, list] = {}
    for d in body.dirs:
        known_dir = Path(d.path).resolve() == here
        for t in d.topics:
            for index in t.partitions:
                try:
                    meta = broker.partitions.topic(t.name)
                    code = (ErrorCode.unknown_topic_or_partition if not 0 <= index < meta.partitions
                            else ErrorCode.none if known_dir else ErrorCode.log_dir_not_found)
                except Exception as exc:
                    code = error_code(exc)
                by_topic.setdefault(t.name, []).append(make(part_cls, partition_index=index, error_code=code))
    return make(cls, throttle_time=NO_THROTTLE, results=tuple(
        make(topic_cls, topic_name=name, partitions=tuple(parts)) for name, parts in by_topic.items()))
