"""objectlog.merge on a real versitygw: adjacent small closed segments planned into runs, one
merged Kafka segment swapped in by a manifest commit, the log read back equal; a merge planned on a
manifest that changed since commits nothing."""

from __future__ import annotations

from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import load_newest
from topiclake.objectlog.merge import merge_segments, plan_merges
from topiclake.objectlog.notices import notice_key
from topiclake.objectlog.reader import read_log

from tests.support.bucket_batches import values
from tests.support.bucket_log import SEAL_CONFIG, deadline, sealed_log

KEYS = PartitionKeys("merged", 0)


def test_a_merge_replaces_small_segments_by_one_and_the_log_reads_the_same(bucket_store):
    sealed_log(bucket_store, KEYS.topic, 4)
    before = values(read_log(bucket_store, KEYS))
    manifest = load_newest(bucket_store, KEYS)
    merges = plan_merges(manifest, below_bytes=1 << 20, max_bytes=1 << 30)
    assert [(m.base_offset, m.end_offset, len(m.sources)) for m in merges] == [(0, 16, 4)]
    two = manifest.segments[0].size + manifest.segments[1].size  # a merged segment holds at most max_bytes
    assert [(m.base_offset, m.end_offset) for m in plan_merges(manifest, below_bytes=1 << 20, max_bytes=two)][0] == (0, 8)
    assert plan_merges(manifest, below_bytes=1, max_bytes=1 << 30) == []  # none is small

    done, committed = merge_segments(bucket_store, KEYS, manifest, merges[0], config=SEAL_CONFIG, deadline=deadline())
    assert done.outcome == "merged" and committed.version == manifest.version + 1
    assert committed.leader_epoch == manifest.leader_epoch and committed.end_offset == manifest.end_offset
    assert bucket_store.get(notice_key(KEYS)) == str(committed.version).encode()  # the leader's hint
    [entry] = committed.segments
    assert entry.key == KEYS.merged_segment(0, manifest.version) and (entry.base_offset, entry.end_offset) == (0, 16)
    assert entry.size == sum(e.size for e in manifest.segments)
    assert values(read_log(bucket_store, KEYS)) == before
    assert {e.key for e in manifest.segments} <= {i.key for i in bucket_store.list(KEYS.prefix)}  # kept for now

    again, nothing = merge_segments(bucket_store, KEYS, manifest, merges[0], config=SEAL_CONFIG, deadline=deadline())
    assert (again.outcome, nothing) == ("changed", None)  # a rerun planned on the old manifest commits nothing
    assert load_newest(bucket_store, KEYS) == committed


def test_a_merge_whose_notice_the_server_refuses_still_commits_and_says_so_in_the_log(bucket_store, caplog):
    """The notice is a hint (the leader's slow poll finds the commit): a refused PUT of it (here the
    server's 409, a "directory" in the notice's place) must not fail a job whose commit stands."""
    keys = PartitionKeys("unnoticed", 0)
    sealed_log(bucket_store, keys.topic, 2)
    bucket_store.put(f"{notice_key(keys)}/in-the-way", b"")
    manifest = load_newest(bucket_store, keys)
    [merge] = plan_merges(manifest, below_bytes=1 << 20, max_bytes=1 << 30)
    done, committed = merge_segments(bucket_store, keys, manifest, merge, config=SEAL_CONFIG, deadline=deadline())
    assert done.outcome == "merged" and load_newest(bucket_store, keys) == committed
    assert any("no maintenance notice" in r.getMessage() and keys.prefix in r.getMessage() for r in caplog.records)
