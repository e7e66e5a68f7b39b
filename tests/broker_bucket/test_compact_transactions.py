"""`topiclake compact` on a bucket root holding transactions (issue 29): committed, aborted and one
open transaction of real transactional producers, sealed by a live broker; compaction cleans the
closed segments below the open transaction's first offset (Kafka's last stable offset) and nothing
from it on, drops the aborted records (the latest committed value of a key stays even when an
aborted one came after it), writes the `.txnindex` object of the cleaned segment keeping the ABORT
marker (Kafka's DumpLogSegments reads it), and a read_committed consumer of a broker taking over
afterwards reads exactly each key's latest committed value."""

from __future__ import annotations

import re

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.bucket_broker import consume_all, wait_sealed
from tests.support.kafka_dump import dump
from topiclake.lake.runs.compaction import CompactOptions, compact, format_summary
from topiclake.objectlog.aborted import known_aborted
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import load_newest
from topiclake.objectlog.reader import read_log
from topiclake.store.objects import ObjectStore

TOPIC = "txn-latest"
KEYS = PartitionKeys(TOPIC, 0)


def _keyed_transaction(producer: Producer, name: str, keys: range) -> dict[int, tuple[bytes, bytes]]:
    """One transaction of records k<i> = <name>-<i>, acknowledged, left open: {offset: (key, value)}."""
    acked: dict[int, tuple[bytes, bytes]] = {}
    producer.begin_transaction()
    for i in keys:
        producer.produce(TOPIC, key=f"k{i}", value=f"{name}-{i}", partition=0,
                         on_delivery=lambda err, msg: acked.__setitem__(msg.offset(), (msg.key(), msg.value()))
                         if err is None else None)
    assert producer.flush(30) == 0 and len(acked) == len(keys), acked
    return acked


def test_compaction_cleans_below_an_open_transaction_drops_aborts_and_indexes_the_kept_abort_marker(
        sealing_brokers, spark, kafka_tools, tmp_path):
    first = sealing_brokers.start("first")
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1, config={"cleanup.policy": "compact"})])[TOPIC].result(30)
    store = ObjectStore(sealing_brokers.root)

    decided = Producer({"bootstrap.servers": first.bootstrap, "transactional.id": "decided", "linger.ms": 5})
    decided.init_transactions(30)
    committed = _keyed_transaction(decided, "c0", range(5))
    decided.commit_transaction(30)
    aborted = _keyed_transaction(decided, "a1", range(5))  # newer than c0 for k3, k4: must not shadow it
    decided.abort_transaction(30)
    committed.update(_keyed_transaction(decided, "c2", range(3)))
    decided.commit_transaction(30)
    decided_end = max(committed) + 2  # after the last COMMIT marker
    wait_sealed(store, KEYS, decided_end)
    # Left open past the test (the producer lives on): its first offset is the last stable offset.
    pending = Producer({"bootstrap.servers": first.bootstrap, "transactional.id": "pending", "linger.ms": 5,
                        "transaction.timeout.ms": 600_000})
    pending.init_transactions(30)
    open_records = _keyed_transaction(pending, "open", range(5))
    open_first = min(open_records)
    before = wait_sealed(store, KEYS, max(open_records) + 1)
    assert open_first == decided_end and any(e.base_offset == open_first for e in before.segments), \
        "the open transaction starts its own segment (sealed after the decided ones)"
    held = [e for e in before.segments if e.base_offset >= open_first]
    log_before = list(read_log(store, KEYS))

    result = compact(spark, CompactOptions(root=sealing_brokers.root, topics=(TOPIC,), force=True))
    summary = format_summary(result)
    assert not result.errors and len(result.cleaned) == 1, summary
    after = load_newest(store, KEYS)
    assert after.cleaner_offset == open_first, "the round ends at the last stable offset"
    assert after.segments[-len(held):] == tuple(held)  # from the open transaction on, the same objects
    assert [(b.base_offset, bytes(b.data)) for b in read_log(store, KEYS) if b.base_offset >= open_first] == \
        [(b.base_offset, bytes(b.data)) for b in log_before if b.base_offset >= open_first]

    latest: dict[bytes, int] = {}
    for offset in sorted(committed):
        latest[committed[offset][0]] = offset
    expected = sorted((offset, committed[offset][1]) for offset in latest.values())
    cleaned = [e for e in after.segments if e.base_offset < open_first]
    kept = sorted((record.offset, record.value) for batch in read_log(store, KEYS) if batch.base_offset < open_first
                  and not batch.is_control for record in batch.records())
    assert kept == expected, "each key's latest committed record, no aborted one"

    # The ABORT marker stays (its transaction's batches were cleaned in this round): so does its entry.
    assert all(e.txn_index_key is not None for e in cleaned)
    entries = [(entry, txn) for entry in cleaned for txn in known_aborted(store, entry)]
    abort_marker = max(aborted) + 1
    assert [(txn.first_offset, txn.last_offset) for _e, txn in entries] == [(min(aborted), abort_marker)]
    [(indexed, _txn)] = entries
    directory = tmp_path / "dump"
    directory.mkdir()
    files = []
    for key, suffix in ((indexed.key, ".log"), (indexed.txn_index_key, ".txnindex")):
        files.append(directory / f"{indexed.base_offset:020d}{suffix}")
        files[-1].write_bytes(store.get(key))
    output, _gaps = dump(kafka_tools, *files)
    assert re.findall(r"firstOffset: (\d+) lastOffset: (\d+)", output) == [(str(min(aborted)), str(abort_marker))]

    first.kill()
    second = sealing_brokers.start("second")  # takes the compacted log over from the bucket
    got = consume_all(second.bootstrap, TOPIC, len(expected))  # librdkafka reads read_committed by default
    assert sorted((offset, value) for value, _partition, offset in got) == expected
