"""Closed segments on a bucket root read by the broker (docs/OBJECT-STORAGE.md, "Read path"): a
live seal writes the `.txnindex` object of the aborted transactions whose markers it holds, in
Kafka's format (DumpLogSegments reads it); a broker killed -9 and a new one on a new empty cache
directory: the takeover GETs the tail only, the cache holds only the tail, and Fetch (read_committed
too), ListOffsets and DeleteRecords below it are served from the closed segments in the bucket."""

from __future__ import annotations

import re
import time
from collections import Counter

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.broker_process import free_port
from tests.support.bucket_broker import (T0, BucketBrokers, consume_all, create_topic, plain, produce_plain,
                                         transactions, wait_sealed)
from tests.support.kafka_dump import dump
from tests.support.metrics import scrape_url
from tests.support.wire import session_fetch, values_of
from topiclake.client.conn import BrokerConnection
from topiclake.broker.bucket.closed import READ_AHEAD, ClosedSegments
from topiclake.objectlog.aborted import known_aborted
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import load_newest
from topiclake.store.objects import ObjectStore


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


def read_from(bootstrap: str, topic: str, offset: int, **config) -> tuple[list[tuple[bytes, int]], str | None]:
    """(value, offset) read from `offset` until three quiet seconds, and the first error seen."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"from-{offset}-{time.monotonic()}",
                         "enable.auto.commit": False, "auto.offset.reset": "error", **config})
    consumer.assign([TopicPartition(topic, 0, offset)])
    got: list[tuple[bytes, int]] = []
    error, quiet = None, time.monotonic()
    try:
        while time.monotonic() - quiet < 3:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():  # auto.offset.reset "error": an offset out of range is reported, not reset
                error = error or f"{message.error().name()}: {message.error().str()}"
                if message.error().name() == "_AUTO_OFFSET_RESET":
                    break
                continue
            got.append((message.value(), message.offset()))
            quiet = time.monotonic()
    finally:
        consumer.close()
    return got, error


def test_a_takeover_restores_only_the_tail_and_serves_closed_segments_from_the_bucket(rolling_brokers):
    topic = "closed"
    brokers = rolling_brokers  # sealing on each local roll (segment.bytes): the last segment stays the tail
    store, keys = ObjectStore(brokers.root), PartitionKeys(topic, 0)
    first = brokers.start("first")
    try:
        create_topic(first.bootstrap, topic, **{"segment.bytes": "100000"})
        acked = produce_plain(first.bootstrap, topic, 0, 600)
        committed, aborted = transactions(first.bootstrap, topic, (True, False, True), T0 + 600)
        acked.update(produce_plain(first.bootstrap, topic, 600, 600))
        wait_sealed(store, keys, max(committed) + 2)  # the transactions are in closed segments
        acked.update(produce_plain(first.bootstrap, topic, 1200, 30))  # at least these stay in the tail
        _none, tail_aborted = transactions(first.bootstrap, topic, (False,), T0 + 1300)  # so does this abort
    finally:
        brokers.kill_all()  # kill -9
    manifest = load_newest(store, keys)
    closed_bytes = sum(entry.size for entry in manifest.segments)
    assert len(manifest.segments) >= 2 and closed_bytes > 1_000_000
    log_end = max(tail_aborted) + 2  # after its ABORT marker

    # The broker's reader of closed segments, here: in 64 KiB fetches, a GET per read-ahead window
    # (READ_AHEAD), not one per fetch, and the bytes are the segments' own.
    closed = ClosedSegments(store, keys, manifest)
    before = store.metrics.snapshot()["get_range"]["requests"]
    offset, read_back = manifest.log_start_offset, bytearray()
    while offset < manifest.end_offset:
        data, offset = closed.read(offset, 64 * 1024, True)
        read_back += data
    ranged_gets = store.metrics.snapshot()["get_range"]["requests"] - before
    assert bytes(read_back) == b"".join(store.get(entry.key) for entry in manifest.segments)
    assert ranged_gets <= closed_bytes // READ_AHEAD + 2 * len(manifest.segments), ranged_gets
    assert manifest.end_offset < log_end

    port = free_port()
    second = brokers.start("second", args=("--metrics-listen", f"127.0.0.1:{port}"))
    got = scrape_url(f"http://127.0.0.1:{port}/metrics")
    read_bytes = sum(value for (name, labels), value in got.items()
                     if name == "topiclake_object_store_bytes_total" and ("direction", "read") in labels)
    assert read_bytes < closed_bytes / 4, f"the takeover read {read_bytes} bytes; closed segments hold {closed_bytes}"
    cache = [p for p in (brokers.directory / "second-cache").rglob(f"{topic}-0") if p.is_dir()]
    assert len(cache) == 1, cache
    local_logs = sorted(cache[0].glob("*.log"))
    assert local_logs and int(local_logs[0].name.split(".")[0]) == manifest.end_offset  # the tail only
    assert sum(p.stat().st_size for p in local_logs) < closed_bytes / 4

    # Every record exactly once, at its offset, from offset 0; librdkafka reads read_committed by
    # default: the aborted transaction, in a closed segment, is skipped.
    records = consume_all(second.bootstrap, topic, len(acked) + 40)
    positions = Counter(offset for _v, _p, offset in records)
    assert all(n == 1 for n in positions.values()), "an offset read twice"
    assert sorted(positions) == sorted(set(acked.values()) | set(committed))
    # The takeover sealed the tail it restored, with the abort in it as the segment's .txnindex.
    [sealed] = [s for s in load_newest(store, keys).segments if s.base_offset == manifest.end_offset]
    assert [(e.first_offset, e.last_offset) for e in known_aborted(store, sealed)] == \
        [(min(tail_aborted), max(tail_aborted) + 1)]
    found = {value: offset for value, _p, offset in records}
    assert all(found.get(value) == offset for value, offset in acked.items())

    # read_uncommitted from offset 0: the aborted records too, each at its offset.
    read, error = read_from(second.bootstrap, topic, 0, **{"isolation.level": "read_uncommitted"})
    assert error is None
    assert sorted(offset for _v, offset in read) == sorted(set(acked.values()) | set(committed) | set(aborted)
                                                           | set(tail_aborted))

    # ListOffsets: earliest is the manifest's log start; a timestamp in a closed segment finds its record.
    consumer = Consumer({"bootstrap.servers": second.bootstrap, "group.id": "times"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30) == (0, log_end)
        for n in (0, 17, 333, 599):  # in the closed segments
            [hit] = consumer.offsets_for_times([TopicPartition(topic, 0, T0 + n)], timeout=30)
            assert hit.offset == acked[plain(n)], n
        # Past the transactions' records: their first marker, stamped with the broker's clock (Kafka's
        # lookup counts control batches too).
        [hit] = consumer.offsets_for_times([TopicPartition(topic, 0, T0 + 700)], timeout=30)
        assert hit.offset == max(committed[:20]) + 1
    finally:
        consumer.close()

    # DeleteRecords below the cache's start: the manifest's start moves, the reader follows it.
    start = acked[plain(100)]
    admin = AdminClient({"bootstrap.servers": second.bootstrap})
    [done] = admin.delete_records([TopicPartition(topic, 0, start)]).values()
    assert done.result(30).low_watermark == start
    assert load_newest(store, keys).log_start_offset == start
    read, error = read_from(second.bootstrap, topic, start - 10)
    assert not read and error is not None and "Offset out of range" in error, error
    read, error = read_from(second.bootstrap, topic, start)
    data_offsets = [o for o in list(acked.values()) + committed if o >= start]  # read_committed
    assert error is None and read[0] == (plain(100), start) and sorted(o for _v, o in read) == sorted(data_offsets)

    # A KIP-227 session (a Java consumer's) at the log's end: quiet while nothing moves; the
    # manifest's start moving below the cache's (DeleteRecords) and a new record are each answered.
    with BrokerConnection(second.bootstrap, timeout=30) as client:
        full, parts = session_fetch(client, topic, {0: log_end}, epoch=0)
        session = full.session_id
        assert session > 0 and parts[0].log_start_offset == start and parts[0].high_watermark == log_end
        assert session_fetch(client, topic, {}, session_id=session, epoch=1)[1] == {}
        moved = acked[plain(200)]
        [done] = admin.delete_records([TopicPartition(topic, 0, moved)]).values()
        assert done.result(30).low_watermark == moved
        _, parts = session_fetch(client, topic, {}, session_id=session, epoch=2)
        assert list(parts) == [0] and parts[0].log_start_offset == moved and not parts[0].records
        assert session_fetch(client, topic, {}, session_id=session, epoch=3)[1] == {}
        produce_plain(second.bootstrap, topic, 5000, 1)
        _, parts = session_fetch(client, topic, {}, session_id=session, epoch=4)
        assert list(parts) == [0] and values_of(parts[0].records) == [(log_end, plain(5000))]


def test_closed_reads_while_the_store_is_down_fail_retriably_and_resume_when_it_is_back(tmp_path, own_store):
    server, root = own_store
    brokers = BucketBrokers(tmp_path, root, storage="seal_ms = 600000")
    try:
        first = brokers.start("first")
        create_topic(first.bootstrap, "down", **{"segment.bytes": "100000"})
        acked = produce_plain(first.bootstrap, "down", 0, 400)
        wait_sealed(ObjectStore(root), PartitionKeys("down", 0), 200)
        first.kill()
        second = brokers.start("second")  # its cache starts where the closed segments end
        consumer = Consumer({"bootstrap.servers": second.bootstrap, "group.id": "down",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.assign([TopicPartition("down", 0, 0)])
        try:
            server.kill9()
            got: dict[bytes, int] = {}
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and not message.error():
                    got[message.value()] = message.offset()
            assert not [o for o in got.values() if o < 200], "read closed segments with the store down"
            assert second.proc.poll() is None, "the broker died with the store"
            server.restart()
            deadline = time.monotonic() + 90
            while len(got) < len(acked) and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and not message.error():
                    got[message.value()] = message.offset()
            assert got == acked  # the same consumer (and connection) goes on once the store is back
        finally:
            consumer.close()
        # answered with a retriable code, never as an unknown server error
        assert "fetch from down-0" not in second.log_path.read_text()
    finally:
        brokers.kill_all()
