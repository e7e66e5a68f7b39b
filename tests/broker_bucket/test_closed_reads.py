"""Closed segments on a bucket root read by the broker (docs/OBJECT-STORAGE.md, "Read path"): a
live seal writes the `.txnindex` object of the aborted transactions whose markers it holds, in
Kafka's format (DumpLogSegments reads it)."""

from __future__ import annotations

import re
import time

from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.kafka_dump import dump
from topiclake.objectlog.aborted import known_aborted
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import Manifest, load_newest
from topiclake.store.objects import ObjectStore


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the result: its futures die with it
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def transactions(bootstrap: str, topic: str, rounds: tuple[bool, ...]) -> tuple[list[int], list[int]]:
    """One transaction of 20 records per round (True: committed); (committed, aborted) offsets."""
    from confluent_kafka import Producer

    done: dict[bool, list[int]] = {True: [], False: []}
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn", "linger.ms": 5})
    producer.init_transactions(30)
    for n, commit in enumerate(rounds):
        producer.begin_transaction()
        for i in range(20):
            producer.produce(topic, value=b"r%d-%d" % (n, i), partition=0,
                             on_delivery=lambda err, msg, c=commit: done[c].append(msg.offset()))
        producer.flush(30)
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    return done[True], done[False]


def wait_sealed(store: ObjectStore, keys: PartitionKeys, end: int, timeout_s: float = 60) -> Manifest:
    """The newest manifest once its closed segments reach `end`."""
    deadline = time.monotonic() + timeout_s
    while (manifest := load_newest(store, keys)).end_offset < end:
        assert time.monotonic() < deadline, f"{keys.prefix} sealed only up to {manifest.end_offset}, not {end}"
        time.sleep(0.2)
    return manifest


def test_a_seal_writes_the_txnindex_object_of_its_aborted_transactions(sealing_brokers, kafka_tools, tmp_path):
    broker = sealing_brokers.start("first")
    create_topic(broker.bootstrap, "aborts")
    committed, aborted = transactions(broker.bootstrap, "aborts", (True, False, True, False, True))
    store, keys = ObjectStore(sealing_brokers.root), PartitionKeys("aborts", 0)
    manifest = wait_sealed(store, keys, max(committed) + 2)  # the last COMMIT marker sealed too

    entries = [entry for segment in manifest.segments for entry in known_aborted(store, segment)]
    runs = [min(aborted[:20]), min(aborted[20:])]
    assert [e.first_offset for e in entries] == runs
    assert [e.last_offset for e in entries] == [max(aborted[:20]) + 1, max(aborted[20:]) + 1]  # the ABORT markers
    assert all(s.txn_index_key is not None for s in manifest.segments)  # "" where none aborted
    indexed = [s for s in manifest.segments if s.txn_index_key]
    assert indexed and all(s.txn_index_key == s.key.removesuffix(".log") + ".txnindex" for s in indexed)

    directory = tmp_path / "dump"
    directory.mkdir()
    files = []
    for segment in indexed:
        for key, suffix in ((segment.key, ".log"), (segment.txn_index_key, ".txnindex")):
            files.append(directory / f"{segment.base_offset:020d}{suffix}")
            files[-1].write_bytes(store.get(key))
    output, _gaps = dump(kafka_tools, *files)
    assert [tuple(map(int, m)) for m in re.findall(r"firstOffset: (\d+) lastOffset: (\d+)", output)] == \
        [(e.first_offset, e.last_offset) for e in entries]
