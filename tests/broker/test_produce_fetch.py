"""Produce / Fetch / ListOffsets over a real socket: offsets, error codes, idempotence, long poll."""

from __future__ import annotations

import threading
import time

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7 import request as lo_req

from tests.support.wire import batch, produce, fetch, values_of


def test_produce_then_fetch_assigns_dense_offsets(broker):
    broker.create_topic("orders")
    with broker.client() as c:
        first = produce(c, "orders", batch([b"a", b"b", b"c"]))
        second = produce(c, "orders", batch([b"d"], compression="lz4"))
        assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
        assert (second.error_code, second.base_offset) == (ErrorCode.none, 3)
        part = fetch(c, "orders", 0)
        assert part.error_code == ErrorCode.none and part.high_watermark == 4 and part.log_start_offset == 0
        assert values_of(part.records) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
        # A fetch in the middle of a batch returns the whole batch (the client skips earlier offsets).
        assert values_of(fetch(c, "orders", 1).records)[0] == (0, b"a")
        assert fetch(c, "orders", 4).records == b""


def test_error_codes_per_partition(broker):
    broker.create_topic("small", **{"max.message.bytes": "200"})
    with broker.client() as c:
        bad_crc = bytearray(batch([b"x" * 50]))
        bad_crc[-1] ^= 0xFF
        assert produce(c, "small", bytes(bad_crc)).error_code == ErrorCode.corrupt_message
        assert produce(c, "small", batch([b"x" * 500])).error_code == ErrorCode.message_too_large
        assert produce(c, "small", batch([b"x"]) + batch([b"y"])).error_code == ErrorCode.invalid_record
        assert produce(c, "small", b"\x00" * 30).error_code == ErrorCode.corrupt_message
        assert produce(c, "small", batch([b"x"]), partition=7).error_code == ErrorCode.unknown_topic_or_partition
        assert produce(c, "nope", batch([b"x"])).error_code == ErrorCode.unknown_topic_or_partition
        for name in ("../x", "a/b", "..", ".", "x" * 250, "ünï"):
            assert produce(c, name, batch([b"x"])).error_code == ErrorCode.invalid_topic_exception, name
        assert fetch(c, "small", 5).error_code == ErrorCode.offset_out_of_range
        assert fetch(c, "nope", 0).error_code == ErrorCode.unknown_topic_or_partition
        # nothing bad reached the log
        assert fetch(c, "small", 0).high_watermark == 0
    assert sorted(p.name for p in broker.context.layout.root.iterdir()) == ["cluster", "log", "topics"]


def test_idempotent_duplicates_and_sequence_gaps(broker):
    broker.create_topic("idem")
    with broker.client() as c:
        assert produce(c, "idem", batch([b"a", b"b"], producer_id=7, epoch=0, seq=0)).base_offset == 0
        assert produce(c, "idem", batch([b"c"], producer_id=7, epoch=0, seq=2)).base_offset == 2
        # A retry of an acknowledged batch gets its original offset and is not written twice.
        dup = produce(c, "idem", batch([b"a", b"b"], producer_id=7, epoch=0, seq=0))
        assert (dup.error_code, dup.base_offset) == (ErrorCode.none, 0)
        gap = produce(c, "idem", batch([b"z"], producer_id=7, epoch=0, seq=9))
        assert gap.error_code == ErrorCode.out_of_order_sequence_number
        assert produce(c, "idem", batch([b"d"], producer_id=7, epoch=0, seq=3)).base_offset == 3
        # A new epoch restarts at sequence 0 and fences the old one.
        assert produce(c, "idem", batch([b"e"], producer_id=7, epoch=1, seq=5)).error_code == \
            ErrorCode.out_of_order_sequence_number
        assert produce(c, "idem", batch([b"e"], producer_id=7, epoch=1, seq=0)).base_offset == 4
        assert produce(c, "idem", batch([b"f"], producer_id=7, epoch=0, seq=4)).error_code == \
            ErrorCode.invalid_producer_epoch
        assert fetch(c, "idem", 0).high_watermark == 5


def test_acks_zero_gets_no_response_but_is_written(broker):
    broker.create_topic("fire")
    with broker.client() as c:
        assert produce(c, "fire", batch([b"a"]), acks=0) is None
        assert produce(c, "fire", batch([b"b"]), acks=1).base_offset == 1


def test_fetch_long_poll_wakes_on_append(broker):
    broker.create_topic("poll")
    with broker.client() as c:
        timer = threading.Timer(0.3, lambda: produce(broker.client(), "poll", batch([b"late"])))
        timer.start()
        started = time.monotonic()
        part = fetch(c, "poll", 0, max_wait_ms=5000)
        waited = time.monotonic() - started
        timer.join()
    assert values_of(part.records) == [(0, b"late")]
    assert 0.2 < waited < 3


