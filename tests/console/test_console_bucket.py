"""The console on an object-store root (Chromium, the real versitygw): a broker on the bucket (its
schema registry on), a table ingested into the same bucket with a quality suite and its Data Docs
site built by `topiclake data-docs --data s3://...`; `topiclake console --data s3://...` shows the
root, its cluster id, the partitions' bytes in the bucket, the records (Avro ones decoded through
the registry replayed from the bucket), the schemas, the table with its history, committed ranges
and stored quality result, and the Data Docs site, as on a directory root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import confluent_kafka as ck

from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.store.objects import ObjectStore

from tests.support.broker_process import free_port
from tests.support.bucket_broker import BucketBrokers
from tests.support.console import ConsoleProcess, cells, screenshot
from tests.support.waits import wait_for

TOPIC = "shown"
RECORDS = 20
TYPED = "typed"  # Avro values through the broker's registry
ORDER_SCHEMA = {"type": "record", "name": "Order", "namespace": "shop",
                "fields": [{"name": "id", "type": "int"}, {"name": "item", "type": "string"}]}


def _registry_ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/subjects", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _produce_avro(bootstrap: str, registry_url: str) -> None:
    from confluent_kafka import SerializingProducer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer

    serializer = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(ORDER_SCHEMA))
    producer = SerializingProducer({"bootstrap.servers": bootstrap, "value.serializer": serializer, "acks": "all"})
    for i in range(3):
        producer.produce(TYPED, value={"id": i, "item": f"item-{i}"}, partition=0)
    assert producer.flush(60) == 0


def test_the_console_reads_a_bucket_root(page, artifacts, tmp_path, spark, s3_root, monkeypatch):
    for name, value in s3_root.env.items():
        monkeypatch.setitem(os.environ, name, value)
    root = s3_root.root
    store = ObjectStore(root)
    brokers = BucketBrokers(tmp_path, root)
    try:
        registry_port = free_port()
        broker = brokers.start("b", args=("--registry-listen", f"127.0.0.1:{registry_port}"))
        registry_url = f"http://127.0.0.1:{registry_port}"
        wait_for(lambda: _registry_ready(registry_url), timeout=60, what="the broker's schema registry")
        _produce_avro(broker.bootstrap, registry_url)
        producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
        for n in range(RECORDS):
            producer.produce(TOPIC, key=f"k{n}".encode(), value=f"value-{n}".encode(), partition=0)
        assert producer.flush(60) == 0
        del producer  # librdkafka's threads would outlive the broker
        wait_for(lambda: store.head(f"topics/{TOPIC}.json") is not None, timeout=30, what="the topic in the bucket")
        suites = tmp_path / "expectations"
        suites.mkdir()
        (suites / f"{TOPIC}.json").write_text(json.dumps({"expectations": [
            {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "value"}}]}))
        result = ingest(spark, IngestOptions(topics=(TOPIC,), root=root, expectations_dir=suites, bootstrap="none"))
        assert result.tables[0].version == 0 and result.records == RECORDS
        cluster_id = json.loads(store.get("cluster/meta.json"))["cluster_id"]
        built = subprocess.run([sys.executable, "-m", "topiclake.cli", "data-docs", "--data", str(root)],
                               env={**os.environ, **s3_root.env}, capture_output=True, text=True, timeout=300)
        assert built.returncode == 0, built.stderr
        assert built.stdout.strip() == f"Data Docs of 1 validations: {root.uri('quality', 'index.html')}"

        with ConsoleProcess(str(root), broker.bootstrap, log_path=tmp_path / "console.log") as console:
            page.goto(console.url + "/")
            screenshot(page, artifacts, "bucket-cluster")
            assert cells(page, "p.muted code")[:2] == [str(root), cluster_id]

            page.goto(console.url + "/topics")
            row = page.locator("tr", has_text=TOPIC).first
            shown_bytes = row.locator("td.num").last.inner_text()
            assert shown_bytes not in ("0 B", ""), "the partition's .log objects in the bucket are counted"

            page.goto(console.url + f"/topics/{TOPIC}/records?partition=0&from=0")
            assert "value-0" in page.content() and f"value-{RECORDS - 1}" in page.content()

            page.goto(console.url + f"/topics/{TYPED}/records?partition=0&from=0")
            values = cells(page, "#records tr[data-offset] td:nth-child(4)")
            assert [json.loads(v) if v.startswith("{") else v for v in values] == \
                [{"id": i, "item": f"item-{i}"} for i in range(3)], f"not decoded through the registry: {values}"
            page.goto(console.url + "/schemas")
            assert page.locator(f'#subjects tr[data-subject="{TYPED}-value"] td.versions').inner_text() == "1"

            page.goto(console.url + "/tables")
            screenshot(page, artifacts, "bucket-tables")
            table_row = page.locator(f"tr[data-table={TOPIC}]")
            assert table_row.locator("td.rows").inner_text() == str(RECORDS)

            page.goto(console.url + f"/tables/{TOPIC}")
            screenshot(page, artifacts, "bucket-table")
            content = page.content()
            assert root.uri("tables", TOPIC) in content
            history = page.locator("table#history tr").all_inner_texts()
            assert any(result.run_id in text and "ingest" in text for text in history[1:]), history
            quality = page.locator("table#quality tr").all_inner_texts()
            assert any(f"ingest-{result.run_id}" in text and "success" in text and "1 / 1" in text
                       for text in quality[1:]), quality
            page.locator("table#quality a", has_text="Data Docs").first.click()  # the validation's page
            shown = page.locator("body").inner_text()
            assert "/quality/validations/" in page.url and "value" in shown and "Overview" in shown, shown[:2000]
            page.goto(console.url + "/tables")
            page.click("#data-docs")
            assert page.url.endswith("/quality/index.html") and "Expectations" in page.content()
            screenshot(page, artifacts, "bucket-data-docs")
    finally:
        brokers.kill_all()


def test_a_bucket_root_without_bootstrap_or_without_a_root_is_refused_in_one_line(tmp_path, s3_root):
    import subprocess
    import sys

    def console(data: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "topiclake.cli", "console", "--data", data, *args],
                              env={**os.environ, **s3_root.env}, capture_output=True, text=True, timeout=60)

    empty = s3_root.root.uri("elsewhere")
    run = console(empty, "--bootstrap", "127.0.0.1:9")
    assert run.returncode != 0 and run.stderr.strip() == f"error: storage root {empty} does not exist"
    ObjectStore(s3_root.root).put("cluster/meta.json", b'{"cluster_id": "x", "version": 0}')
    run = console(str(s3_root.root))
    assert run.returncode != 0
    assert "a bucket registers none" in run.stderr and "--bootstrap" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
