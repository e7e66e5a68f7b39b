"""The read-ahead windows of closed segments are kept by object address, and object keys carry no
topic id: a takeover forgets its partition's windows (a topic deleted and created again, or led by
another broker meanwhile, has other bytes under the same keys), and only that partition's."""

from __future__ import annotations

from topiclake.broker.bucket.closed import _Windows


def test_forgetting_a_partition_drops_its_windows_only():
    windows = _Windows(1 << 20)
    windows.keep("s3://b/root/log/t-0/00000000000000000000.log", 0, b"old bytes")
    windows.keep("s3://b/root/log/t-01/00000000000000000000.log", 0, b"other partition")
    windows.forget("s3://b/root/log/t-0")
    assert windows.find("s3://b/root/log/t-0/00000000000000000000.log", 0) is None
    assert windows.find("s3://b/root/log/t-01/00000000000000000000.log", 0) == (0, b"other partition")
    windows.keep("s3://b/root/log/t-0/00000000000000000000.log", 0, b"new")
    assert windows.find("s3://b/root/log/t-0/00000000000000000000.log", 0) == (0, b"new")


def test_the_last_batch_headers_span_segments_and_skip_an_emptied_one(s3_root):
    """A takeover's producer windows read the last closed batches' headers: across segments while
    bytes are left, skipping a segment a compaction emptied (size 0: a ranged GET of nothing is
    an error)."""
    import dataclasses

    from topiclake.broker.bucket.closed import ClosedSegments
    from topiclake.objectlog.manifest import load_newest
    from topiclake.store.objects import ObjectStore

    from tests.support.bucket_log import sealed_log

    store = ObjectStore(s3_root.root)
    writer = sealed_log(store, "windows", 3)  # three closed segments of 4 offsets (2 batches) each
    manifest = load_newest(store, writer.keys)
    closed = ClosedSegments(store, writer.keys, manifest)
    assert [h.base_offset for h in closed.last_batch_headers(1 << 20)] == [0, 2, 4, 6, 8, 10]
    tail = [h.base_offset for h in closed.last_batch_headers(1)]  # from the last index entry: the last segment's
    assert tail[-1] == 10 and tail[0] >= 8

    emptied = dataclasses.replace(manifest.segments[-1], size=0)
    closed.adopt(dataclasses.replace(manifest, version=manifest.version + 1,
                                     segments=(*manifest.segments[:-1], emptied)))
    tail = [h.base_offset for h in closed.last_batch_headers(1)]  # the segment before the emptied one
    assert tail[-1] == 6 and tail[0] >= 4
