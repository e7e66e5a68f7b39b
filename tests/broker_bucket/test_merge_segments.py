"""`topiclake merge-segments` on a bucket root (issue 29 point 2): small closed segments of a live
broker merged into one Kafka segment each by a manifest commit while the broker produces and
seals; every acknowledged record is read once, at its offset, from the broker and from one that
takes over; DumpLogSegments reads the merged objects; a merge killed -9 midway leaves the log as
it was, and a rerun finishes it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter

from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.bucket_batches import values
from tests.support.bucket_broker import AckedProducer, consume_all
from tests.support.bucket_maintenance import topiclake
from tests.support.kafka_dump import dump_segment_objects
from tests.support.paths import REPO
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import load_newest
from topiclake.objectlog.reader import read_log
from topiclake.store.objects import ObjectStore

TOPIC = "merged"


def _produce_small_segments(brokers, partitions: int, seconds: float):
    """A broker sealing every 400 ms, a topic, and a producer that ran `seconds` past 300 acks."""
    first = brokers.start("first")
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(30)
    producer = AckedProducer(first.bootstrap, TOPIC, "m").start()
    producer.wait_acked(300)
    time.sleep(seconds)
    return first, producer


def _check_every_acknowledged_record_once(records, producer: AckedProducer) -> None:
    acked = {value: (partition, offset) for value, partition, offset in producer.acked}
    counts = Counter(value for value, _p, _o in records)
    assert not [value for value, n in counts.items() if n > 1], "a record read twice"
    assert set(acked) <= set(counts), f"{len(set(acked) - set(counts))} acknowledged records lost"
    assert all(n == 1 for n in Counter((p, o) for _v, p, o in records).values()), "an offset used twice"
    for value, partition, offset in records:
        if value in acked:
            assert acked[value] == (partition, offset)


def _merged(manifest) -> list:
    return [entry for entry in manifest.segments if ".m" in entry.key.rpartition("/")[2]]


def test_merges_race_a_live_broker_and_lose_nothing(sealing_brokers, kafka_tools, tmp_path):
    store = ObjectStore(sealing_brokers.root)
    keys = [PartitionKeys(TOPIC, p) for p in range(2)]
    first, producer = _produce_small_segments(sealing_brokers, 2, 3.0)
    before = [load_newest(store, k) for k in keys]
    assert all(len(m.segments) >= 3 for m in before), before

    dry = topiclake("merge-segments", "--data", str(sealing_brokers.root), "--topic", TOPIC, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"{TOPIC}-0: would merge" in dry.stdout and "would merge" in dry.stdout.splitlines()[-1], dry.stdout
    assert not any(_merged(load_newest(store, k)) for k in keys)  # a dry run commits nothing

    for _round in range(3):  # the broker keeps producing and sealing meanwhile
        done = topiclake("merge-segments", "--data", str(sealing_brokers.root), "--topic", TOPIC)
        assert done.returncode == 0, done.stderr
        assert f"{TOPIC}-0: merged " in done.stdout, done.stdout
        time.sleep(0.8)
    acked_then = len(producer.acked)
    producer.wait_acked(acked_then + 200)
    assert first.proc.poll() is None and not producer.failed, producer.failed[:3]
    producer.stop(flush_s=30)
    time.sleep(1.0)  # a last seal lands on top of the merges
    after = [load_newest(store, k) for k in keys]
    for old, new in zip(before, after):
        assert _merged(new) and new.leader_epoch == old.leader_epoch  # the broker was never fenced
        assert new.end_offset > old.end_offset and new.log_start_offset == old.log_start_offset
    _check_every_acknowledged_record_once(consume_all(first.bootstrap, TOPIC, len(producer.acked)), producer)

    entry = _merged(after[0])[0]  # Kafka's tool reads the merged objects under a segment's names
    output, gaps = dump_segment_objects(kafka_tools, store, entry, tmp_path / "dump")
    assert f"baseOffset: {entry.base_offset} " in output and not gaps

    first.kill()
    second = sealing_brokers.start("second")
    _check_every_acknowledged_record_once(consume_all(second.bootstrap, TOPIC, len(producer.acked), group="after"),
                                          producer)


def test_a_merge_killed_midway_leaves_the_log_readable_and_a_rerun_finishes_it(sealing_brokers):
    store = ObjectStore(sealing_brokers.root)
    keys = [PartitionKeys(TOPIC, p) for p in range(6)]
    first, producer = _produce_small_segments(sealing_brokers, len(keys), 2.5)
    producer.stop(flush_s=30)
    assert first.stop() == 0  # a clean stop seals nothing more: the log is still from here on
    before = [values(read_log(store, k)) for k in keys]

    merging = subprocess.Popen([sys.executable, "-m", "topiclake.cli", "merge-segments", "--data",
                                str(sealing_brokers.root)], cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        while not any(".m" in info.key.rpartition("/")[2] for info in store.list("log")):
            assert merging.poll() is None, "the merge ended before it wrote anything"
            time.sleep(0.005)
        merging.send_signal(signal.SIGKILL)  # its first merged object exists: midway
    finally:
        merging.kill()
        merging.wait(10)
    assert merging.returncode == -signal.SIGKILL
    assert not all(_merged(load_newest(store, k)) for k in keys), "the kill came after the last commit"
    assert [values(read_log(store, k)) for k in keys] == before

    done = topiclake("merge-segments", "--data", str(sealing_brokers.root))
    assert done.returncode == 0, done.stderr
    assert all(_merged(load_newest(store, k)) for k in keys), done.stdout
    assert [values(read_log(store, k)) for k in keys] == before
    second = sealing_brokers.start("second")
    _check_every_acknowledged_record_once(consume_all(second.bootstrap, TOPIC, len(producer.acked)), producer)
