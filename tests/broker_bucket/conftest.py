from __future__ import annotations

import os

import pytest

from tests.support.bucket_broker import BucketBrokers
from tests.support.s3 import VersityGW
from topiclake.store.root import parse_root


@pytest.fixture
def bucket_brokers(tmp_path, s3_root, monkeypatch):
    """Brokers on one fresh bucket root of the session's versitygw, each with its own cache dir."""
    for name, value in s3_root.env.items():
        monkeypatch.setitem(os.environ, name, value)
    brokers = BucketBrokers(tmp_path, s3_root.root)
    yield brokers
    brokers.kill_all()


def _brokers_beside(bucket_brokers, tmp_path, name: str, storage: str):
    """Brokers on `bucket_brokers`' root with other [storage] settings, in their own directory."""
    (tmp_path / name).mkdir()
    brokers = BucketBrokers(tmp_path / name, bucket_brokers.root, storage=storage)
    yield brokers
    brokers.kill_all()


@pytest.fixture
def sealing_brokers(bucket_brokers, tmp_path):
    """Brokers on the same root that seal their tails every 400 ms: many small closed segments,
    for the maintenance jobs (retention, merges) to run beside."""
    yield from _brokers_beside(bucket_brokers, tmp_path, "sealing", "seal_ms = 400")


@pytest.fixture
def rolling_brokers(bucket_brokers, tmp_path):
    """Brokers on the same root that seal only on a local roll (segment.bytes), never by time
    (flush_ms 100): a partition's last segment stays its tail."""
    yield from _brokers_beside(bucket_brokers, tmp_path, "seal-on-roll", "flush_ms = 100\nseal_ms = 600000")


@pytest.fixture
def slow_flush_brokers(bucket_brokers, tmp_path):
    """Brokers on the same root that flush every 5 s: appended records stay past the high
    watermark long enough to be asked about."""
    yield from _brokers_beside(bucket_brokers, tmp_path, "slow-flush", "flush_ms = 5000")


@pytest.fixture
def dropping_brokers(bucket_brokers, tmp_path):
    """Brokers on the same root that seal every 300 ms and delete a sealed segment from their cache
    at once (cache_sealed_ms = 0): older offsets are read from the bucket while they run."""
    yield from _brokers_beside(bucket_brokers, tmp_path, "drop", "seal_ms = 300\ncache_sealed_ms = 0")


@pytest.fixture
def own_store(tmp_path, monkeypatch):
    """A versitygw of the test's own, to kill, restart or pause, and a root on a new bucket of it:
    (the server, the root)."""
    server = VersityGW(tmp_path / "s3").start()
    try:
        for name, value in server.env().items():
            monkeypatch.setitem(os.environ, name, value)
        yield server, parse_root(f"s3://{server.create_bucket()}/data", env=server.env())
    finally:
        server.stop()
