"""Kafka's DumpLogSegments reads the segment files the broker wrote (`--deep-iteration
--print-data-log`, and `.index`, `.timeindex`, `.txnindex`, `.snapshot`): every codec, transactions
(committed and aborted), and a compacted topic that `topiclake compact` cleaned beside the live
broker. It reports no error and no index mismatch, and the same offsets, keys, values and header
keys the clients produced (and, for the compacted topic, read back)."""

from __future__ import annotations

import random
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.kafka_dump import BATCH, RECORD, dump
from tests.support.paths import REPO
from tests.support.broker_process import BrokerProcess
from tests.support.kafka_tools import BROKER_TOML

pytestmark = pytest.mark.slow

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
# Small segments and dense indexes: several segments per topic, many index entries to check.
DENSE = {"index.interval.bytes": "256", "segment.bytes": "4096"}


@dataclass(frozen=True)
class Produced:
    offset: int
    key: bytes | None
    value: bytes | None
    header_keys: tuple[str, ...] = ()


@dataclass
class Written:
    root: Path
    records: dict[str, list[Produced]]  # topic -> every record its producers were told was written
    aborted: set[int]  # offsets of dump-txn's aborted records
    compacted_view: list[tuple[int, bytes, bytes | None]]  # dump-compact as a consumer read it after cleaning


def create_topic(bootstrap: str, name: str, **config: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the future resolves
    for future in admin.create_topics([NewTopic(name, 1, 1, config=config)]).values():
        future.result(20)


def produce(producer, topic: str, records: list[tuple[bytes | None, bytes | None, list]], out: list) -> None:
    """Produce `records` (key, value, headers), timestamps 1 ms apart (so the time index grows with
    the offset index); each one's delivery appends what was written to `out`."""
    def on_delivery(header_keys):
        def delivered(err, msg):
            assert err is None, err
            out.append(Produced(msg.offset(), msg.key(), msg.value(), header_keys))
        return delivered

    start_ms = int(time.time() * 1000) - len(records)
    for i, (key, value, headers) in enumerate(records):
        producer.produce(topic, key=key, value=value, headers=headers, partition=0, timestamp=start_ms + i,
                         on_delivery=on_delivery(tuple(k for k, _ in headers)))
        producer.poll(0)
    assert producer.flush(30) == 0


def write_codec_topics(bootstrap: str, records: dict) -> None:
    from confluent_kafka import Producer

    rng = random.Random(20)
    for codec in CODECS:
        topic = f"dump-{codec}"
        create_topic(bootstrap, topic, **DENSE)
        producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "enable.idempotence": True,
                             "linger.ms": 5, "batch.num.messages": 5})
        produce(producer, topic, [(b"key-%03d" % i, b"%s value %d|%s" % (codec.encode(), i, rng.randbytes(24).hex()
                                                                            .encode()),
                                   [("trace", b"t%d" % i), ("source", b"dump")] if i % 3 else [])
                                  for i in range(300)], records.setdefault(topic, []))


def write_transactions(bootstrap: str, records: dict) -> set[int]:
    """Five transactions, the second and fourth aborted; the offsets of the aborted records."""
    from confluent_kafka import Producer

    create_topic(bootstrap, "dump-txn", **DENSE)
    aborted: list[Produced] = []
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "dump-txn", "linger.ms": 5})
    txn.init_transactions(20)
    for round_, commit in enumerate((True, False, True, False, True)):
        txn.begin_transaction()
        produce(txn, "dump-txn", [(b"t%d-%d" % (round_, i), b"round %d record %d" % (round_, i), [])
                                  for i in range(20)], records.setdefault("dump-txn", []) if commit else aborted)
        txn.commit_transaction(20) if commit else txn.abort_transaction(20)
    return {p.offset for p in aborted}


