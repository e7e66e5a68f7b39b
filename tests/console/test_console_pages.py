"""The console in a real browser, against a real broker with real data (issue 22).

One broker process (schema registry on); topics produced with confluent-kafka (Avro values
through the registry, UTF-8 and binary values); a consumer group with committed offsets behind
the log end; a Delta table from a real ingest (the shared Spark session) with its stored
validation and Data Docs site. `topiclake console` runs as its own process; headless Chromium
loads each page, the numbers shown are checked against the CLI (`topiclake groups lag`), the
Kafka clients and deltalake, and each page is saved as a screenshot.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, SerializingProducer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from kio.schema.errors import ErrorCode

from topiclake.lake.runs.ingest import IngestOptions, ingest

from tests.support.paths import REPO
from tests.support.broker_process import BrokerProcess
from tests.support.lake import read_table
from tests.support.console import FIRST_PAINT_JS, ConsoleProcess, cells, screenshot
from tests.support.clients import commit_offsets

pytestmark = pytest.mark.slow

ORDER_SCHEMA = {"type": "record", "name": "Order", "namespace": "shop",
                "fields": [{"name": "id", "type": "int"}, {"name": "item", "type": "string"}]}
GROUP = "billing"
LIVE_GROUP = "live-readers"  # one member, subscribed to orders while the tests run
KIP848_GROUP = "live-848"  # the same with the KIP-848 consumer protocol
SHARE_GROUP = "shippers"  # a share group on clicks, its start offset moved back to 2
COMMITTED = {("orders", 0): 2, ("orders", 1): 1, ("clicks", 0): 3}  # behind the log end on purpose


@pytest.fixture(scope="module")
def pages_world(tmp_path_factory, spark):
    tmp = tmp_path_factory.mktemp("console")
    config = tmp / "broker.toml"
    config.write_text("[groups]\ninitial_rebalance_delay_ms = 0\n")
    broker = BrokerProcess(tmp / "data", config=config, args=("--registry-listen", "127.0.0.1:0")).start()
    try:
        registry_url = broker.registry_url()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic("orders", 2), NewTopic("clicks", 1)]).values():
            future.result(15)
        serializer = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(ORDER_SCHEMA))
        orders = SerializingProducer({"bootstrap.servers": broker.bootstrap, "value.serializer": serializer})
        for i in range(7):
            orders.produce("orders", value={"id": i, "item": f"item-{i}"}, partition=i % 2)
        assert orders.flush(15) == 0
        clicks = Producer({"bootstrap.servers": broker.bootstrap})
        for value in (b"home", b"cart", "caf\u00e9".encode(), b"\x00\xff\x10binary", b"checkout"):
            clicks.produce("clicks", value, partition=0)
        assert clicks.flush(15) == 0
        del orders, clicks  # librdkafka's threads would outlive the broker
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP, "enable.auto.commit": False})
        commit_offsets(consumer, [TopicPartition(t, p, o) for (t, p), o in COMMITTED.items()])
        consumer.close()
        share_group_behind(broker.bootstrap, SHARE_GROUP, "clicks", start=2)
        members = [live_member(broker.bootstrap, LIVE_GROUP),
                   live_member(broker.bootstrap, KIP848_GROUP, **{"group.protocol": "consumer"})]
        outcome = ingest(spark, IngestOptions(topics=("orders",), root=broker.data, bootstrap="none",
                                              data_docs=True)).tables[0]
        assert outcome.version == 0 and outcome.quality.success
        try:
            with ConsoleProcess(broker.data, broker.bootstrap) as console:
                yield broker, console
        finally:
            for member in members:
                member.close()
    finally:
        broker.stop()


def live_member(bootstrap: str, group: str, **conf) -> Consumer:
    """A consumer subscribed to orders that holds both its partitions (librdkafka heartbeats on
    its own thread from then on); no offset committed."""
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": f"{group}-client",
                       "enable.auto.commit": False, **conf})
    member.subscribe(["orders"])
    deadline = time.monotonic() + 60
    while len(member.assignment()) < 2:
        assert time.monotonic() < deadline, f"the consumer of {group} got no assignment"
        member.poll(0.2)
    return member


def share_group_behind(bootstrap: str, group: str, topic: str, start: int) -> None:
    """A share group that consumed the whole partition with confluent-kafka's ShareConsumer, then
    (empty again) had its share-partition start offset moved back to `start`."""
    from kio.schema.alter_share_group_offsets.v0 import request as alter

    from topiclake.client.conn import BrokerConnection

    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the futures resolve
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(10)
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "implicit"})
    consumer.subscribe([topic])
    deadline, seen = time.monotonic() + 60, 0
    while seen < 5:
        assert time.monotonic() < deadline, f"the share consumer got {seen} of 5 records in 60 s"
        seen += len([m for m in consumer.poll(timeout=0.3) if m.error() is None])
    consumer.commit_sync(10)
    consumer.close()
    request = alter.AlterShareGroupOffsetsRequest(group_id=group, topics=(
        alter.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=(
            alter.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=start),)),))
    with BrokerConnection(bootstrap) as client:
        deadline = time.monotonic() + 20
        while True:  # NON_EMPTY_GROUP until the coordinator has seen the consumer leave
            done = client.request(request)
            if done.error_code != ErrorCode.non_empty_group or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    assert done.error_code == ErrorCode.none and done.responses[0].partitions[0].error_code == ErrorCode.none, done


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """(low, high) per partition, from librdkafka: another client than the console's."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "console-test-watermarks"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(partitions)}
    finally:
        consumer.close()


