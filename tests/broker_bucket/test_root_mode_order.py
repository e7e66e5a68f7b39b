"""Cluster brokers starting at once on a new bucket root: the first one's sync puts the root's mode
(cluster/mode.json) in the bucket before its cluster id (cluster/meta.json). A root with an id and
no mode is a single broker's (`ownership.claim_mode`), so a second broker downloading the bucket
between the two PUTs refused the root ("belongs to a single broker"): seen starting two cluster
brokers at once through the store proxy. Here the mode's PUT is refused, and the bucket is read
as a starting broker does."""

from __future__ import annotations

import pytest

from topiclake.broker.bucket.metadata import MetadataMirror
from topiclake.segments.ownership import claim_mode
from topiclake.segments.storage import StorageLayout
from topiclake.store.errors import AccessDenied
from topiclake.store.objects import ObjectStore

ZOOKEEPER = "127.0.0.1:2181/root-mode"


def test_a_roots_cluster_id_never_reaches_the_bucket_before_its_mode(tmp_path, store_proxy):
    proxy, root, direct = store_proxy
    first = tmp_path / "first"
    claim_mode(first, "cluster", zookeeper=ZOOKEEPER)  # as BucketService.publish_root: the mode, then the id
    StorageLayout(first).cluster_id()
    rule = proxy.fail("PUT", r"/cluster/mode\.json$", action=403, times=None)
    with pytest.raises(AccessDenied):
        MetadataMirror(ObjectStore(root), first).sync()
    assert rule.hits == 1

    second = tmp_path / "second"  # a broker starting now: its cache from the bucket, then its claim
    MetadataMirror(direct, second).download()
    assert claim_mode(second, "cluster", zookeeper=ZOOKEEPER)["mode"] == "cluster"
