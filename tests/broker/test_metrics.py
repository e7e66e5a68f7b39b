"""/metrics of a real broker ([metrics] listen): a known workload from real Kafka clients, then a
scrape over HTTP parsed with Prometheus' own parser, and the series checked value by value."""

from __future__ import annotations

import logging
import re
import time

import confluent_kafka as ck
import pytest

from topiclake.client.conn import AuthenticationError, BrokerConnection
from topiclake.broker.config import MetricsConfig
from topiclake.broker.security.config import SecurityConfig
from topiclake.security.client_config import ClientSecurity

from tests.support.in_process_broker import InProcessBroker
from tests.support.wire import fetch
from tests.support.metrics import scrape_url
from tests.support.clients import commit_offsets

TOPIC = "metered"
GROUP = "lagging"
# partition -> values produced to it (known sizes), and where the group commits
PRODUCED = {0: [b"x" * 100] * 6, 1: [b"y" * 250] * 4}
COMMITTED = {0: 4, 1: 4}
# Record i of each partition was created an hour ago plus i seconds (CreateTime, set by the producer):
# lag_seconds must be the age of the record at the committed offset.
CREATED_MS = int(time.time() * 1000) - 3_600_000


def created_ms(index: int) -> int:
    return CREATED_MS + index * 1000


def scrape(broker: InProcessBroker) -> dict[tuple[str, tuple], float]:
    return scrape_url(f"http://127.0.0.1:{broker.server.metrics.port}/metrics")


def value(samples, name: str, **labels) -> float:
    return samples[(name, tuple(sorted((k, str(v)) for k, v in labels.items())))]


@pytest.fixture
def metered(tmp_path):
    b = InProcessBroker(tmp_path / "data", listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                        security=SecurityConfig(sasl_enabled_mechanisms=("PLAIN",), failed_authentication_delay_ms=0),
                        metrics=MetricsConfig(listen="127.0.0.1:0")).start()
    yield b
    b.stop()


def run_workload(broker: InProcessBroker) -> None:
    broker.create_topic(TOPIC, partitions=2)
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for partition, values in PRODUCED.items():
        for i, v in enumerate(values):
            producer.produce(TOPIC, value=v, partition=partition, timestamp=created_ms(i))
            producer.flush(10)  # one batch per record: the sizes below do not depend on batching
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                            "auto.offset.reset": "earliest"})
    consumer.assign([ck.TopicPartition(TOPIC, p, 0) for p in PRODUCED])
    got, deadline = 0, time.monotonic() + 20
    while got < sum(map(len, PRODUCED.values())) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got += 1
    assert got == sum(map(len, PRODUCED.values()))
    commit_offsets(consumer, [ck.TopicPartition(TOPIC, p, o) for p, o in COMMITTED.items()])
    consumer.close()


