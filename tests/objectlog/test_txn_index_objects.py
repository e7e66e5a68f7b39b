"""A closed segment's aborted transactions in the bucket (objectlog.seal, aborted, merge, garbage)
on a real versitygw: a seal given the leader's aborts writes the `.txnindex` object of those whose
marker it holds and names it (or "" for none); a merge carries its sources' entries; a segment
sealed before such objects existed is scanned instead, with the snapshot at its base saying where
an open transaction began; the garbage pass keeps named `.txnindex` objects and drops replaced ones."""

from __future__ import annotations

import dataclasses
import json

from topiclake.objectlog.aborted import known_aborted, scan_aborted, segment_aborted
from topiclake.objectlog.fence import BucketFence
from topiclake.objectlog.flush import flush
from topiclake.objectlog.garbage import collect_garbage
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import Manifest, load_newest
from topiclake.objectlog.merge import Merge, merge_segments
from topiclake.objectlog.reader import view_partition
from topiclake.objectlog.seal import seal_tail
from topiclake.segments.batch import Record, build_batch
from topiclake.segments.control import build_end_txn_marker
from topiclake.segments.producer_snapshot import ProducerSnapshotEntry, encode_snapshot
from topiclake.segments.txn_index import TxnIndexEntry
from topiclake.store.objects import CREATE

from tests.support.bucket_log import SEAL_CONFIG, deadline

KEYS = PartitionKeys("aborts", 0)
T0 = 1_700_000_000_000


def _data(offset: int, count: int, producer_id: int = -1) -> bytes:
    records = [Record(offset + i, T0 + offset + i, b"k", b"v%d" % (offset + i)) for i in range(count)]
    if producer_id < 0:
        return build_batch(records, partition_leader_epoch=0)
    return build_batch(records, producer_id=producer_id, producer_epoch=0, base_sequence=offset,
                       is_transactional=True, partition_leader_epoch=0)


def _abort(offset: int, producer_id: int) -> bytes:
    return build_end_txn_marker(offset=offset, timestamp=T0 + offset, producer_id=producer_id, producer_epoch=0,
                                commit=False, partition_leader_epoch=0)


def _seal(store, fence, base: int, data: bytes, aborted) -> Manifest:
    flush(fence, base, 0, data, deadline=deadline())
    sealed = seal_tail(store, view_partition(store, KEYS), 0, config=SEAL_CONFIG, deadline=deadline(), aborted=aborted)
    assert sealed is not None
    return sealed


def test_seals_write_txnindex_objects_merges_carry_them_and_old_segments_are_scanned(bucket_store):
    store = bucket_store
    fence = BucketFence(store, KEYS)
    fence.begin_takeover(0)
    fence.record_start(0, 0)
    first_abort = TxnIndexEntry(7, 0, 4, 5)  # producer 7: data 0-1, ABORT at 4
    second_abort = TxnIndexEntry(8, 5, 7, 8)  # producer 8: data 5-6 in one segment, ABORT at 7 in the next
    known = [first_abort, second_abort]  # what the leader knows; each seal indexes its own markers
    _seal(store, fence, 0, _data(0, 2, 7) + _data(2, 2) + _abort(4, 7), known)
    _seal(store, fence, 5, _data(5, 2, 8), known)
    manifest = _seal(store, fence, 7, _abort(7, 8) + _data(8, 2), known)

    one, two, three = manifest.segments
    assert one.txn_index_key == KEYS.segment(0, ".txnindex") and two.txn_index_key == ""
    assert three.txn_index_key == KEYS.segment(7, ".txnindex")
    assert [known_aborted(store, e) for e in manifest.segments] == [[first_abort], [], [second_abort]]
    listed = json.loads(store.get(KEYS.manifest(manifest.version)))["segments"]
    assert [s["txn_index_key"] for s in listed] == [one.txn_index_key, "", three.txn_index_key]

    # As if sealed before .txnindex objects: the field is absent, a reader scans the segment.
    old = [dataclasses.replace(e, txn_index_key=None) for e in manifest.segments]
    assert "txn_index_key" not in json.loads(dataclasses.replace(manifest, segments=tuple(old)).to_json())["segments"][0]
    assert Manifest.from_json(dataclasses.replace(manifest, segments=tuple(old)).to_json(), source="m").segments == \
        tuple(old)
    assert known_aborted(store, old[0]) is None
    assert segment_aborted(store, KEYS, old[0]) == [TxnIndexEntry(7, 0, 4, 5)]
    assert scan_aborted(store, KEYS, old[1]) == []
    # No snapshot at 7: the transaction open at the base is taken to begin there...
    assert scan_aborted(store, KEYS, old[2]) == [TxnIndexEntry(8, 7, 7, 8)]
    # ...the snapshot at the base (a seal writes one at each segment's end) says it began at 5.
    store.put(KEYS.snapshot(7), encode_snapshot([ProducerSnapshotEntry(8, 0, 6, 6, 1, T0 + 6,
                                                                       current_txn_first_offset=5)]), mode=CREATE)
    assert scan_aborted(store, KEYS, old[2]) == [TxnIndexEntry(8, 5, 7, 8)]

    _done, merged = merge_segments(store, KEYS, manifest, Merge(manifest.segments), config=SEAL_CONFIG,
                                   deadline=deadline())
    [entry] = merged.segments
    assert entry.txn_index_key == KEYS.merged_segment(0, manifest.version, ".txnindex")
    assert known_aborted(store, entry) == known
    _done, unknown = merge_segments(store, KEYS, merged, Merge((dataclasses.replace(entry, txn_index_key=None),)),
                                    config=SEAL_CONFIG, deadline=deadline())
    assert unknown is None  # not in the manifest as given: nothing committed

    deleted = collect_garbage(store, KEYS, load_newest(store, KEYS), grace_ms=0)
    assert one.txn_index_key in deleted and three.txn_index_key in deleted  # replaced by the merge
    assert entry.txn_index_key not in deleted and store.head(entry.txn_index_key) is not None