def write_compacted(peer_broker: BrokerProcess, records: dict) -> list[tuple[int, bytes, bytes | None]]:
    """Keys written over and over (some deleted), cleaned by `topiclake compact` beside the live
    broker; what a consumer then reads."""
    from confluent_kafka import Producer

    create_topic(peer_broker.bootstrap, "dump-compact", **{"cleanup.policy": "compact", "segment.bytes": "2048",
                                                     "min.cleanable.dirty.ratio": "0.01"})
    # The keyed records, then a filler key written past a segment roll: the last tombstone (offset
    # 391) then sits in a closed segment the cleaner works on, however the producer batched.
    written = [(b"k%d" % (i % 13), None if i % 17 == 0 else b"v%d" % i, []) for i in range(400)]
    written += [(b"filler", b"f%d" % i, []) for i in range(120)]
    produce(Producer({"bootstrap.servers": peer_broker.bootstrap, "batch.num.messages": 10}), "dump-compact",
            written, records.setdefault("dump-compact", []))
    compacted = subprocess.run([sys.executable, "-m", "topiclake.cli", "compact", "--topic", "dump-compact",
                                "--data", str(peer_broker.data), "--master", "local[1]"],
                               capture_output=True, text=True, timeout=300, cwd=REPO)
    assert compacted.returncode == 0, compacted.stderr
    # The broker serves the cleaned segments without a restart (it looks every few seconds).
    deadline = time.monotonic() + 30
    while len(view := read_back(peer_broker.bootstrap, "dump-compact")) == len(written):
        assert time.monotonic() < deadline, "the broker still serves the segments from before the cleaning"
        time.sleep(0.5)
    return view


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Written:
    """Topics written through a real broker, one compacted by `topiclake compact`; the broker is
    then stopped cleanly (its producer-state snapshots written, indexes trimmed), as Kafka's would be."""
    tmp = tmp_path_factory.mktemp("dump")
    config = tmp / "broker.toml"
    config.write_text(BROKER_TOML)
    peer_broker = BrokerProcess(tmp / "data", config=config).start()
    records: dict[str, list[Produced]] = {}
    try:
        write_codec_topics(peer_broker.bootstrap, records)
        aborted = write_transactions(peer_broker.bootstrap, records)
        view = write_compacted(peer_broker, records)
    finally:
        peer_broker.stop()
    return Written(peer_broker.data, records, aborted, view)