def test_metrics_report_the_workload(metered):
    broker = metered
    run_workload(broker)
    with broker.client() as client:  # a bad request: a fetch past the log end
        assert fetch(client, TOPIC, 1000).error_code.name == "offset_out_of_range"
    failed_login = ClientSecurity(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                                  sasl_username="nobody", sasl_password="wrong")
    sasl_address = f"127.0.0.1:{broker.server.ports['SASL_PLAINTEXT']}"
    with pytest.raises(AuthenticationError):
        BrokerConnection(sasl_address, security=failed_login, timeout=10)

    before = scrape(broker)
    with broker.client(), broker.client():  # two more connections open while scraping
        m = scrape(broker)
    # per topic and partition: records, bytes, log size and offsets
    total = sum(map(len, PRODUCED.values()))
    assert value(m, "kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) == total
    # a file root has no object store: none of its series (tests/broker_bucket/test_metrics.py)
    assert not [name for name, _labels in m if name.startswith("topiclake_object_store_")]
    sizes = {p: value(m, "kafka_log_log_size", topic=TOPIC, partition=p) for p in PRODUCED}
    for p, values in PRODUCED.items():
        assert value(m, "topiclake_partition_messagesin_total", topic=TOPIC, partition=p) == len(values)
        assert value(m, "kafka_log_log_logendoffset", topic=TOPIC, partition=p) == len(values)
        assert value(m, "kafka_log_log_logstartoffset", topic=TOPIC, partition=p) == 0
        # Produce appended every byte of the log: one batch per record, 61-byte header plus the record
        assert value(m, "topiclake_partition_bytesin_total", topic=TOPIC, partition=p) == sizes[p]
        assert sizes[p] > len(values) * (61 + len(values[0]))
    assert value(m, "kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC) == sum(sizes.values())
    assert value(m, "kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC) >= sum(sizes.values())
    # the group: committed offsets, lag, and lag in seconds (the age of the record at the committed offset)
    for p, offset in COMMITTED.items():
        assert value(m, "kafka_consumergroup_group_offset", group=GROUP, topic=TOPIC, partition=p) == offset
        lag = len(PRODUCED[p]) - offset
        assert value(m, "kafka_consumergroup_group_lag", group=GROUP, topic=TOPIC, partition=p) == lag
        seconds = value(m, "kafka_consumergroup_group_lag_seconds", group=GROUP, topic=TOPIC, partition=p)
        age = time.time() - created_ms(offset) / 1000
        assert (seconds == 0) if lag == 0 else (age - 30 < seconds <= age)
    # per API: requests, errors, latency
    requests = {labels: v for (name, labels), v in m.items() if name == "kafka_network_requestmetrics_requests_total"}
    by_api = {}
    for labels, v in requests.items():
        by_api[dict(labels)["request"]] = by_api.get(dict(labels)["request"], 0) + v
    assert by_api["Produce"] == total and by_api["Fetch"] > 0 and by_api["OffsetCommit"] >= 1
    assert value(m, "kafka_network_requestmetrics_errors_total", request="Fetch", error="OFFSET_OUT_OF_RANGE") == 1
    assert value(m, "kafka_network_requestmetrics_errors_total", request="Produce", error="NONE") == total
    assert value(m, "topiclake_network_request_duration_seconds_count", request="Produce") == total
    assert value(m, "topiclake_network_request_duration_seconds_bucket", request="Produce", le="+Inf") == total
    assert value(m, "topiclake_network_request_duration_seconds_sum", request="Produce") > 0
    # connections and authentication
    open_before = value(before, "kafka_server_socketservermetrics_connection_count", listener="PLAINTEXT")
    assert value(m, "kafka_server_socketservermetrics_connection_count", listener="PLAINTEXT") == open_before + 2
    assert value(m, "kafka_server_socketservermetrics_connection_creation_total", listener="PLAINTEXT") >= 4
    assert value(m, "kafka_server_socketservermetrics_failed_authentication_total", listener="SASL_PLAINTEXT") == 1
    # the internal topic's partitions are reported too (the group's offsets live there)
    assert any(name == "kafka_log_log_logendoffset" and dict(labels)["topic"] == "__consumer_offsets"
               and v > 0 for (name, labels), v in m.items())


def test_metrics_are_off_by_default(broker):
    assert broker.server.metrics is None


def test_a_metrics_address_in_use_fails_the_start_in_one_line(metered, tmp_path):
    taken = f"127.0.0.1:{metered.server.metrics.port}"
    other = InProcessBroker(tmp_path / "other", metrics=MetricsConfig(listen=taken))
    with pytest.raises(Exception, match=r"cannot listen on 127\.0\.0\.1:\d+ \(\[metrics\]\)"):
        asyncio_run_start(other)


def asyncio_run_start(broker: InProcessBroker) -> None:
    import asyncio

    asyncio.run(broker.server.start())


def test_a_bad_listen_value_is_a_config_error():
    from topiclake.broker.config import BrokerConfig
    from topiclake.segments.errors import InvalidConfigError

    with pytest.raises(InvalidConfigError, match=r"\[metrics\] listen must be host:port"):
        BrokerConfig.from_settings({"metrics": {"listen": "9404"}})
    with pytest.raises(InvalidConfigError, match=r"unknown \[metrics\] settings: port"):
        BrokerConfig.from_settings({"metrics": {"port": 9404}})


def test_a_start_logs_one_summary_line_not_a_line_per_partition(tmp_path, caplog):
    first = InProcessBroker(tmp_path / "data").start()
    try:
        run_workload(first)  # creates __consumer_offsets (50 partitions) and commits into one of them
    finally:
        first.stop()
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="topiclake"):
        again = InProcessBroker(tmp_path / "data").start()
        try:
            deadline = time.monotonic() + 20
            while again.context.groups.runtime.loading() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.1)
        finally:
            again.stop()
    info = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert not [line for line in info if line.startswith("opened __consumer_offsets-")]
    assert len([line for line in debug if line.startswith("opened __consumer_offsets-")]) == 50
    summaries = [line for line in info if line.startswith("__consumer_offsets: 50 partitions loaded in ")]
    assert len(summaries) == 1 and re.search(r"in \d+\.\d\d s \([1-9]\d* records replayed\)$", summaries[0]), info


def test_share_partitions_report_in_flight_and_acquired_records(tmp_path):
    from kio.schema.errors import ErrorCode

    from topiclake.broker.group.config import GroupsConfig
    from topiclake.broker.group.share_config import ShareConfig

    from tests.support.share_wire import ACCEPT, joined, partition_of, share_ack, share_fetch
    from tests.support.wire import batch, produce

    broker = InProcessBroker(tmp_path / "data", metrics=MetricsConfig(listen="127.0.0.1:0"),
                             groups=GroupsConfig(offsets_topic_partitions=1, initial_rebalance_delay_ms=0),
                             share=ShareConfig(state_topic_partitions=1)).start()
    try:
        broker.create_topic("shared")
        with broker.client() as c:
            assert produce(c, "shared", batch([b"a", b"b", b"c"])).error_code == ErrorCode.none
            topic_id = joined(broker, c, "shared", "sg", "m1")
            acquired = partition_of(share_fetch(c, "sg", "m1", 0, topic_id)).acquired_records
            assert [(a.first_offset, a.last_offset) for a in acquired] == [(0, 2)]
            assert share_ack(c, "sg", "m1", 1, topic_id, [(0, 0, ACCEPT)]).error_code == ErrorCode.none
            m = scrape(broker)  # while connected: a closing connection releases its share session's records
    finally:
        broker.stop()
    labels = {"group": "sg", "topic": "shared", "partition": 0}
    assert value(m, "kafka_server_sharepartitionmetrics_inflightmessagecount", **labels) == 2  # offsets 1 and 2
    assert value(m, "topiclake_sharepartition_acquired_records", **labels) == 2
    assert value(m, "topiclake_sharepartition_acquisitions_total", **labels) == 3
    size = value(m, "kafka_log_log_size", topic="shared", partition=0)
    assert value(m, "kafka_server_brokertopicmetrics_bytesout_total", topic="shared") == size  # ShareFetch's bytes
    assert value(m, "kafka_network_requestmetrics_requests_total", request="ShareFetch", version=1) == 1