def groups_cli(bootstrap: str, *args: str) -> list[str]:
    """The non-empty lines of `topiclake groups ARGS` (exit 0)."""
    done = subprocess.run([sys.executable, "-m", "topiclake.cli", "groups", *args, "--bootstrap", bootstrap],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line.strip()]


def cli_lag(bootstrap: str, group: str) -> dict[tuple[str, int], tuple[int, int, int]]:
    """`topiclake groups lag`: (topic, partition) -> (current offset, log end offset, lag)."""
    rows = [line.split() for line in groups_cli(bootstrap, "lag", group)[1:]]
    return {(r[0], int(r[1])): (int(r[2]), int(r[3]), int(r[4])) for r in rows}


def test_cluster_page_shows_the_broker_and_the_root(page, pages_world, artifacts):
    broker, console = pages_world
    page.goto(console.url + "/")
    meta = json.loads((broker.data / "cluster" / "meta.json").read_text())
    assert meta["cluster_id"] in page.locator("h1").inner_text()
    assert page.locator("#broker-count").inner_text() == "1"
    assert page.locator("#topic-count").inner_text() == "3"  # orders, clicks, _schemas (+ __consumer_offsets)
    assert cells(page, "#brokers td:nth-child(3)") == [str(broker.port)]
    assert f"127.0.0.1:{broker.port}" in page.locator("#registrations").inner_text()
    assert "live until" in page.locator("#registrations").inner_text()
    screenshot(page, artifacts, "cluster")


def test_topics_pages_show_the_offsets_the_clients_see(page, pages_world, artifacts):
    broker, console = pages_world
    page.goto(console.url + "/topics")
    orders = watermarks(broker.bootstrap, "orders", 2)
    clicks = watermarks(broker.bootstrap, "clicks", 1)
    row = page.locator('#topics tr[data-topic="orders"]')
    assert row.locator("td.end").inner_text() == str(sum(h for _, h in orders.values())) == "7"
    assert page.locator('#topics tr[data-topic="clicks"] td.records').inner_text() == "5"
    assert page.locator('#topics tr[data-topic="__consumer_offsets"]').count() == 0  # internal: behind a link
    screenshot(page, artifacts, "topics")

    page.goto(console.url + "/topics/orders")
    for partition, (low, high) in orders.items():
        shown = page.locator(f'#partitions tr[data-partition="{partition}"]')
        assert (shown.locator("td.start").inner_text(), shown.locator("td.end").inner_text()) == (str(low), str(high))
        assert shown.locator("td.local-start").inner_text() == str(low)  # no remote tier: the log is everything
    configs = page.locator("#configs").inner_text()
    assert "retention.ms" in configs and "cleanup.policy" in configs
    screenshot(page, artifacts, "topic")
    assert clicks == {0: (0, 5)}


