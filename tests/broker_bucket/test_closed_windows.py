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
