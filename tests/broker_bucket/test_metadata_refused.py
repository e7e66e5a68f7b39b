"""A metadata change the store refuses for good (a 403: the client does not retry a 4xx) on a
bucket root (lib/broker/bucket/service.py `changing_metadata`, lib/broker/connection.py): the
request is answered, each topic with UNKNOWN_SERVER_ERROR and a message naming it and the store's
refusal, and the connection stays open (it was closed without an answer); a config change alike.
The change stays in the broker's cache: a later tick stores it once the store takes it (as after
a 5xx)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as md_req

from tests.support.bucket_broker import BucketBrokers
from tests.support.topics import create_on
from tests.support.waits import wait_for
from topiclake.client.conn import BrokerConnection

STORAGE = "flush_timeout_ms = 2000"
REFUSED = r"/topics/denied(-raw)?\.json$"  # the two topics the store refuses; any other it takes


def test_a_create_topics_the_store_refuses_is_answered_with_an_error_on_the_open_connection(tmp_path, store_proxy):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                       ResourceType)

    proxy, root, direct = store_proxy
    brokers = BucketBrokers(tmp_path, root, storage=STORAGE)
    try:
        broker = brokers.start("only")
        # Until cleared: the request's own sync and every tick's meet the refusal, whichever comes first.
        rule = proxy.fail("PUT", REFUSED, action=403, times=None)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        with pytest.raises(KafkaException) as refused:
            admin.create_topics([NewTopic("denied", 1, 1)], request_timeout=20)["denied"].result(30)
        error = refused.value.args[0]
        assert error.code() == KafkaError.UNKNOWN, error  # Kafka's UNKNOWN_SERVER_ERROR (-1)
        assert "denied" in error.str() and "AccessDenied" in error.str(), error.str()

        with BrokerConnection(broker.bootstrap, timeout=30) as client:
            answer = create_on(client, "denied-raw")
            assert answer.error_code == ErrorCode.unknown_server_error, answer
            assert "denied-raw" in answer.error_message and "AccessDenied" in answer.error_message, answer
            proxy.clear(rule)
            assert rule.hits >= 2, rule.seen
            # The same connection answers the next requests.
            assert create_on(client, "accepted").error_code == ErrorCode.none
            metadata = client.request(md_req.MetadataRequest(
                topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False))
            assert {"denied", "denied-raw", "accepted"} <= {t.name for t in metadata.topics}, metadata
        admin.create_topics([NewTopic("after", 1, 1)])["after"].result(30)  # and so does the admin client

        # Every metadata request takes the same path: a config change refused answers its resource.
        rule = proxy.fail("PUT", r"/topics/after\.json$", action=403, times=None)
        resource = ConfigResource(ResourceType.TOPIC, "after", incremental_configs=[
            ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)])
        with pytest.raises(KafkaException) as refused:
            admin.incremental_alter_configs([resource])[resource].result(30)
        error = refused.value.args[0]
        assert error.code() == KafkaError.UNKNOWN and "after" in error.str(), error
        proxy.clear(rule)

        # Refused, not forgotten: the tick stores the changes once the store takes them.
        wait_for(lambda: direct.head("topics/denied.json") is not None and direct.head("topics/denied-raw.json"),
                 20, 0.1, what="the refused topics' objects stored by a later tick")
        assert broker.proc.poll() is None, "the broker stopped"
    finally:
        brokers.kill_all()