def test_record_browser_decodes_registry_values_and_shows_raw_ones(page, pages_world, artifacts):
    _broker, console = pages_world
    page.goto(console.url + "/topics/orders/records?partition=0&from=0&to=10")
    offsets = cells(page, "#records tr[data-offset] td:nth-child(1)")
    assert offsets == ["0", "1", "2", "3"]  # ids 0, 2, 4, 6 went to partition 0
    values = [json.loads(v) for v in cells(page, "#records tr[data-offset] td:nth-child(4)")]
    assert values == [{"id": i, "item": f"item-{i}"} for i in (0, 2, 4, 6)]
    assert all(f.startswith("registry id ") for f in cells(page, "#records tr[data-offset] td:nth-child(5)"))
    screenshot(page, artifacts, "records-avro")

    page.goto(console.url + "/topics/clicks/records?partition=0&from=1&to=4")
    assert cells(page, "#records tr[data-offset] td:nth-child(1)") == ["1", "2", "3"]
    assert cells(page, "#records tr[data-offset] td:nth-child(4)")[:2] == ["cart", "caf\u00e9"]
    assert cells(page, "#records tr[data-offset] td:nth-child(5)") == ["utf-8", "utf-8", "hex"]
    assert cells(page, "#records tr[data-offset] td:nth-child(4)")[2] == "00 ff 10 62 69 6e 61 72 79"
    page.goto(console.url + "/topics/clicks/records?partition=0&from=x")
    assert "from must be an integer" in page.content()


def test_groups_pages_show_the_lag_the_cli_reports(page, pages_world, artifacts):
    broker, console = pages_world
    expected = cli_lag(broker.bootstrap, GROUP)
    assert {tp: row[0] for tp, row in expected.items()} == COMMITTED
    page.goto(console.url + "/groups")
    assert page.locator(f'#groups tr[data-group="{GROUP}"] td.lag').inner_text() == \
        str(sum(lag for _, _, lag in expected.values()))
    screenshot(page, artifacts, "groups")

    page.goto(console.url + f"/groups/{GROUP}")
    shown = {}
    for row in page.locator("#lag tr[data-tp]").all():
        topic, partition = row.locator("td").nth(0).inner_text(), int(row.locator("td").nth(1).inner_text())
        shown[(topic, partition)] = (int(row.locator("td.committed").inner_text()),
                                     int(row.locator("td.end").inner_text()), int(row.locator("td.lag").inner_text()))
    assert shown == expected
    # the lag-over-time plot: the console samples every 0.5 s here
    deadline = time.monotonic() + 20
    while page.locator("svg.chart polyline").count() == 0:
        assert time.monotonic() < deadline, "no lag plot after 20 s of sampling"
        time.sleep(0.5)
        page.reload()
    assert "orders: 4" in page.locator(".legend").inner_text()  # (4-2) + (3-1)
    screenshot(page, artifacts, "group")


def test_a_live_member_and_its_assignment_are_shown_as_the_cli_describes_them(page, pages_world, artifacts):
    broker, console = pages_world
    group_line, member_line = groups_cli(broker.bootstrap, "describe", LIVE_GROUP)
    described = dict(field.split(": ", 1) for field in member_line.strip().split("\t"))
    page.goto(console.url + f"/groups/{LIVE_GROUP}")
    assert page.locator("#state").inner_text() == "Stable" == group_line.split("State: ")[1].split("\t")[0]
    members = page.locator("#members tr").nth(1).locator("td")
    assert members.nth(0).inner_text() == described["Member"]
    assert members.nth(1).inner_text() == described["Client"] == f"{LIVE_GROUP}-client"
    assert members.nth(3).inner_text() == described["Assignment"].replace(",", ", ") == "orders-0, orders-1"
    owners = cells(page, "#lag tr[data-tp] td:nth-child(6)")
    assert owners == [described["Member"]] * 2
    screenshot(page, artifacts, "group-live")


def test_a_kip848_group_shows_its_assignment(page, pages_world, artifacts):
    """DescribeGroups describes a consumer-protocol group without assignments (so does `groups
    describe`); the console asks ConsumerGroupDescribe for them."""
    _broker, console = pages_world
    page.goto(console.url + "/groups")
    assert page.locator(f'#groups tr[data-group="{KIP848_GROUP}"] td').nth(1).inner_text() == "consumer"
    page.goto(console.url + f"/groups/{KIP848_GROUP}")
    members = page.locator("#members tr").nth(1).locator("td")
    assert members.nth(1).inner_text() == f"{KIP848_GROUP}-client"
    assert members.nth(3).inner_text() == "orders-0, orders-1"
    assert cells(page, "#lag tr[data-tp] td.committed") == ["-", "-"]  # nothing committed
    screenshot(page, artifacts, "group-kip848")


