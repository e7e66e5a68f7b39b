"""The quotas beside the byte rates (throttle.py): request_percentage (request time, as Kafka's
ClientRequestQuotaManager), controller_mutation_rate (KIP-599, strict and permissive) and
connection_creation_rate (KIP-612): first the arithmetic on a fake clock, then over the wire."""

from __future__ import annotations

import datetime
import time

import pytest
from kio.schema.create_topics.v5 import request as create5
from kio.schema.create_topics.v7 import request as create7
from kio.schema.delete_topics.v6 import request as delete6
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as metadata12

from topiclake.client.conn import BrokerConnection
from topiclake.broker.client_quotas import RECHECK_S, ClientQuotas
from topiclake.broker.throttle import Throttler
from topiclake.segments.storage import StorageLayout

from tests.support.quota_wire import alter_quotas, fetch_throttled, produce_throttled
from tests.support.wire import batch


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture
def quotas(tmp_path):
    return ClientQuotas(StorageLayout(tmp_path))


def test_request_time_throttles_like_kafka_and_at_most_one_window(quotas):
    clock = Clock()
    throttle = Throttler(quotas, clock)
    assert throttle.record_request_time(None, "app", 5.0) == 0  # no quota: nothing measured
    quotas.alter(frozenset({("client-id", "app")}), [("request_percentage", 10.0)])
    # 10% of a thread over (at least) 10 s of windows is 1 s of busy time.
    assert throttle.record_request_time(None, "app", 0.5) == 0
    assert throttle.record_request_time(None, "other", 5.0) == 0  # another client id: no quota
    # 1.1 s: rate 11%, (11 - 10) / 10 * 10 s = 1000 ms, the cap of one window.
    assert throttle.record_request_time(None, "app", 0.6) == 1000
    clock.now += 30  # the windows moved on
    assert throttle.record_request_time(None, "app", 0.01) == 0
    quotas.alter(frozenset({("client-id", "app")}), [("request_percentage", 100.0)])
    # 10.21 s of 10 s at 100%: (102.1 - 100) / 100 * 10 s = 210 ms.
    assert 205 <= throttle.record_request_time(None, "app", 10.2) <= 210


def test_mutations_are_a_token_bucket_strict_or_permissive(quotas):
    clock = Clock()
    throttle = Throttler(quotas, clock)
    quotas.alter(frozenset({("user", None)}), [("controller_mutation_rate", 10.0)])  # every user: 10/s
    assert throttle.record_mutations(None, "c", 105, strict=True) == (True, 0)  # burst: 10/s * 11 s
    assert throttle.record_mutations(None, "c", 10, strict=True) == (True, 0)  # fits: done, overdraws 5
    assert throttle.record_mutations(None, "c", 1, strict=True) == (False, 500)  # empty: refused
    clock.now += 1.0  # refilled by 10
    assert throttle.record_mutations(None, "c", 20, strict=False) == (True, 1500)  # permissive: done, throttled
    assert throttle.record_mutations("bob", "c", 50, strict=True) == (True, 0)  # every user has its own bucket


def test_connection_rate_per_ip_prefers_the_ip_over_the_default(quotas):
    clock = Clock()
    throttle = Throttler(quotas, clock)
    quotas.alter(frozenset({("ip", None)}), [("connection_creation_rate", 1.0)])
    quotas.alter(frozenset({("ip", "10.0.0.9")}), [("connection_creation_rate", 100.0)])
    assert [throttle.record_connection("10.0.0.1") for _ in range(11)][-2:] == [0, 1000]  # 11 in 10 s > 1/s
    assert all(throttle.record_connection("10.0.0.9") == 0 for _ in range(50))
    assert throttle.record_connection("10.0.0.2") == 0  # its own count


# ----------------------------------------------------------------------- over the wire
def metadata_throttle_ms(client) -> int:
    response = client.request(metadata12.MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                                         include_topic_authorized_operations=False))
    return int(response.throttle_time.total_seconds() * 1000)


def test_request_percentage_throttles_mutes_and_ignores_purgatory(broker):
    broker.create_topic("busy")
    with broker.client() as c:
        c.client_id = "busy-client"
        assert produce_throttled(c, "busy", batch([b"x" * 100]))[0] == ErrorCode.none
        assert alter_quotas(c, {"client_id": "busy-client"}, {"request_percentage": 0.5}) == ErrorCode.none
        # A fetch waiting for data is in purgatory, not busy: it does not use up the quota.
        started = time.monotonic()
        response = c.request(broker_fetch(offset=1, max_wait_ms=600))
        assert time.monotonic() - started >= 0.5 and int(response.throttle_time.total_seconds() * 1000) == 0
        # Requests that keep the broker busy do: 0.01% of a thread is 1 ms over 10 s.
        assert alter_quotas(c, {"client_id": "busy-client"}, {"request_percentage": 0.01}) == ErrorCode.none
        throttled = 0
        for _ in range(400):
            throttled = metadata_throttle_ms(c)
            if throttled:
                break
        assert 0 < throttled <= 1000
        started = time.monotonic()
        fetched, throttle_ms = fetch_throttled(c, "busy")  # read only after the mute
        assert time.monotonic() - started >= throttled / 1000 * 0.9
        assert fetched == 0 and throttle_ms > 0  # a throttled fetch carries no records
    with broker.client() as other:
        other.client_id = "idle-client"
        assert metadata_throttle_ms(other) == 0 and fetch_throttled(other, "busy")[0] > 0


