"""Keys and the plan of a partition's log from a listing alone (no server)."""

from __future__ import annotations

import json

import pytest

from topiclake.objectlog.keys import PartitionKeys, parse_flush_name, parse_manifest_name
from topiclake.objectlog.manifest import EMPTY, CorruptManifest, Manifest, SegmentEntry
from topiclake.objectlog.plan import FLUSH, SEGMENT, Listed, plan_log, superseded_flush_objects
from topiclake.segments.filenames import offset_from_name
from topiclake.segments.leader_epochs import EpochHistory
from topiclake.segments.storage import InvalidTopicError

KEYS = PartitionKeys("orders", 3)


def test_keys_follow_the_layout_and_flush_objects_parse_as_kafka_segments():
    assert KEYS.flush(1234, 7) == "log/orders-3/00000000000000001234.e7.log"
    assert KEYS.segment(1234) == "log/orders-3/00000000000000001234.log"
    assert KEYS.segment(1234, ".timeindex") == "log/orders-3/00000000000000001234.timeindex"
    assert KEYS.snapshot(99) == "log/orders-3/00000000000000000099.snapshot"
    assert KEYS.manifest(2) == "log/orders-3/manifest/00000000000000000002.json"
    assert KEYS.claim(8) == "log/orders-3/leader-epochs/0000000008.claim"
    assert KEYS.start(8) == "log/orders-3/leader-epochs/0000000008.start"
    # Kafka's offsetFromFileName: the digits before the first dot
    assert offset_from_name(KEYS.flush(1234, 7).rpartition("/")[2]) == 1234
    assert parse_flush_name(KEYS.flush(1234, 7)).epoch == 7
    assert parse_flush_name(KEYS.segment(1234)) is None
    assert parse_manifest_name(KEYS.manifest(2)) == 2 and parse_manifest_name(KEYS.segment(2)) is None
    with pytest.raises(InvalidTopicError):
        PartitionKeys("../x", 0)
    with pytest.raises(ValueError):
        KEYS.segment(1, ".deleted")


def entry(base: int, end: int) -> SegmentEntry:
    return SegmentEntry(KEYS.segment(base), base, end, 100, 0, KEYS.segment(base, ".index"),
                        KEYS.segment(base, ".timeindex"))


def test_the_log_is_the_manifests_segments_then_the_flush_objects_from_its_end():
    manifest = Manifest(3, 1, 0, (entry(0, 10), entry(10, 20)))
    listed = [Listed(KEYS.flush(25, 1), 5), Listed(KEYS.flush(20, 1), 5), Listed(KEYS.flush(10, 1), 5),
              Listed(KEYS.flush(0, 1), 5), Listed(KEYS.segment(0), 100), Listed(KEYS.segment(10), 100),
              Listed(KEYS.manifest(3), 1), Listed(KEYS.claim(1), 1),
              Listed(PartitionKeys("orders", 31).flush(40, 1), 5)]  # another partition's prefix
    pieces = plan_log(KEYS, manifest, listed)
    assert [(p.kind, p.base_offset, p.end_offset) for p in pieces] == [
        (SEGMENT, 0, 10), (SEGMENT, 10, 20), (FLUSH, 20, 25), (FLUSH, 25, None)]
    assert [item.key for item in superseded_flush_objects(KEYS, manifest, listed)] == [KEYS.flush(0, 1),
                                                                                      KEYS.flush(10, 1)]


def test_objects_sharing_a_base_are_all_read_and_the_epoch_rule_picks():
    listed = [Listed(KEYS.flush(0, 0), 5), Listed(KEYS.flush(8, 1), 5), Listed(KEYS.flush(8, 0), 5)]
    pieces = plan_log(KEYS, EMPTY, listed)
    assert [(p.base_offset, p.epoch, p.end_offset) for p in pieces] == [(0, 0, 8), (8, 0, None), (8, 1, None)]
    history = EpochHistory({0: 0, 1: 8}, 1)
    late, new = pieces[1], pieces[2]
    assert not late.accepts(history, 8, 0, 9) and new.accepts(history, 8, 1, 9)
    assert not pieces[0].accepts(history, 8, 0, 9)  # past its range: the next base's
    assert pieces[0].accepts(history, 6, 0, 7)


def test_retention_drops_whole_segments_below_the_log_start():
    manifest = Manifest(4, 1, 10, (entry(0, 10), entry(10, 20)))
    assert [p.base_offset for p in plan_log(KEYS, manifest, [])] == [10]


def test_a_manifest_round_trips_and_refuses_overlaps():
    manifest = Manifest(3, 2, 0, (entry(0, 10), entry(10, 20)))
    again = Manifest.from_json(manifest.to_json(), source="m")
    assert again == manifest and again.end_offset == 20
    assert EMPTY.successor(leader_epoch=0).version == 0
    with pytest.raises(CorruptManifest):
        Manifest(1, 0, 0, (entry(0, 10), entry(5, 20)))
    body = json.loads(manifest.to_json())
    body["end_offset"] = 21  # not where its segments end
    with pytest.raises(CorruptManifest):
        Manifest.from_json(json.dumps(body).encode(), source="m")


def test_a_manifest_field_added_later_is_ignored_and_another_format_refused():
    """A newer build's optional field (a segment entry's, the manifest's) does not stop this one
    reading the manifest; a new format does."""
    manifest = Manifest(3, 2, 0, (entry(0, 10), entry(10, 20)))
    body = json.loads(manifest.to_json())
    body["segments"][0]["written_by_a_later_build"] = "x"
    body["also_later"] = 1
    assert Manifest.from_json(json.dumps(body).encode(), source="m") == manifest
    body["format"] = 1
    with pytest.raises(CorruptManifest, match="unknown format 1"):
        Manifest.from_json(json.dumps(body).encode(), source="m")