def test_share_group_pages_show_the_lag_the_cli_reports(page, pages_world, artifacts):
    broker, console = pages_world
    expected = [line.split()[:5] for line in groups_cli(broker.bootstrap, "lag", SHARE_GROUP)[1:]]
    assert expected == [["clicks", "0", "2", "5", "3"]]
    page.goto(console.url + "/groups")
    row = page.locator(f'#groups tr[data-group="{SHARE_GROUP}"]')
    assert row.locator("td").nth(1).inner_text() == "share" and row.locator("td.lag").inner_text() == "3"
    page.goto(console.url + f"/groups/{SHARE_GROUP}")
    shown = [[row.locator("td").nth(i).inner_text() for i in range(5)] for row in page.locator("#lag tr[data-tp]").all()]
    assert shown == expected
    screenshot(page, artifacts, "share-group")


def test_tables_pages_show_the_delta_table(page, pages_world, artifacts):
    broker, console = pages_world
    table, data = read_table(broker.data / "tables" / "orders")
    page.goto(console.url + "/tables")
    row = page.locator('#tables tr[data-table="orders"]')
    assert row.locator("td.rows").inner_text() == str(data.num_rows) == "7"
    screenshot(page, artifacts, "tables")

    page.goto(console.url + "/tables/orders")
    assert page.locator("#version").inner_text() == str(table.version())
    assert page.locator("#rows").inner_text() == "7"
    ends = watermarks(broker.bootstrap, "orders", 2)
    coverage = page.locator("table.coverage")
    assert coverage.count() == 1
    for partition, (_low, high) in ends.items():
        tp = coverage.locator(f'tr[data-tp="orders-{partition}"]')
        assert tp.locator("td.committed").inner_text() == str(high)
        assert tp.locator("td").nth(4).inner_text() == "none"  # no gap
    assert "success" in page.locator("#quality").inner_text()
    screenshot(page, artifacts, "table")

    page.click("#data-docs")
    page.wait_for_load_state()
    assert page.url.endswith("/quality/index.html") and "Expectations" in page.content()
    screenshot(page, artifacts, "data-docs")


def test_schemas_pages_list_the_registry(page, pages_world, artifacts):
    _broker, console = pages_world
    page.goto(console.url + "/schemas")
    assert page.locator('#subjects tr[data-subject="orders-value"] td.versions').inner_text() == "1"
    screenshot(page, artifacts, "schemas")
    page.goto(console.url + "/schemas/orders-value")
    assert '"name": "Order"' in page.locator("pre.schema").inner_text().replace('"name":"Order"', '"name": "Order"')


def test_throughput_is_plotted_and_a_missing_topic_is_a_page_not_a_crash(page, pages_world, artifacts):
    broker, console = pages_world
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(30):
        producer.produce("clicks", f"more-{i}".encode(), partition=0)
        producer.flush(5)
        time.sleep(0.05)
    time.sleep(1.2)
    page.goto(console.url + "/")
    assert page.locator("svg.chart polyline").count() == 2  # records/s and bytes/s
    screenshot(page, artifacts, "cluster-throughput")
    response = page.goto(console.url + "/topics/no-such-topic")
    assert response.status == 404 and "UNKNOWN_TOPIC_OR_PARTITION" in page.locator("#error").inner_text()
    assert page.goto(console.url + "/healthz").status == 200


def test_first_paint_under_500_ms_with_100_topics(page, pages_world, artifacts):
    broker, console = pages_world
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(f"load-{i:03d}", 1) for i in range(100)]).values():
        future.result(30)
    for path in ("/", "/topics"):
        page.goto(console.url + path)  # warm: connection, templates
        timings = []
        for _ in range(3):
            page.goto(console.url + path)
            timings.append(page.evaluate(FIRST_PAINT_JS))
        print(f"first paint of {path} with 103 topics: {sorted(timings)} ms")
        assert min(timings) < 500, timings
    assert page.locator("#topics tr[data-topic]").count() == 103  # and orders, clicks, _schemas