def broker_fetch(offset: int, max_wait_ms: int):
    from kio.schema.fetch.v12 import request as fetch_req

    return fetch_req.FetchRequest(max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1,
                                  forgotten_topics_data=(), topics=(fetch_req.FetchTopic(
                                      topic="busy", partitions=(fetch_req.FetchPartition(
                                          partition=0, fetch_offset=offset, partition_max_bytes=1 << 20),)),))


def create_topics(client, names, partitions, version=7):
    schema = create7 if version == 7 else create5
    response = client.request(schema.CreateTopicsRequest(topics=tuple(
        schema.CreatableTopic(name=n, num_partitions=partitions, replication_factor=1, assignments=(), configs=())
        for n in names), timeout=datetime.timedelta(seconds=5), validate_only=False))
    return [t.error_code for t in response.topics], int(response.throttle_time.total_seconds() * 1000)


def test_controller_mutation_rate_on_create_and_delete_topics(broker):
    with broker.client() as c:
        assert alter_quotas(c, {"client_id": "topiclake-cli"}, {"controller_mutation_rate": 10.0}) == ErrorCode.none
        # Strict (v7): done while the bucket has tokens, even if it overdraws; then refused.
        codes, throttle_ms = create_topics(c, ["m1", "m2", "m3"], 60)  # the bucket holds 10/s * 11 s
        assert codes == [ErrorCode.none, ErrorCode.none, ErrorCode.throttling_quota_exceeded]
        assert 800 < throttle_ms <= 1000  # the overdraft, 10 tokens, at 10/s
        assert broker.context.partitions.registry.exists("m2") and not broker.context.partitions.registry.exists("m3")
        # Permissive (v5): done, and the response says how long to back off.
        codes, throttle_ms = create_topics(c, ["m4"], 5, version=5)
        assert codes == [ErrorCode.none] and throttle_ms > 0
    with BrokerConnection(broker.bootstrap, client_id="unlimited") as other:
        assert create_topics(other, ["d1", "d2"], 12) == ([ErrorCode.none, ErrorCode.none], 0)
    with BrokerConnection(broker.bootstrap, client_id="deleter") as c:
        assert alter_quotas(c, {"client_id": "deleter"}, {"controller_mutation_rate": 1.0}) == ErrorCode.none
        response = c.request(delete6.DeleteTopicsRequest(topics=tuple(
            delete6.DeleteTopicState(name=n, topic_id=None) for n in ("d1", "d2")),
            timeout=datetime.timedelta(seconds=5)))
        assert [r.error_code for r in response.responses] == [ErrorCode.none, ErrorCode.throttling_quota_exceeded]
        assert 800 < response.throttle_time.total_seconds() * 1000 <= 1000  # d1's 12 overdrew 11 by 1


def test_connection_creation_rate_holds_then_closes(broker):
    with broker.client() as c:
        assert alter_quotas(c, {"ip": "127.0.0.1"}, {"connection_creation_rate": 1.0}) == ErrorCode.none
    served, closed = 0, 0
    started = time.monotonic()
    for _ in range(11):  # the quota's client above was the first: 11 in the first seconds is over 1/s
        with BrokerConnection(broker.bootstrap, timeout=5) as c:
            try:
                metadata_throttle_ms(c)
                served += 1
            except ConnectionError:
                closed += 1
    assert closed >= 1 and served >= 9
    assert time.monotonic() - started >= 0.9  # held for its throttle time before the close


def test_the_enforcement_looks_at_the_quota_file_at_most_once_a_second(tmp_path):
    """Several lookups a request each cost a stat of the file (a tenth of a produce's cost with
    2,000 partitions): another process's change applies within RECHECK_S, the broker's own at once."""
    clock = Clock()
    enforced = ClientQuotas(StorageLayout(tmp_path), clock)
    elsewhere = ClientQuotas(StorageLayout(tmp_path))  # the CLI, or a bucket's metadata mirror
    app = frozenset({("client-id", "app")})
    assert enforced.entities() == {}
    elsewhere.alter(app, [("producer_byte_rate", 1000.0)])
    assert enforced.entities() == {}, "not looked at again within RECHECK_S"
    clock.now += RECHECK_S
    assert enforced.entities() == {app: {"producer_byte_rate": 1000.0}}
    enforced.alter(app, [("producer_byte_rate", 2000.0)])
    assert enforced.entities() == {app: {"producer_byte_rate": 2000.0}}, "its own change: at once"
