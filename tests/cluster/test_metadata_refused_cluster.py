"""Cluster mode on a bucket root (lib/broker/bucket/service.py `changing_metadata`): a metadata
request first reads the other brokers' changes (a LIST per prefix), is handled, then uploads its
change with If-Match. The store refusing either for good (403, never retried by the client) must
not close the client's connection (it did): a refused read leaves the request to the cache's
copy (the If-Match upload still refuses to overwrite another broker's change), a refused upload
answers the topic UNKNOWN_SERVER_ERROR naming it. Either way the change reaches the bucket once
the store takes it, and the cluster leads the topic."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from tests.support.cluster_brokers import ClusterBrokers, cluster_settings
from tests.support.cluster_topics import settled
from tests.support.topics import create_on
from tests.support.waits import wait_for
from topiclake.client.conn import BrokerConnection

TOPICS_LIST = r"[?&]prefix=[^&]*/topics"  # the refresh's LIST of the topics' objects
STORAGE = {"flush_ms": 100, "seal_ms": 1500, "delete_grace_ms": 3000}


def test_a_metadata_request_the_store_refuses_is_answered_on_the_open_connection(zookeeper, store_proxy, tmp_path):
    proxy, root, direct = store_proxy
    settings = cluster_settings(zookeeper.connect_string, f"/refused-{uuid.uuid4().hex[:8]}", internal_partitions=1,
                                extra={"storage": STORAGE})
    with ClusterBrokers(tmp_path, settings, count=2, bucket=str(root)) as brokers:
        with BrokerConnection(brokers.bootstrap_of(1), timeout=60) as client:
            listing = proxy.fail("GET", TOPICS_LIST, action=403, times=None)
            read_refused = create_on(client, "read-refused")
            assert listing.hits >= 1, "the request's refresh did not meet the refusal"
            proxy.clear(listing)
            assert read_refused.error_code == ErrorCode.none, read_refused

            upload = proxy.fail("PUT", r"/topics/upload-refused\.json$", action=403, times=None)
            refused = create_on(client, "upload-refused")
            assert refused.error_code == ErrorCode.unknown_server_error, refused
            assert "upload-refused" in refused.error_message and "AccessDenied" in refused.error_message, refused
            proxy.clear(upload)

            assert create_on(client, "accepted").error_code == ErrorCode.none  # the same connection

        for topic in ("read-refused", "upload-refused", "accepted"):
            wait_for(lambda topic=topic: direct.head(f"topics/{topic}.json"), 20, 0.1, what=f"{topic}'s object")
            wait_for(lambda topic=topic: settled(brokers, topic, 1), 30, what=f"{topic} led", detail=brokers.logs)
        assert set(brokers.live()) == {1, 2}, brokers.logs()[-3000:]
