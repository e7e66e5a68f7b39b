"""Maintenance commits beside a leader's seals on a real versitygw: a seal that lost its manifest
version to retention (or a merge) lands on top of it, another sealer's commit still makes it
decide again; dropped objects are garbage only a grace after the commit that dropped them, and
old manifest versions once superseded a grace ago and below the newest kept."""

from __future__ import annotations

import time

import pytest

from topiclake.objectlog.garbage import KEEP_MANIFESTS, collect_garbage, delete_old_manifests
from topiclake.objectlog.keys import PartitionKeys, parse_manifest_name
from topiclake.objectlog.manifest import ManifestConflict, commit, load_newest, load_version
from topiclake.objectlog.reader import read_log, view_partition
from topiclake.objectlog.seal import seal_tail

from tests.support.bucket_batches import values
from tests.support.bucket_log import SEAL_CONFIG, deadline, sealed_log

KEYS = PartitionKeys("maintained", 0)


def _retain_first(store, manifest):
    """What `topiclake retain` commits: the oldest segment dropped, the writer's epoch kept."""
    return commit(store, KEYS, manifest, manifest.successor(leader_epoch=manifest.leader_epoch,
                                                            segments=manifest.segments[1:],
                                                            log_start_offset=manifest.segments[1].base_offset))


def test_a_seal_lands_on_top_of_a_retention_commit_made_after_it_read_the_manifest(bucket_store):
    writer = sealed_log(bucket_store, KEYS.topic, 2)
    view = view_partition(bucket_store, KEYS)  # the leader decides to seal on this
    retained = _retain_first(bucket_store, view.manifest)
    sealed = seal_tail(bucket_store, view, writer.epoch, config=SEAL_CONFIG, deadline=deadline())
    assert sealed.version == retained.version + 1 == view.manifest.version + 2
    assert sealed.log_start_offset == 4 and [e.base_offset for e in sealed.segments] == [4, 8]
    assert sealed.end_offset == 12 and sealed.leader_epoch == writer.epoch
    assert [offset for offset, _ in values(read_log(bucket_store, KEYS))] == list(range(4, 12))


def test_a_seal_whose_version_another_sealer_took_decides_again(bucket_store):
    writer = sealed_log(bucket_store, KEYS.topic, 1)
    stale_view = view_partition(bucket_store, KEYS)
    writer.seal()  # another seal of the same tail committed first
    with pytest.raises(ManifestConflict):
        seal_tail(bucket_store, stale_view, writer.epoch, config=SEAL_CONFIG, deadline=deadline())
    assert load_newest(bucket_store, KEYS).end_offset == 8


def test_dropped_segments_are_garbage_a_grace_after_the_commit_that_dropped_them(bucket_store):
    sealed_log(bucket_store, KEYS.topic, 2)
    manifest = load_newest(bucket_store, KEYS)
    dropped = manifest.segments[0]
    time.sleep(2.5)  # the segment's objects are older than the grace ...
    retained = _retain_first(bucket_store, manifest)  # ... but it is dropped only now
    deleted = collect_garbage(bucket_store, KEYS, retained, grace_ms=2000)
    assert deleted and all(".e0." in key for key in deleted)  # only the flush objects sealed 2.5 s ago
    listed = {info.key for info in bucket_store.list(KEYS.prefix)}
    assert {dropped.key, dropped.index_key, dropped.time_index_key} <= listed
    time.sleep(2.5)
    deleted = collect_garbage(bucket_store, KEYS, retained, grace_ms=2000)
    assert {dropped.key, dropped.index_key, dropped.time_index_key} <= set(deleted)
    assert not {e.key for e in retained.segments} & set(deleted)
    assert [offset for offset, _ in values(read_log(bucket_store, KEYS))] == list(range(4, 12))


def test_old_manifest_versions_go_once_superseded_a_grace_ago_and_below_the_newest_kept(bucket_store):
    sealed_log(bucket_store, KEYS.topic, 1)
    manifest = load_newest(bucket_store, KEYS)
    log_before = [offset for offset, _ in values(read_log(bucket_store, KEYS))]
    for _ in range(20):  # commits that change nothing but the version (as a takeover's with no tail)
        manifest = commit(bucket_store, KEYS, manifest, manifest.successor(leader_epoch=manifest.leader_epoch))
    old = manifest.version
    assert delete_old_manifests(bucket_store, KEYS, manifest, None) == []  # nothing was newest a grace ago
    assert not [k for k in collect_garbage(bucket_store, KEYS, manifest, grace_ms=2000) if "/manifest/" in k]
    time.sleep(2.5)  # every version so far was superseded more than the grace ago ...
    for _ in range(3):
        manifest = commit(bucket_store, KEYS, manifest, manifest.successor(leader_epoch=manifest.leader_epoch))
    deleted = [k for k in collect_garbage(bucket_store, KEYS, manifest, grace_ms=2000) if "/manifest/" in k]
    # ... but the newest KEEP_MANIFESTS stay, and so does the reference (the newest a grace ago)
    assert deleted == [KEYS.manifest(v) for v in range(manifest.version - KEEP_MANIFESTS + 1)]
    left = sorted(parse_manifest_name(info.key) for info in bucket_store.list(KEYS.manifest_prefix))
    assert left == list(range(manifest.version - KEEP_MANIFESTS + 1, manifest.version + 1)) and old in left
    assert load_newest(bucket_store, KEYS) == manifest
    assert [offset for offset, _ in values(read_log(bucket_store, KEYS))] == log_before
    # a reference older than the newest kept is the floor: it is never deleted
    assert delete_old_manifests(bucket_store, KEYS, manifest, load_version(bucket_store, KEYS, old - 3)) == []
