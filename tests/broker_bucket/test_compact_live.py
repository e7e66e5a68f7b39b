"""`topiclake compact` on a bucket root beside a live broker (issue 29 point 1): killed -9 at its
manifest commit the log is unchanged (the cleaned objects are garbage the grace later), the rerun
(`jobs/compact.py`) compacts it in one commit, Kafka's DumpLogSegments reads the cleaned objects,
and a consumer of a broker that takes over reads each key's last record at its offset."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.bucket_batches import values
from tests.support.bucket_broker import consume_all
from tests.support.kafka_dump import dump_segment_objects
from tests.support.paths import REPO
from topiclake.objectlog.garbage import collect_garbage
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import load_newest
from topiclake.objectlog.reader import read_log
from topiclake.store.objects import ObjectStore

TOPIC = "latest"
KEYS = PartitionKeys(TOPIC, 0)
RECORDS = 100
CLEANED = re.compile(r"^\d{20}\.c\d+-[0-9a-f]+\.")


def _produce_keyed_rounds(bootstrap: str) -> dict[int, tuple[bytes, bytes]]:
    """Four rounds of 25 records over keys k0-k4, a seal_ms apart: {offset: (key, value)} acked."""
    acked: dict[int, tuple[bytes, bytes]] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})

    def delivered(error, message) -> None:
        assert error is None, error
        acked[message.offset()] = (message.key(), message.value())

    for round_ in range(4):
        for i in range(25):
            producer.produce(TOPIC, key=f"k{i % 5}", value=f"r{round_}-{i}", partition=0, on_delivery=delivered)
        assert producer.flush(30) == 0
        time.sleep(2.0)  # past seal_ms (1.5 s): the round becomes a closed segment
    return acked


def _wait_all_sealed(store: ObjectStore, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while (manifest := load_newest(store, KEYS)).end_offset < RECORDS:
        assert time.monotonic() < deadline, f"the broker sealed up to {manifest.end_offset} only"
        time.sleep(0.2)
    return manifest


def _cleaned_keys(store: ObjectStore) -> set[str]:
    """`<base>.c<version>-<run>.log|.index|.timeindex` objects."""
    return {info.key for info in store.list(KEYS.prefix + "/") if CLEANED.match(info.key.rpartition("/")[2])}


def test_compact_killed_at_its_commit_then_rerun_beside_a_broker_and_read_by_a_consumer(bucket_brokers, kafka_tools,
                                                                                       tmp_path):
    store = ObjectStore(bucket_brokers.root)
    first = bucket_brokers.start("first")
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1, config={"cleanup.policy": "compact"})])[TOPIC].result(30)
    acked = _produce_keyed_rounds(first.bootstrap)
    assert sorted(acked) == list(range(RECORDS))
    before = _wait_all_sealed(store)
    assert len(before.segments) >= 3 and before.cleaner_offset is None
    log_before = values(read_log(store, KEYS))

    command = ["-m", "topiclake.cli", "compact", "--data", str(bucket_brokers.root), "--topic", TOPIC]
    killed = subprocess.run([sys.executable, *command], cwd=REPO, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TOPICLAKE_CRASH_AT": "bucket-commit"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert load_newest(store, KEYS) == before and values(read_log(store, KEYS)) == log_before
    garbage = _cleaned_keys(store)
    assert garbage, "the killed run wrote no cleaned segment before its commit"

    rerun = subprocess.run([sys.executable, "jobs/compact.py", "--data", str(bucket_brokers.root), "--topic", TOPIC],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert f"{TOPIC}-0: {len(before.segments)} -> 1 segments" in rerun.stdout, rerun.stdout
    after = load_newest(store, KEYS)
    assert after.version == before.version + 1 and after.cleaner_offset == RECORDS == after.end_offset
    last = {}
    for offset in sorted(acked):
        last[acked[offset][0]] = offset
    expected = sorted((offset, acked[offset][1]) for offset in last.values())
    assert values(read_log(store, KEYS)) == expected

    [cleaned] = after.segments
    output, _gaps = dump_segment_objects(kafka_tools, store, cleaned, tmp_path / "dump")  # gaps: what compaction removed
    assert all(f"offset: {offset} " in output for offset, _value in expected), output[-2000:]

    deleted = set(collect_garbage(store, KEYS, after, grace_ms=0))  # the killed run's objects, the old segments
    assert garbage <= deleted and {cleaned.key, cleaned.index_key, cleaned.time_index_key}.isdisjoint(deleted)
    assert {e.key for e in before.segments} <= deleted and values(read_log(store, KEYS)) == expected

    first.kill()
    second = bucket_brokers.start("second")  # takes the compacted log over from the bucket
    got = consume_all(second.bootstrap, TOPIC, len(expected))
    assert sorted((offset, value) for value, _partition, offset in got) == expected