def test_fetch_long_poll_times_out_empty(broker):
    broker.create_topic("quiet")
    with broker.client() as c:
        started = time.monotonic()
        part = fetch(c, "quiet", 0, max_wait_ms=300)
        assert part.records == b"" and part.error_code == ErrorCode.none
        assert time.monotonic() - started >= 0.25


def test_list_offsets(broker):
    broker.create_topic("times")
    with broker.client() as c:
        produce(c, "times", batch([b"a", b"b"], ts=1000))
        produce(c, "times", batch([b"c"], ts=5000))

        def lookup(ts):
            req = lo_req.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(lo_req.ListOffsetsTopic(
                name="times", partitions=(lo_req.ListOffsetsPartition(partition_index=0, timestamp=ts),)),))
            p = c.request(req).topics[0].partitions[0]
            return p.error_code, p.offset, p.timestamp

        assert lookup(-2) == (ErrorCode.none, 0, -1)
        assert lookup(-1) == (ErrorCode.none, 3, -1)
        assert lookup(1001) == (ErrorCode.none, 1, 1001)
        assert lookup(2000) == (ErrorCode.none, 2, 5000)
        assert lookup(9999) == (ErrorCode.none, -1, -1)
        assert lookup(-3) == (ErrorCode.none, 2, 5000)


@pytest.mark.parametrize("acks", [1, -1])
def test_log_append_time_topic(broker, acks):
    broker.create_topic("lat", **{"message.timestamp.type": "LogAppendTime"})
    with broker.client() as c:
        before = int(time.time() * 1000)
        resp = produce(c, "lat", batch([b"a"], ts=5), acks=acks)
        assert resp.log_append_time is not None
        assert resp.log_append_time.timestamp() * 1000 >= before - 1


def test_maintenance_deletion_is_seen_without_restart(broker):
    from topiclake.segments.maintenance import delete_segments

    broker.create_topic("retained", **{"segment.bytes": "150"})  # every batch rolls a new segment
    with broker.client() as c:
        for i in range(4):
            assert produce(c, "retained", batch([f"v{i}".encode() * 10])).base_offset == i
        directory = broker.context.layout.log_dir("retained", 0)
        assert len(list(directory.glob("*.log"))) == 4
        delete_segments(directory, [0, 1], 2)  # what the retention job does

        req = lo_req.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(lo_req.ListOffsetsTopic(
            name="retained", partitions=(lo_req.ListOffsetsPartition(partition_index=0, timestamp=-2),)),))
        assert c.request(req).topics[0].partitions[0].offset == 2
        gone = fetch(c, "retained", 0)
        assert gone.error_code == ErrorCode.offset_out_of_range and gone.log_start_offset == 2
        assert values_of(fetch(c, "retained", 2).records)[0][0] == 2
        assert produce(c, "retained", batch([b"after"])).base_offset == 4


def test_refresh_passes_over_a_log_closed_under_it(broker, caplog):
    # A topic deleted while the periodic refresh walks the open partitions: its closed log is
    # passed over quietly (LogClosedError is no failure of the refresh), the others are refreshed.
    import asyncio
    import logging

    from topiclake.segments.maintenance import delete_segments

    def run(coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, broker.loop).result(10)

    broker.create_topic("going")
    broker.create_topic("staying", **{"segment.bytes": "150"})  # every batch rolls a new segment
    with broker.client() as c:
        assert produce(c, "going", batch([b"a"])).error_code == ErrorCode.none
        for i in range(3):
            assert produce(c, "staying", batch([f"v{i}".encode() * 10])).base_offset == i
    partitions = broker.context.partitions
    going, staying = run(partitions.get("going", 0)), run(partitions.get("staying", 0))
    run(partitions.run_io(going.log.close))
    delete_segments(broker.context.layout.log_dir("staying", 0), [0], 1)
    with caplog.at_level(logging.INFO, logger="topiclake.broker.partitions"):
        run(partitions.refresh_all())
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert staying.log.log_start_offset == 1


