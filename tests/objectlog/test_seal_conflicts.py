"""Seals that meet a stale sealer's leftovers on a real versitygw: `<base>.log` taken by other
bytes makes the seal use `<base>.s<E>.log`, and segment objects no manifest names are deleted
after the grace, never before and never the ones it names."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from topiclake.objectlog.fence import BucketFence
from topiclake.objectlog.flush import flush
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.reader import read_log, view_partition
from topiclake.objectlog.garbage import delete_unreferenced, manifest_at
from topiclake.objectlog.seal import seal_tail
from topiclake.segments.config import LogConfig
from topiclake.store.objects import CREATE

from tests.support.bucket_batches import batches, values

KEYS = PartitionKeys("conflicts", 0)


def test_a_stale_sealers_segment_at_the_key_sends_the_seal_to_its_epochs_key_and_is_collected_later(bucket_store):
    fence = BucketFence(bucket_store, KEYS)
    fence.begin_takeover(1)
    fence.record_start(1, 0)
    flush(fence, 0, 1, batches(0, 4, epoch=1, tag="a"), deadline=time.monotonic() + 10)
    before = values(read_log(bucket_store, KEYS))
    for suffix in (".log", ".index", ".timeindex"):  # a stale sealer's objects; its commit lost
        bucket_store.put(KEYS.segment(0, suffix), b"a stale sealer's other bytes", mode=CREATE)
    bucket_store.put(KEYS.snapshot(99), b"stale snapshot", mode=CREATE)
    ends = []
    manifest = seal_tail(bucket_store, view_partition(bucket_store, KEYS), 1, config=LogConfig(),
                         deadline=time.monotonic() + 10, before_commit=ends.append)
    assert ends == [8]
    entry = manifest.segments[-1]
    assert (entry.key, entry.index_key, entry.time_index_key) == (
        KEYS.sealed_segment(0, 1), KEYS.sealed_segment(0, 1, ".index"), KEYS.sealed_segment(0, 1, ".timeindex"))
    assert entry.key.endswith("/00000000000000000000.s1.log")
    assert values(read_log(bucket_store, KEYS)) == before

    bucket_store.put(KEYS.snapshot(8), b"the snapshot at the sealed end", mode=CREATE)
    assert manifest_at(bucket_store, KEYS, datetime.now(timezone.utc) - timedelta(hours=1)) is None
    assert delete_unreferenced(bucket_store, KEYS, manifest, None, grace_ms=3_600_000) == []
    later = datetime.now(timezone.utc) + timedelta(hours=2)
    reference = manifest_at(bucket_store, KEYS, later - timedelta(hours=1))
    assert reference == manifest
    deleted = delete_unreferenced(bucket_store, KEYS, manifest, reference, grace_ms=3_600_000, now=later)
    assert sorted(deleted) == sorted([KEYS.segment(0), KEYS.segment(0, ".index"), KEYS.segment(0, ".timeindex"),
                                      KEYS.snapshot(99)])
    left = {info.key for info in bucket_store.list(KEYS.prefix)}
    assert {entry.key, entry.index_key, entry.time_index_key, KEYS.snapshot(8), KEYS.flush(0, 1)} <= left
    assert values(read_log(bucket_store, KEYS)) == before
