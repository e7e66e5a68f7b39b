"""The metadata objects of a bucket root written by two brokers' mirrors (cluster mode,
docs/OBJECT-STORAGE.md "Metadata objects"): a lost If-Match race is adopted, not fatal, and a
change made again on the winner's copy keeps both; a refresh brings the other broker's changes,
new files and deletions, and never overwrites a change of its own not synced yet."""

from __future__ import annotations

import json

import pytest

from topiclake.broker.bucket.metadata import MetadataConflict, MetadataMirror
from topiclake.store.objects import ObjectStore

ACLS = "cluster/acls.json"


def _mirror(s3_root, cache) -> MetadataMirror:
    (cache / "cluster").mkdir(parents=True)
    mirror = MetadataMirror(ObjectStore(s3_root.root), cache)
    mirror.download()
    return mirror


def _add(cache, name: str) -> None:
    """A read-modify-write of the shared file, as a request handler does in the cache."""
    path = cache / ACLS
    names = json.loads(path.read_text()) if path.exists() else []
    path.write_text(json.dumps(sorted({*names, name})))


def test_a_lost_race_is_adopted_and_the_change_made_again_keeps_both(s3_root, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    first, second = _mirror(s3_root, one), _mirror(s3_root, two)
    _add(one, "alice")
    assert first.sync() == [ACLS]
    _add(two, "bob")  # on a copy without alice: its create loses to the first broker's
    with pytest.raises(MetadataConflict) as lost:
        second.sync()
    assert lost.value.keys == [ACLS]
    second.adopt(lost.value.keys)
    assert json.loads((two / ACLS).read_text()) == ["alice"], "the winner's object replaces the cache's"
    _add(two, "bob")  # the request handled again, on the winner's copy
    assert second.sync() == [ACLS]
    assert first.refresh() == [ACLS]
    assert json.loads((one / ACLS).read_text()) == ["alice", "bob"]


def test_a_refresh_fetches_new_and_deleted_files_and_keeps_an_unsynced_change(s3_root, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    first, second = _mirror(s3_root, one), _mirror(s3_root, two)
    (one / "topics").mkdir()
    (one / "topics" / "t.json").write_text('{"partitions": 1}')
    _add(one, "alice")
    first.sync()
    assert sorted(second.refresh()) == [ACLS, "topics/t.json"]
    assert (two / "topics" / "t.json").read_text() == '{"partitions": 1}'
    assert second.refresh() == [], "nothing changed: nothing fetched"

    _add(two, "carol")  # not synced yet
    _add(one, "bob")
    first.sync()
    (one / "topics" / "t.json").unlink()
    first.sync()
    assert second.refresh() == ["topics/t.json"], "the deletion arrives; the pending ACL change is kept"
    assert not (two / "topics" / "t.json").exists()
    assert json.loads((two / ACLS).read_text()) == ["alice", "carol"]
    with pytest.raises(MetadataConflict):  # its sync then finds bob's write and loses the race
        second.sync()


def test_a_deleted_topics_objects_written_late_are_swept_again(s3_root, tmp_path):
    """A leader's seal under way when its topic is deleted (another broker, in cluster mode) lands
    objects after the first sweep listed the prefix: the broker that deleted the topic sweeps again
    later, unless the topic was created again (here, or by a broker this one has not heard from)."""
    from topiclake.broker.bucket.metadata import RESWEEP_AFTER_S
    from topiclake.store.objects import CREATE

    store = ObjectStore(s3_root.root)
    now = [0.0]
    cache = tmp_path / "cache"
    (cache / "topics").mkdir(parents=True)
    mirror = MetadataMirror(store, cache, clock=lambda: now[0])
    topics = ("gone", "back", "elsewhere")
    for topic in topics:
        (cache / "topics" / f"{topic}.json").write_text(json.dumps({"name": topic}))
        store.put(f"log/{topic}-0/00000000000000000000.log", b"x", mode=CREATE)
    mirror.sync()
    for topic in topics:
        (cache / "topics" / f"{topic}.json").unlink()
    mirror.sync()
    assert [i.key for i in store.list("log")] == []
    late = ["log/gone-0/00000000000000000000.timeindex", "log/gone-0/manifest/00000000000000000001.json"]
    kept = ["log/back-0/00000000000000000000.log", "log/elsewhere-0/00000000000000000000.log"]
    for key in late + kept:
        store.put(key, b"late or new", mode=CREATE)
    (cache / "topics" / "back.json").write_text(json.dumps({"name": "back", "again": True}))  # created again here
    store.put("topics/elsewhere.json", b"{}", mode=CREATE)  # and by another broker, not heard of yet
    now[0] = RESWEEP_AFTER_S[0] - 0.1
    mirror.sync()
    assert sorted(i.key for i in store.list("log")) == sorted(late + kept)  # not due yet
    now[0] = RESWEEP_AFTER_S[-1] + 0.1
    mirror.sync()
    assert sorted(i.key for i in store.list("log")) == kept
