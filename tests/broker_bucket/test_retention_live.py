"""`topiclake retain` on a bucket root while its broker serves it (issue 29): the retention
commit lands beside the broker's seals, the broker keeps acknowledging, ListOffsets EARLIEST and a
consumer from earliest start at the new log start on the same broker (it looks at the newest
maintenance notices every few seconds: tail.MANIFEST_POLL_S), and a broker taking over later agrees. The
broker's own DeleteRecords is a manifest commit too: a takeover keeps it."""

from __future__ import annotations

import time
from collections import Counter

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker_process import BrokerProcess
from tests.support.bucket_broker import AckedProducer, BucketBrokers, consume_all
from tests.support.bucket_maintenance import topiclake, wait_earliest
from topiclake.broker.bucket.tail import MANIFEST_POLL_S
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import commit, load_newest
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


def _producing(brokers: BucketBrokers, tag: str, **config: str) -> tuple[BrokerProcess, AckedProducer]:
    """A broker leading TOPIC (one partition, topic `config`) and a producer with 300 records acknowledged."""
    broker = brokers.start("first")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1, config=config)])[TOPIC].result(30)
    producer = AckedProducer(broker.bootstrap, TOPIC, tag).start()
    producer.wait_acked(300)
    return broker, producer


def test_retain_while_the_broker_serves_moves_its_log_start_and_a_takeover_agrees(sealing_brokers):
    store = ObjectStore(sealing_brokers.root)
    first, producer = _producing(sealing_brokers, "r", **{"retention.ms": "3000", "segment.bytes": "8192"})
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
    # no restart: the job's notice names the partition at the broker's next LIST of the notices
    assert wait_earliest(first.bootstrap, TOPIC, start, timeout=MANIFEST_POLL_S + 2) == start

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


def test_retain_reaches_an_idle_broker_by_its_notice(sealing_brokers):
    """No seal of the broker's own runs into the retention commit (nothing is produced): the job's
    maintenance notice alone brings it to ListOffsets within a poll of the notices."""
    store = ObjectStore(sealing_brokers.root)
    broker, producer = _producing(sealing_brokers, "i", **{"retention.ms": "2000", "segment.bytes": "8192"})
    producer.stop(flush_s=30)
    time.sleep(3)  # sealed (seal_ms 400), past retention.ms, idle
    done = topiclake("retain", "--data", str(sealing_brokers.root), "--topic", TOPIC)
    assert done.returncode == 0, done.stderr
    start = load_newest(store, KEYS).log_start_offset
    assert start > 0, done.stdout
    assert wait_earliest(broker.bootstrap, TOPIC, start, timeout=MANIFEST_POLL_S + 2) == start


def test_a_commit_without_its_notice_is_found_by_the_slow_poll(bucket_brokers, tmp_path):
    """A job killed between its manifest commit and its notice: the leader's slow full poll of each
    partition (`manifest_poll_ms`, short here) finds the commit all the same."""
    (tmp_path / "slow-poll").mkdir()
    brokers = BucketBrokers(tmp_path / "slow-poll", bucket_brokers.root,
                            storage="seal_ms = 400\nmanifest_poll_ms = 3000")
    try:
        store = ObjectStore(brokers.root)
        broker, producer = _producing(brokers, "s")
        producer.stop(flush_s=30)
        time.sleep(1.5)  # everything acknowledged is sealed (seal_ms 400), and the broker is idle
        sealed = load_newest(store, KEYS)
        start = sealed.end_offset
        assert start >= 300, sealed
        commit(store, KEYS, sealed, sealed.successor(leader_epoch=sealed.leader_epoch, log_start_offset=start))
        assert wait_earliest(broker.bootstrap, TOPIC, start, timeout=3 + 2) == start
    finally:
        brokers.kill_all()
