"""Kafka's DumpLogSegments reads the objects a partition's log is made of on the bucket, downloaded
as they are: a flush object (`<base>.e<E>.log`) and a sealed segment with its `.index` and
`.timeindex`, with no error and no index mismatch, and the records written."""

from __future__ import annotations

import time

import pytest

from tests.support.bucket_batches import batches
from tests.support.kafka_dump import RECORD, dump
from topiclake.objectlog.fence import BucketFence
from topiclake.objectlog.flush import flush
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.reader import view_partition
from topiclake.objectlog.seal import seal_tail
from topiclake.segments.config import LogConfig
from topiclake.store.objects import ObjectStore

pytestmark = pytest.mark.slow
KEYS = PartitionKeys("dump", 0)


def test_dump_log_segments_reads_flush_objects_and_sealed_segments(s3_root, kafka_tools, tmp_path):
    store = ObjectStore(s3_root.root)
    fence = BucketFence(store, KEYS)
    fence.begin_takeover(0)
    fence.record_start(0, 0)
    deadline = time.monotonic() + 10
    for first in (0, 10):
        flush(fence, first, 0, batches(first, 5, epoch=0, tag="sealed"), deadline=deadline)
    seal_tail(store, view_partition(store, KEYS), 0, config=LogConfig.from_properties({"index.interval.bytes": "1"}),
              deadline=deadline)
    tail_key = flush(fence, 20, 0, batches(20, 2, epoch=0, tag="tail"), deadline=deadline)
    sealed_dir, tail_dir = tmp_path / "sealed", tmp_path / "tail"
    sealed_dir.mkdir()
    tail_dir.mkdir()
    for suffix in (".log", ".index", ".timeindex"):
        (sealed_dir / f"00000000000000000000{suffix}").write_bytes(store.get(KEYS.segment(0, suffix)))
    tail_file = tail_dir / tail_key.rpartition("/")[2]  # 00000000000000000020.e0.log, named as on the bucket
    tail_file.write_bytes(store.get(tail_key))

    output, _gaps = dump(kafka_tools, *sorted(sealed_dir.iterdir()), tail_file)
    records = [(int(m.group(1)), m.group(4)) for m in map(RECORD.match, output.splitlines()) if m]
    offsets = [offset for offset, _ in records]
    # every offset of the sealed segment and of the tail is there
    assert set(offsets) == set(range(24))
    assert {payload for offset, payload in records if offset >= 20} == {f"tail-{o}" for o in range(20, 24)}
    assert "00000000000000000000.index" in output and "00000000000000000000.timeindex" in output