def read_back(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dump-reader", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    while True:
        m = consumer.poll(10)
        assert m is not None, "no end of partition within 10 s"
        if m.error():
            assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
            break
        out.append((m.offset(), m.key(), m.value()))
    consumer.close()
    return out


def only_segment_starts(gaps: dict[str, list[tuple[int, int]]], logs: list[Path]) -> bool:
    """DumpLogSegments counts from -1 in every file, so a segment after the first "follows -1" with
    its first offset; any other gap would be a hole in a log that was never compacted."""
    return gaps == {log.name: [(-1, int(log.stem))] for log in logs if int(log.stem) > 0}


def partition_files(root: Path, topic: str, *suffixes: str) -> list[Path]:
    files = sorted(p for p in (root / "log" / f"{topic}-0").iterdir() if p.suffix in suffixes)
    assert files, f"no {suffixes} files for {topic}"
    return files


def data_records(output: str) -> list[Produced]:
    """The data records DumpLogSegments printed (control records, which print endTxnMarker, left out)."""
    out = []
    for line in output.splitlines():
        if line.startswith("| ") and "endTxnMarker" not in line:
            m = RECORD.match(line)
            assert m, line
            offset, headers, key, payload = m.groups()
            out.append(Produced(int(offset), None if key is None else key.encode(),
                                None if payload is None else payload.encode(),
                                tuple(h.strip() for h in headers.split(",") if h.strip())))
    return out


def batches(output: str) -> list[tuple]:
    return [m.groups() for m in map(BATCH.match, output.splitlines()) if m]


def test_every_codec_with_indexes_and_producer_snapshots(kafka_tools, written):
    for codec in CODECS:
        topic = f"dump-{codec}"
        logs = partition_files(written.root, topic, ".log")
        assert len(logs) > 1, f"{topic}: one segment only; the test wants several"
        output, gaps = dump(kafka_tools, *partition_files(written.root, topic, ".log", ".index", ".timeindex",
                                                          ".snapshot"))
        assert data_records(output) == written.records[topic]
        assert only_segment_starts(gaps, logs), gaps
        codecs = {b[5] for b in batches(output)}
        assert codecs == {codec}, (topic, codecs)
        assert all(b[6] == "true" for b in batches(output))
        # Every segment's offset and time index has entries, each checked by the tool against the log.
        assert output.count("offset: ") > len(written.records[topic])  # records plus index entries
        index_entries = re.findall(r"^offset: (\d+) position: (\d+)$", output, re.M)
        time_entries = re.findall(r"^timestamp: (\d+) offset: (\d+)$", output, re.M)
        assert len(index_entries) > 2 * len(logs) and len(time_entries) > 2 * len(logs)
        # The producer-state snapshot at the log end: the idempotent producer's last sequence.
        producer_lines = [line for line in output.splitlines() if line.startswith("producerId: ")]
        assert producer_lines and re.search(r"lastSequence: 299 ", producer_lines[-1]), producer_lines


def test_transactions_markers_and_the_aborted_transaction_index(kafka_tools, written):
    output, gaps = dump(kafka_tools, *partition_files(written.root, "dump-txn", ".log", ".txnindex", ".snapshot"))
    assert only_segment_starts(gaps, partition_files(written.root, "dump-txn", ".log")), gaps
    every = data_records(output)
    assert [r for r in every if r.offset not in written.aborted] == written.records["dump-txn"]
    assert {r.offset for r in every} - {r.offset for r in written.records["dump-txn"]} == written.aborted
    markers = re.findall(r"endTxnMarker: (\w+) coordinatorEpoch: \d+", output)
    assert markers == ["COMMIT", "ABORT", "COMMIT", "ABORT", "COMMIT"]
    assert all(b[3] == "true" for b in batches(output))  # every batch, markers too, is transactional
    # One .txnindex entry per aborted transaction: its first offset, and its ABORT marker's offset.
    entries = [tuple(map(int, e)) for e in re.findall(r"firstOffset: (\d+) lastOffset: (\d+)", output)]
    aborted = sorted(written.aborted)
    runs = [(a, b) for a, b in zip([aborted[0]] + [o for p, o in zip(aborted, aborted[1:]) if o != p + 1],
                                   [p for p, o in zip(aborted, aborted[1:]) if o != p + 1] + [aborted[-1]])]
    assert entries == [(first, last + 1) for first, last in runs] and len(entries) == 2


def test_a_compacted_topic_cleaned_by_topiclake_compact(kafka_tools, written):
    output, _gaps = dump(kafka_tools, *partition_files(written.root, "dump-compact", ".log", ".index", ".timeindex"))
    records = [(r.offset, r.key, r.value) for r in data_records(output)]
    assert records == written.compacted_view  # what a consumer read after cleaning, offsets and all
    produced = {r.offset: (r.key, r.value) for r in written.records["dump-compact"]}
    assert all(produced[offset] == (key, value) for offset, key, value in records)
    assert len(records) < len(produced)  # the cleaner removed superseded records
    latest = {key: (offset, value) for offset, (key, value) in sorted(produced.items())}
    assert all((offset, key, value) in records for key, (offset, value) in latest.items())
    assert "deleteHorizonMs: OptionalLong[" in output  # tombstones kept, with their delete horizon
    # Segments whose every record was superseded keep one empty batch (the swap's span), which no
    # time index entry points at.
    assert re.search(r"^baseOffset: \d+ lastOffset: \d+ count: 0 ", output, re.M)
