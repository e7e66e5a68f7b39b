"""The console's object-store figures: a broker on a bucket root of the real S3 server
(versitygw) serves /metrics and registers its URL; the console finds it there and shows the
broker's requests, errors, bytes and latency per operation on the cluster page (Chromium)."""

from __future__ import annotations

import os

import confluent_kafka as ck

from tests.support.broker_process import free_port
from tests.support.bucket_broker import BucketBrokers
from tests.support.console import ConsoleProcess, cells, screenshot
from tests.support.metrics import scrape_url

RECORDS = 100
VALUE = b"c" * 2000


def _count(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def _errors(samples, op: str) -> float:
    return sum(v for (name, labels), v in samples.items()
               if name == "topiclake_object_store_errors_total" and ("operation", op) in labels)


def test_the_cluster_page_shows_the_object_store_of_a_bucket_broker(page, artifacts, tmp_path, s3_root,
                                                                     monkeypatch):
    for name, value in s3_root.env.items():
        monkeypatch.setitem(os.environ, name, value)
    brokers = BucketBrokers(tmp_path, s3_root.root)
    try:
        port = free_port()
        broker = brokers.start("watched", args=("--metrics-listen", f"127.0.0.1:{port}"))
        producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
        for _ in range(RECORDS):
            producer.produce("watched", value=VALUE)
        assert producer.flush(60) == 0
        metrics_url = f"http://127.0.0.1:{port}/metrics"
        # no --broker-metrics: the console reads the URL the broker registered in its (cache) root
        with ConsoleProcess(tmp_path / "watched-cache", broker.bootstrap, log_path=tmp_path / "console.log") as console:
            before = scrape_url(metrics_url)
            page.goto(console.url + "/")
            after = scrape_url(metrics_url)
            screenshot(page, artifacts, "cluster-object-store")
            assert cells(page, "h3 code") == [metrics_url]
            shown = {op: page.locator(f"table.object-store tr[data-operation={op}]") for op in ("put", "list", "get")}
            for op, row in shown.items():
                requests = int(row.locator("td.requests").inner_text().replace(",", ""))
                low = _count(before, "topiclake_object_store_requests_total", operation=op)
                high = _count(after, "topiclake_object_store_requests_total", operation=op)
                assert low <= requests <= high, (op, low, requests, high)  # the broker's own count, read then
            put = shown["put"]
            assert int(put.locator("td.requests").inner_text().replace(",", "")) > 0
            assert int(put.locator("td.bytes-written").get_attribute("data-value")) >= RECORDS * len(VALUE)
            assert put.locator("td.mean-ms").inner_text().endswith(" ms")
            assert put.locator("td.p99-ms").inner_text().startswith("≤ ")
            put_errors = int(put.locator("td.errors").inner_text().split()[0].replace(",", ""))
            assert _errors(before, "put") <= put_errors <= _errors(after, "put")
    finally:
        brokers.kill_all()


def test_a_file_root_broker_shows_no_object_store_and_a_silent_endpoint_is_reported(page, tmp_path):
    from tests.support.broker_process import BrokerProcess

    port = free_port()
    broker = BrokerProcess(tmp_path / "data", log_path=tmp_path / "broker.log",
                           args=("--metrics-listen", f"127.0.0.1:{port}")).start()
    try:
        with ConsoleProcess(tmp_path / "data", broker.bootstrap, log_path=tmp_path / "console.log") as console:
            page.goto(console.url + "/")
            assert page.locator("table.object-store").count() == 0  # registered, but no object store
            assert "Object store" not in page.content()
        silent = f"http://127.0.0.1:{free_port()}/metrics"
        with ConsoleProcess(tmp_path / "data", broker.bootstrap, log_path=tmp_path / "console2.log",
                            args=("--broker-metrics", silent)) as console:
            page.goto(console.url + "/")
            assert cells(page, "h3 code") == [silent]
            assert "did not answer" in page.locator("p.bad").inner_text()
    finally:
        broker.stop()


def test_figures_parsed_from_the_exposition_match_what_was_counted():
    from prometheus_client import CollectorRegistry, generate_latest

    from topiclake.console.object_store import parse
    from topiclake.store.metrics import ObjectStoreMetrics

    counted = ObjectStoreMetrics()
    for seconds in [0.002] * 98 + [0.2, 3.0]:
        counted.record("put", seconds, bytes_written=1000)
    counted.record("get", 0.004, bytes_read=70)
    counted.record("get", 0.004, error="not_found")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(counted.collector())
    figures = {f.operation: f for f in parse(generate_latest(registry).decode())}

    put, get = figures["put"], figures["get"]
    assert (put.requests, put.error_count, put.bytes_written, put.bytes_read) == (100, 0, 100_000, None)
    assert abs(put.mean_ms - 33.96) < 1e-9  # (98 x 2 ms + 200 ms + 3 s) / 100
    assert put.quantile_ms(0.5) == 2.5 and put.quantile_ms(0.99) == 250 and put.quantile_ms(1.0) == 5000
    assert (get.requests, get.errors, get.bytes_read, get.bytes_written) == (2, {"not_found": 1}, 70, None)
    assert figures["delete"].requests == 0 and figures["delete"].quantile_ms(0.99) is None
