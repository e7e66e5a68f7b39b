"""/metrics of a broker on a bucket root: the object store's series (topiclake.store.metrics)
beside the broker's own, counted by the broker's real requests to versitygw."""

from __future__ import annotations

import confluent_kafka as ck

from tests.support.broker_process import free_port
from tests.support.metrics import scrape_url

RECORDS = 200
VALUE = b"m" * 1000


def _sample(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_a_bucket_broker_reports_its_object_store_requests_on_metrics(bucket_brokers):
    port = free_port()
    broker = bucket_brokers.start("metered", args=("--metrics-listen", f"127.0.0.1:{port}"))
    url = f"http://127.0.0.1:{port}/metrics"
    before = scrape_url(url)
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
    failed = []
    for _ in range(RECORDS):
        producer.produce("metered", value=VALUE,
                         on_delivery=lambda error, _message: failed.append(error) if error else None)
    assert producer.flush(60) == 0 and not failed, failed  # acknowledged: flushed into objects

    after = scrape_url(url)
    puts = _sample(after, "topiclake_object_store_requests_total", operation="put")
    assert puts > _sample(before, "topiclake_object_store_requests_total", operation="put")
    written = _sample(after, "topiclake_object_store_bytes_total", operation="put", direction="written")
    assert written - _sample(before, "topiclake_object_store_bytes_total", operation="put",
                             direction="written") >= RECORDS * len(VALUE)
    # every request timed: the histogram holds as many PUTs as the counter, in a finite time
    assert _sample(after, "topiclake_object_store_request_seconds_count", operation="put") == puts
    assert 0 < _sample(after, "topiclake_object_store_request_seconds_sum", operation="put") < puts * 30
    assert _sample(after, "topiclake_object_store_requests_total", operation="list") > 0  # the take-over
    # the broker's own series are still there
    assert _sample(after, "kafka_server_brokertopicmetrics_messagesin_total", topic="metered") == RECORDS


def test_an_idle_leader_looks_for_maintenance_commits_with_one_list_whatever_its_partitions(bucket_brokers):
    """Every MANIFEST_POLL_S a leader LISTs the maintenance notices once, not each partition's
    manifests (docs/OBJECT-STORAGE.md, "Cost"): PARTITIONS idle partitions cost about one LIST a
    poll, and no GET (no notice changed)."""
    import time

    from confluent_kafka.admin import AdminClient, NewTopic

    from topiclake.broker.bucket.tail import MANIFEST_POLL_S

    partitions = 16
    port = free_port()
    broker = bucket_brokers.start("idle", args=("--metrics-listen", f"127.0.0.1:{port}"))
    url = f"http://127.0.0.1:{port}/metrics"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("idle", partitions, 1)])["idle"].result(30)
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for partition in range(partitions):  # every partition led, each with a record sealed
        producer.produce("idle", value=VALUE, partition=partition)
    assert producer.flush(60) == 0
    time.sleep(3)  # sealed (seal_ms 1500), and idle since
    before = scrape_url(url)
    time.sleep(2 * MANIFEST_POLL_S + 1)
    after = scrape_url(url)

    def grown(operation: str) -> float:
        return (_sample(after, "topiclake_object_store_requests_total", operation=operation)
                - _sample(before, "topiclake_object_store_requests_total", operation=operation))

    # two or three LISTs of the notices (one if the tick lags); the slow full poll (a partition every
    # manifest_poll_ms / partitions) may add one. A LIST per partition per poll (before) is 32 at least.
    assert 1 <= grown("list") <= 5, grown("list")
    assert grown("get") == 0, grown("get")