def test_duplicate_detected_after_restart(tmp_path):
    from tests.support.in_process_broker import InProcessBroker

    now = int(time.time() * 1000)  # a day-old last timestamp would make the producer expire at load
    first = InProcessBroker(tmp_path / "data").start()
    first.create_topic("again")
    with first.client() as c:
        produce(c, "again", batch([b"a"], ts=now, producer_id=3, epoch=0, seq=0))
        produce(c, "again", batch([b"b", b"c"], ts=now, producer_id=3, epoch=0, seq=1))
    first.stop()
    second = InProcessBroker(tmp_path / "data").start()
    try:
        with second.client() as c:
            # The producer state came back from the log: a retry is still a duplicate.
            dup = produce(c, "again", batch([b"b", b"c"], ts=now, producer_id=3, epoch=0, seq=1))
            assert (dup.error_code, dup.base_offset) == (ErrorCode.none, 1)
            assert produce(c, "again", batch([b"d"], ts=now, producer_id=3, epoch=0, seq=5)).error_code == \
                ErrorCode.out_of_order_sequence_number
            assert produce(c, "again", batch([b"d"], ts=now, producer_id=3, epoch=0, seq=3)).base_offset == 3
    finally:
        second.stop()
    assert (tmp_path / "data" / "log" / "again-0" / ".kafka_cleanshutdown").exists()


def _big_topic(broker, name, batches=4, value_size=900_000):
    """A topic holding `batches` ~1 MB batches of incompressible bytes (two per segment)."""
    import os

    broker.create_topic(name, **{"segment.bytes": str(2 * value_size + 100_000)})
    with broker.client() as c:
        for i in range(batches):
            assert produce(c, name, batch([os.urandom(value_size)])).error_code == ErrorCode.none
    directory = broker.context.layout.log_dir(name, 0)
    return directory, b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def test_large_fetch_is_sent_with_sendfile(broker):
    directory, on_disk = _big_topic(broker, "bulk")
    metrics = broker.context.metrics
    with broker.client() as c:
        first = fetch(c, "bulk", 0, partition_max_bytes=8 << 20)
        second = fetch(c, "bulk", 2, partition_max_bytes=8 << 20)
    # Whole batches up to the segment's end, byte for byte what is on disk.
    assert first.records + second.records == on_disk and len(first.records) > 1 << 20
    assert metrics["fetch.sendfile.regions"] == 2
    assert metrics["fetch.sendfile.bytes"] == len(on_disk) and metrics["fetch.copied.bytes"] == 0


def test_large_fetch_without_sendfile_falls_back_to_reading(broker, monkeypatch):
    import asyncio

    async def no_sendfile(self, transport, file, offset=0, count=None, *, fallback=True):
        raise asyncio.SendfileNotAvailableError("as a TLS transport would")

    _directory, on_disk = _big_topic(broker, "copied", batches=2)
    monkeypatch.setattr(type(broker.loop), "sendfile", no_sendfile)
    with broker.client() as c:
        assert fetch(c, "copied", 0, partition_max_bytes=8 << 20).records == on_disk
        assert fetch(c, "copied", 0, partition_max_bytes=8 << 20).records == on_disk  # the fallback sticks
    metrics = broker.context.metrics
    assert metrics["fetch.copied.bytes"] == 2 * len(on_disk) and metrics["fetch.sendfile.bytes"] == 0


def test_fetch_in_flight_survives_segment_deletion(broker, monkeypatch):
    # Retention deletes the segment between the read (bounds found, file held open) and the
    # sendfile: the open descriptor keeps the old inode, so the fetch still gets its bytes.
    import asyncio

    from topiclake.broker.connection import Connection
    from topiclake.segments.maintenance import delete_segments, purge_deleted

    directory, on_disk = _big_topic(broker, "doomed")
    first_segment = sorted(directory.glob("*.log"))[0].read_bytes()
    original = Connection._send_region

    async def delete_then_send(self, region):
        part = await self.broker.partitions.get("doomed", 0)
        delete_segments(directory, [0], 2)
        purge_deleted(directory)
        assert await self.broker.partitions.run_io(part.log.refresh)
        assert not (directory / "00000000000000000000.log").exists()
        await original(self, region)

    monkeypatch.setattr(Connection, "_send_region", delete_then_send)
    with broker.client() as c:
        assert fetch(c, "doomed", 0, partition_max_bytes=8 << 20).records == first_segment
        monkeypatch.setattr(Connection, "_send_region", original)
        assert fetch(c, "doomed", 0).error_code == ErrorCode.offset_out_of_range
    assert broker.context.metrics["fetch.sendfile.regions"] == 1


def test_batch_larger_than_segment_bytes_is_record_list_too_large(broker):
    # Kafka (UnifiedLog.append): max.message.bytes is checked per batch first (MESSAGE_TOO_LARGE);
    # an append that passes it but exceeds segment.bytes is RecordBatchTooLargeException.
    broker.create_topic("tiny", **{"segment.bytes": "300", "max.message.bytes": "2000"})
    with broker.client() as c:
        assert produce(c, "tiny", batch([b"x" * 500])).error_code == ErrorCode.record_list_too_large
        assert produce(c, "tiny", batch([b"x" * 3000])).error_code == ErrorCode.message_too_large
        assert produce(c, "tiny", batch([b"x" * 100])).error_code == ErrorCode.none
