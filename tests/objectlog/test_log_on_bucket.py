"""The log of a partition on a real versitygw: manifest versions created once, the epoch fence as
conditional creates, and a reader that keeps exactly the valid batches, each offset once."""

from __future__ import annotations

import time

import pytest

from topiclake.objectlog.fence import BucketFence, LeaderFenced
from topiclake.objectlog.flush import flush
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import (EMPTY, ManifestConflict, SegmentEntry, StaleManifestWriter, commit,
                                          load_newest)
from topiclake.objectlog.reader import read_log, view_partition
from topiclake.segments.batch import iter_batches
from topiclake.store.objects import CREATE

from tests.support.bucket_batches import batches, values

KEYS = PartitionKeys("t", 0)


def deadline() -> float:
    return time.monotonic() + 10


def test_manifest_versions_have_one_writer_each_and_a_stale_epoch_cannot_commit(bucket_store):
    assert load_newest(bucket_store, KEYS) is EMPTY
    first = commit(bucket_store, KEYS, EMPTY, EMPTY.successor(leader_epoch=1))
    segment = SegmentEntry(KEYS.segment(0), 0, 4, 10, 5, KEYS.segment(0, ".index"), KEYS.segment(0, ".timeindex"))
    second = commit(bucket_store, KEYS, first, first.successor(leader_epoch=1, segments=(segment,)))
    with pytest.raises(ManifestConflict):  # a writer that read version 0 races for version 1
        commit(bucket_store, KEYS, first, first.successor(leader_epoch=2))
    newest = load_newest(bucket_store, KEYS)
    assert newest == second and newest.end_offset == 4
    taken_over = commit(bucket_store, KEYS, newest, newest.successor(leader_epoch=3))
    with pytest.raises(StaleManifestWriter):  # epoch 1's leader, after a takeover at epoch 3
        commit(bucket_store, KEYS, taken_over, taken_over.successor(leader_epoch=1))
    assert load_newest(bucket_store, KEYS).version == 2


def test_a_paused_leaders_late_object_is_fenced_and_never_read(bucket_store):
    old = BucketFence(bucket_store, KEYS)
    old.begin_takeover(0, broker_id=1)
    old.record_start(0, 0)
    flush(old, 0, 0, batches(0, 3, epoch=0, tag="old"), deadline=deadline())  # acknowledged: offsets 0-5
    # the old leader pauses; a new leader takes over at epoch 1 from the bucket alone
    new = BucketFence(bucket_store, KEYS)
    history = new.begin_takeover(1, broker_id=2)
    assert history.pending and history.claimed == 1
    recovered = list(read_log(bucket_store, KEYS))
    end = recovered[-1].next_offset
    assert end == 6
    new.record_start(1, end)
    # the old leader wakes up: its next object lands, but its fence check fails: not acknowledged
    with pytest.raises(LeaderFenced):
        flush(old, 6, 0, batches(6, 2, epoch=0, tag="late"), deadline=deadline())
    assert bucket_store.head(KEYS.flush(6, 0)) is not None  # there, and invisible:
    flush(new, 6, 1, batches(6, 2, epoch=1, tag="new"), deadline=deadline())
    # a further late object above the new leader's is invalid too (its epoch does not own it)
    bucket_store.put(KEYS.flush(10, 0), batches(10, 1, epoch=0, tag="late"), mode=CREATE)
    got = values(read_log(bucket_store, KEYS))
    assert [offset for offset, _ in got] == list(range(10))
    assert {value.split(b"-")[0] for offset, value in got if offset >= 6} == {b"new"}
    assert all(value == f"old-{offset}".encode() for offset, value in got if offset < 6)
    # nor can the old leader record a start or claim over the new one
    with pytest.raises(LeaderFenced):
        old.record_start(0, 6)
    with pytest.raises(LeaderFenced):
        old.claim(1)


