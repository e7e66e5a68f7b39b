"""The table is the archive on an object-store root (issue 32): the topic's table under the
bucket's tables/ prefix, written by the real ingest; `topiclake retain` keeps the sealed segments
the table lacks, then drops them once it holds them; a consumer from the start reads every
record through the same broker, the old ones from the table in the bucket."""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient, NewTopic

from topiclake.client import admin
from topiclake.client.client import ClusterClient
from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import load_newest
from topiclake.store.objects import ObjectStore

from tests.support.bucket_broker import AckedProducer, consume_all
from tests.support.bucket_maintenance import topiclake
from tests.support.waits import wait_for

TOPIC = "archived"
KEYS = PartitionKeys(TOPIC, 0)
EARLIEST, EARLIEST_LOCAL = -2, -4


def _start(bootstrap: str, spec: int) -> int:
    with ClusterClient(bootstrap) as client:
        return admin.list_offsets(client, [(TOPIC, 0)], spec, strict=True)[(TOPIC, 0)]


def test_the_table_in_the_bucket_is_the_archive(sealing_brokers, spark):
    store = ObjectStore(sealing_brokers.root)
    broker = sealing_brokers.start("first")
    kafka_admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    kafka_admin.create_topics([NewTopic(TOPIC, 1, 1, config={
        "remote.storage.enable": "true", "local.retention.ms": "1", "segment.bytes": "8192"})])[TOPIC].result(30)
    producer = AckedProducer(broker.bootstrap, TOPIC, "a").start()
    producer.wait_acked(600)
    # produced on until three segments are sealed: how many bytes 600 records take depends on how
    # the client batched them (on a loaded machine, fewer and bigger batches: fewer 8 KiB rolls)
    wait_for(lambda: len(load_newest(store, KEYS).segments) >= 3, timeout=60, what="sealed segments")
    producer.stop(flush_s=30)

    held = topiclake("retain", "--data", str(sealing_brokers.root), "--topic", TOPIC)
    assert held.returncode == 0, held.stderr
    assert load_newest(store, KEYS).log_start_offset == 0  # no table yet: nothing goes

    ingest(spark, IngestOptions(topics=(TOPIC,), root=sealing_brokers.root, bootstrap="none"))
    done = topiclake("retain", "--data", str(sealing_brokers.root), "--topic", TOPIC)
    assert done.returncode == 0, done.stderr
    start = load_newest(store, KEYS).log_start_offset
    assert start > 0, done.stdout
    wait_for(lambda: _start(broker.bootstrap, EARLIEST_LOCAL) == start, timeout=30, what="the broker to see the start")
    assert _start(broker.bootstrap, EARLIEST) == 0  # the table's first offset

    acked = {value: offset for value, _partition, offset in producer.acked}
    time.sleep(0.5)
    read = consume_all(broker.bootstrap, TOPIC, len(acked), group="from-the-start")
    assert {value: offset for value, _partition, offset in read} == acked
    assert min(offset for _v, _p, offset in read) == 0 < start
