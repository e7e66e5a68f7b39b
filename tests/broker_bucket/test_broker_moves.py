"""A broker on a bucket root killed -9 mid-produce, and a new one started with a new empty cache
directory (another machine): every acknowledged record is there exactly once, no offset is used
twice, committed group offsets, the topic's config and the cluster id survive, and the objects are Kafka segments (DumpLogSegments)."""

from __future__ import annotations

import time
from collections import Counter

from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.support.bucket_broker import AckedProducer, committed, consume_all
from tests.support.kafka_dump import dump
from topiclake.store.objects import ObjectStore

TOPIC = "moves"


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _sealed_segments(store: ObjectStore, prefix: str) -> list[str]:
    """The partition's sealed `.log` objects (flush objects carry `.e<epoch>` in their names)."""
    return [info.key for info in store.list(prefix)
            if info.key.endswith(".log") and ".e" not in info.key.rpartition("/")[2]]


def _wait_for_a_sealed_segment(store: ObjectStore, prefix: str, timeout_s: float = 60) -> None:
    """A seal is due seal_ms after the first unsealed flush; under load it lands later than that."""
    deadline = time.monotonic() + timeout_s
    while not _sealed_segments(store, prefix):
        assert time.monotonic() < deadline, f"no sealed segment under {prefix} after {timeout_s}s"
        time.sleep(0.2)


def test_kill9_mid_produce_then_a_new_cache_dir_serves_every_acknowledged_record(bucket_brokers, kafka_tools,
                                                                                 tmp_path):
    first = bucket_brokers.start("first")
    admin = _admin(first.bootstrap)
    admin.create_topics([NewTopic(TOPIC, 2, 1, config={"retention.ms": "123456789"})])[TOPIC].result(30)
    cluster_id = admin.list_topics(timeout=30).cluster_id
    producer = AckedProducer(first.bootstrap, TOPIC, "a").start()
    producer.wait_acked(300)
    early = consume_all(first.bootstrap, TOPIC, 300, group="g", commit=True)  # offsets committed by a group
    _wait_for_a_sealed_segment(ObjectStore(bucket_brokers.root), f"log/{TOPIC}-0")  # seal_ms passed
    producer.wait_acked(len(producer.acked) + 200)
    first.kill()  # kill -9 with produce requests in flight
    producer.stop()
    acked = {value: (partition, offset) for value, partition, offset in producer.acked}
    assert len(acked) >= 500

    second = bucket_brokers.start("second")  # waits out the first broker's lease
    records = consume_all(second.bootstrap, TOPIC, len(acked))
    values = Counter(value for value, _p, _o in records)
    assert not [v for v, n in values.items() if n > 1], "a record read twice"
    assert set(acked) <= set(values), f"{len(set(acked) - set(values))} acknowledged records lost"
    positions = Counter((p, o) for _v, p, o in records)
    assert all(n == 1 for n in positions.values()), "an offset used twice"
    for value, partition, offset in records:  # acknowledged offsets are where the producer was told
        if value in acked:
            assert acked[value] == (partition, offset)

    admin = _admin(second.bootstrap)
    assert admin.list_topics(timeout=30).cluster_id == cluster_id
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, TOPIC)])
    config = next(iter(described.values())).result(30)
    assert config["retention.ms"].value == "123456789"
    # a partition the early read got nothing from has no commit (-1001): the producer's sticky
    # batches may all have gone to one partition by then
    group_offsets = {p: o for p, o in committed(second.bootstrap, TOPIC, "g", 2).items() if o != -1001}
    read_early = Counter(p for _v, p, _o in early)
    assert group_offsets == {p: max(o for _v, q, o in early if q == p) + 1 for p in read_early}

    # A produce to the new broker continues each partition after the old one's offsets.
    more = AckedProducer(second.bootstrap, TOPIC, "b").start()
    more.wait_acked(50)
    more.stop(flush_s=30)
    for _value, partition, offset in more.acked:
        assert (partition, offset) not in positions

    store = ObjectStore(bucket_brokers.root)
    segments = [info.key for info in store.list(f"log/{TOPIC}-0") if info.key.endswith(".log")]
    assert _sealed_segments(store, f"log/{TOPIC}-0"), f"no sealed segment among {segments}"
    local = []
    for key in segments:
        path = tmp_path / "dump" / key.rpartition("/")[2]
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(store.get(key))
        local.append(path)
    output, _gaps = dump(kafka_tools, *local)
    assert "baseOffset: 0 " in output