def test_closed_segments_then_the_tail_and_superseded_flush_objects_ignored(bucket_store):
    fence = BucketFence(bucket_store, KEYS)
    fence.begin_takeover(0)
    fence.record_start(0, 0)
    sealed = batches(0, 4, epoch=0, tag="sealed")  # offsets 0-7, flushed in two objects, then sealed
    flush(fence, 0, 0, sealed[: len(sealed) // 2], deadline=deadline())
    flush(fence, 4, 0, sealed[len(sealed) // 2:], deadline=deadline())
    bucket_store.put(KEYS.segment(0), sealed, mode=CREATE)
    segment = SegmentEntry(KEYS.segment(0), 0, 8, len(sealed), 0, KEYS.segment(0, ".index"),
                           KEYS.segment(0, ".timeindex"))
    commit(bucket_store, KEYS, EMPTY, EMPTY.successor(leader_epoch=0, segments=(segment,)))
    flush(fence, 8, 0, batches(8, 2, epoch=0, tag="tail"), deadline=deadline())
    view = view_partition(bucket_store, KEYS)
    assert [(p.kind, p.base_offset) for p in view.pieces] == [("segment", 0), ("flush", 8)]
    got = values(read_log(bucket_store, KEYS, view=view))
    assert [offset for offset, _ in got] == list(range(12))
    assert [offset for offset, _ in values(read_log(bucket_store, KEYS, from_offset=9))] == [8, 9, 10, 11]


def test_a_flush_object_is_a_kafka_segment_for_topiclakes_reader(bucket_store, tmp_path):
    from topiclake.segments.config import LogConfig
    from topiclake.segments.segment import LogSegment

    fence = BucketFence(bucket_store, KEYS)
    fence.begin_takeover(0)
    fence.record_start(0, 0)
    key = flush(fence, 0, 0, batches(0, 3, epoch=0), deadline=deadline())
    local = tmp_path / "00000000000000000000.log"  # the object downloaded as it is, under a segment name
    local.write_bytes(bucket_store.get(key))
    segment = LogSegment(tmp_path, 0, LogConfig(), writable=False)
    try:
        headers = [header for _position, header in segment.batch_headers()]
        assert [h.base_offset for h in headers] == [0, 2, 4]
        assert {h.partition_leader_epoch for h in headers} == {0}
    finally:
        segment.close()
    assert [b.base_offset for b in iter_batches(bucket_store.get(key))] == [0, 2, 4]


def test_a_seal_makes_the_tail_a_closed_segment_and_a_crash_before_its_commit_changes_nothing(bucket_store, tmp_path):
    from datetime import datetime, timedelta, timezone

    from topiclake.objectlog.garbage import delete_superseded, manifest_at
    from topiclake.objectlog.seal import seal_tail
    from topiclake.segments.config import LogConfig
    from topiclake.segments.segment import LogSegment

    fence = BucketFence(bucket_store, KEYS)
    fence.begin_takeover(0)
    fence.record_start(0, 0)
    for first in (0, 6, 12):
        flush(fence, first, 0, batches(first, 3, epoch=0, tag="a"), deadline=deadline())
    bucket_store.put(KEYS.flush(12, 0).replace(".e0.", ".e9."), batches(12, 1, epoch=9, tag="x"), mode=CREATE)  # never valid
    before = values(read_log(bucket_store, KEYS))
    assert [offset for offset, _ in before] == list(range(18))
    # a seal whose segment objects landed but whose commit did not (killed): the flush objects are the log
    config = LogConfig.from_properties({"index.interval.bytes": "1"})
    bucket_store.put(KEYS.segment(0), b"partial garbage", mode=CREATE)
    assert values(read_log(bucket_store, KEYS)) == before
    bucket_store.delete(KEYS.segment(0))
    manifest = seal_tail(bucket_store, view_partition(bucket_store, KEYS), 0, config=config, deadline=deadline())
    assert manifest.version == 0 and manifest.end_offset == 18 and manifest.leader_epoch == 0
    view = view_partition(bucket_store, KEYS)
    assert [(p.kind, p.base_offset) for p in view.pieces] == [("segment", 0)]
    assert values(read_log(bucket_store, KEYS, view=view)) == before
    # the segment objects are Kafka's files: opened as a segment with its indexes, offsets look up
    for suffix in (".log", ".index", ".timeindex"):
        (tmp_path / f"00000000000000000000{suffix}").write_bytes(bucket_store.get(KEYS.segment(0, suffix)))
    segment = LogSegment(tmp_path, 0, config, writable=False)
    try:
        segment.sanity_check()
        assert segment.offset_index.entries >= 8  # an entry per batch at index.interval.bytes=1
        found = segment.translate_offset(13)
        assert found is not None and found.base_offset <= 13 <= found.last_offset and found.position > 0
        assert segment.read_next_offset() == 18
    finally:
        segment.close()
    # superseded flush objects go only after the grace
    now = datetime.now(timezone.utc)
    assert delete_superseded(bucket_store, KEYS, manifest, manifest_at(bucket_store, KEYS, now - timedelta(hours=1)),
                             grace_ms=3_600_000) == []
    later = now + timedelta(hours=2)
    deleted = delete_superseded(bucket_store, KEYS, manifest, manifest_at(bucket_store, KEYS, later - timedelta(hours=1)),
                                grace_ms=3_600_000, now=later)
    assert sorted(deleted) == sorted([KEYS.flush(0, 0), KEYS.flush(6, 0), KEYS.flush(12, 0),
                                      KEYS.flush(12, 0).replace(".e0.", ".e9.")])
    assert values(read_log(bucket_store, KEYS)) == before
    # the next flush object continues after the segment
    flush(fence, 18, 0, batches(18, 1, epoch=0, tag="b"), deadline=deadline())
    assert [offset for offset, _ in values(read_log(bucket_store, KEYS))] == list(range(20))


def test_a_seal_holds_one_flush_object_in_memory_not_the_segment(bucket_store):
    """A 16 MiB tail in 8 flush objects: the seal builds the segment on disk one object at a time and
    uploads it from the file, so Python's peak allocation stays near one object (it held the whole
    segment three times: the batches, their copy and the file read back)."""
    import tracemalloc

    from topiclake.objectlog.seal import seal_tail
    from topiclake.segments.config import LogConfig

    from tests.support.bucket_batches import keyed_batches

    fence = BucketFence(bucket_store, KEYS)
    fence.begin_takeover(0)
    fence.record_start(0, 0)
    objects = 8
    per_object = 32  # records of 64 KiB: 2 MiB an object
    flushed = []
    for n in range(objects):
        first = n * per_object
        data = keyed_batches(first, [(b"k%d" % o, bytes([o % 251]) * 65536) for o in range(first, first + per_object)],
                             epoch=0, per_batch=4)
        flush(fence, first, 0, data, deadline=deadline())
        flushed.append(data)
    segment_bytes = sum(len(d) for d in flushed)
    tracemalloc.start()
    try:
        manifest = seal_tail(bucket_store, view_partition(bucket_store, KEYS), 0, config=LogConfig(), deadline=deadline())
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert manifest is not None and manifest.end_offset == objects * per_object
    assert bucket_store.get(KEYS.segment(0)) == b"".join(flushed)
    assert peak < segment_bytes / 2, f"the seal allocated {peak} bytes at its peak for a {segment_bytes}-byte segment"
