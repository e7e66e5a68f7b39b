"""`topiclake broker start --data s3://...`: the cache directory and the [storage] settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from topiclake.broker.config import BrokerConfig
from topiclake.segments.errors import InvalidConfigError


def test_a_bucket_root_runs_on_a_cache_dir_derived_from_its_url_unless_one_is_given():
    config = BrokerConfig.from_settings({}, root="s3://lake/a/b")
    assert config.bucket is not None and str(config.bucket.root) == "s3://lake/a/b"
    assert config.root == Path("data-cache/lake-a-b") and config.bucket.cache_dir == config.root
    assert BrokerConfig.from_settings({}, root="s3://lake").root == Path("data-cache/lake")
    given = BrokerConfig.from_settings({"storage": {"cache_dir": "/srv/cache"}}, root="s3://lake/a")
    assert given.root == Path("/srv/cache")
    flag = BrokerConfig.from_settings({"storage": {"cache_dir": "/srv/cache"}}, root="s3://lake/a", cache_dir="/x")
    assert flag.root == Path("/x")


def test_storage_settings_are_checked_and_a_file_root_is_as_before(tmp_path):
    tuned = BrokerConfig.from_settings({"storage": {"flush_ms": 100, "seal_ms": 500, "lease_ms": 3000}},
                                       root="s3://lake/r")
    assert (tuned.bucket.flush_ms, tuned.bucket.seal_ms, tuned.bucket.lease_ms) == (100, 500, 3000)
    assert tuned.bucket.flush_bytes == 8 * 1024 * 1024
    with pytest.raises(InvalidConfigError, match="flush_msec"):
        BrokerConfig.from_settings({"storage": {"flush_msec": 1}}, root="s3://lake/r")
    with pytest.raises(InvalidConfigError, match="flush_ms must be an integer"):
        BrokerConfig.from_settings({"storage": {"flush_ms": "1"}}, root="s3://lake/r")
    with pytest.raises(InvalidConfigError, match="seal_ms must be at least 1"):
        BrokerConfig.from_settings({"storage": {"seal_ms": 0}}, root="s3://lake/r")
    with pytest.raises(InvalidConfigError, match="full_window_flush_ms must be at least 1"):
        BrokerConfig.from_settings({"storage": {"full_window_flush_ms": 0}}, root="s3://lake/r")
    clustered = BrokerConfig.from_settings({"cluster": {"zookeeper": "127.0.0.1:2181"}, "broker": {"broker_id": 2}},
                                           root="s3://lake/r")
    assert clustered.cluster.enabled and clustered.bucket is not None
    assert clustered.root == clustered.bucket.cache_dir == Path("data-cache/lake-r-broker-2"), "a cache per broker"
    local = BrokerConfig.from_settings({"storage": {"flush_msec": 1}}, root=str(tmp_path))
    assert local.bucket is None and local.root == tmp_path
