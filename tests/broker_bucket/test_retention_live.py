"""`topiclake retain` on a bucket root while its broker serves it (issue 29): the retention
commit lands beside the broker's seals, the broker keeps acknowledging, ListOffsets EARLIEST and a
consumer from earliest start at the new log start on the same broker (it looks at the newest
manifest every few seconds: tail.MANIFEST_POLL_S), and a broker taking over later agrees. The
broker's own DeleteRecords is a manifest commit too: a takeover keeps it."""

from __future__ import annotations

import time
from collections import Counter

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.bucket_broker import AckedProducer, consume_all
from tests.support.bucket_maintenance import topiclake, wait_earliest
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import load_newest
from topiclake.store.objects import ObjectStore

TOPIC = "retained"
KEYS = PartitionKeys(TOPIC, 0)


def _check_reads_from(records, acked: dict[bytes, tuple[int, int]], start: int) -> None:
    """Every acknowledged record at or above `start` read once, at its offset; nothing below."""
    assert min(offset for _v, _p, offset in records) == start
    counts = Counter(value for value, _p, _o in records)
    assert not [value for value, n in counts.items() if n > 1], "a record read twice"
    wanted = {value for value, (_p, offset) in acked.items() if offset >= start}
    assert wanted <= set(counts), f"{len(wanted - set(counts))} acknowledged records above the log start lost"
    for value, partition, offset in records:
        if value in acked:
            assert acked[value] == (partition, offset)


def test_retain_while_the_broker_serves_moves_its_log_start_and_a_takeover_agrees(sealing_brokers):
    store = ObjectStore(sealing_brokers.root)
    first = sealing_brokers.start("first")
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1, config={"retention.ms": "3000", "segment.bytes": "8192"})])[TOPIC].result(30)
    producer = AckedProducer(first.bootstrap, TOPIC, "r").start()
    producer.wait_acked(300)
    time.sleep(4.5)  # the first segments' records are past retention.ms; the producer goes on
    sealed = load_newest(store, KEYS)
    assert len(sealed.segments) >= 3, sealed

    done = topiclake("retain", "--data", str(sealing_brokers.root), "--topic", TOPIC)
    assert done.returncode == 0, done.stderr
    retained = load_newest(store, KEYS)
    start = retained.log_start_offset
    assert start > 0 and f"log start offset {start}" in done.stdout, done.stdout
    assert retained.leader_epoch == sealed.leader_epoch  # maintenance keeps the writer's epoch

    acked_then = len(producer.acked)
    producer.wait_acked(acked_then + 300)  # still acknowledging, never stopped
    assert first.proc.poll() is None and not producer.failed, producer.failed[:3]
    assert wait_earliest(first.bootstrap, TOPIC, start) == start  # no restart

    time.sleep(1.5)  # past seal_ms: the broker's next seals land on top of the retention commit
    producer.stop(flush_s=30)
    after = load_newest(store, KEYS)
    assert after.version > retained.version and after.end_offset > retained.end_offset
    assert after.log_start_offset == start and after.leader_epoch == retained.leader_epoch
    acked = {value: (partition, offset) for value, partition, offset in producer.acked}
    above = sum(1 for _p, offset in acked.values() if offset >= start)
    _check_reads_from(consume_all(first.bootstrap, TOPIC, above), acked, start)

    first.kill()
    second = sealing_brokers.start("second")
    assert wait_earliest(second.bootstrap, TOPIC, start, timeout=5) == start
    _check_reads_from(consume_all(second.bootstrap, TOPIC, above, group="after"), acked, start)


def test_delete_records_in_the_tail_is_kept_by_a_takeover(sealing_brokers):
    store = ObjectStore(sealing_brokers.root)
    first = sealing_brokers.start("first")
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    producer = AckedProducer(first.bootstrap, TOPIC, "d").start()
    producer.wait_acked(500)
    cut = max(offset for _v, _p, offset in producer.acked)  # acknowledged, so at most the high watermark
    [future] = admin.delete_records([TopicPartition(TOPIC, 0, cut)]).values()
    assert future.result(30).low_watermark == cut
    manifest = load_newest(store, KEYS)
    assert manifest.log_start_offset == cut and manifest.end_offset >= cut  # sealed up to it first
    producer.wait_acked(len(producer.acked) + 200)  # produce goes on
    producer.stop(flush_s=30)
    acked = {value: (partition, offset) for value, partition, offset in producer.acked}
    above = sum(1 for _p, offset in acked.values() if offset >= cut)
    assert wait_earliest(first.bootstrap, TOPIC, cut, timeout=5) == cut
    _check_reads_from(consume_all(first.bootstrap, TOPIC, above), acked, cut)

    first.kill()
    second = sealing_brokers.start("second")
    assert wait_earliest(second.bootstrap, TOPIC, cut, timeout=5) == cut
    _check_reads_from(consume_all(second.bootstrap, TOPIC, above, group="after"), acked, cut)
