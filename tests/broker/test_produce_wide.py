"""A Produce request over many partitions, as librdkafka sends one when a producer spreads its
records over tens to hundreds of partitions: each batch is checked once on the event loop
(`_checked_header`, the CRC included) and appended on the writer thread without its CRC computed
again (`Log.append_validated`). A refused batch is answered for its own partition only."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import request as produce_req

from topiclake.broker.handlers.produce import _checked_header, validate_batch
from topiclake.segments.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, Record, build_batch, compute_crc
from topiclake.segments.errors import CorruptRecordError, RecordTooLargeError
from topiclake.segments.log import Log
from topiclake.segments.config import LogConfig
from tests.support.in_process_broker import InProcessBroker
from tests.support.wire import TIMEOUT, batch, fetch, values_of


def _wide_request(topic: str, batches: dict[int, bytes]):
    return produce_req.ProduceRequest(transactional_id=None, acks=-1, timeout=TIMEOUT, topic_data=(
        produce_req.TopicProduceData(name=topic, partition_data=tuple(
            produce_req.PartitionProduceData(index=index, records=data) for index, data in batches.items())),))


def _bad_crc(data: bytes) -> bytes:
    damaged = bytearray(data)
    damaged[-1] ^= 0xFF
    return bytes(damaged)


def test_each_partition_gets_its_own_answer_and_the_good_ones_are_stored(tmp_path):
    data = tmp_path / "data"
    broker = InProcessBroker(data).start()
    try:
        # small segments: the good batches of the later requests roll some partitions' segments
        broker.create_topic("wide", 8, **{"max.message.bytes": "300", "segment.bytes": "200"})
        refused = {1: _bad_crc(batch([b"bad"])), 2: batch([b"x" * 400]), 3: batch([b"a"]) + batch([b"b"]),
                   4: b"\x00" * 30, 40: batch([b"nowhere"])}
        with broker.client() as c:
            for round_ in range(3):
                good = {i: batch([f"{i}.{round_}.{n}".encode() for n in range(round_ + 1)]) for i in (0, 5, 6, 7)}
                answer = c.request(_wide_request("wide", {**good, **refused})).responses[0].partition_responses
                codes = {p.index: p.error_code for p in answer}
                assert codes == {0: ErrorCode.none, 5: ErrorCode.none, 6: ErrorCode.none, 7: ErrorCode.none,
                                 1: ErrorCode.corrupt_message, 2: ErrorCode.message_too_large,
                                 3: ErrorCode.invalid_record, 4: ErrorCode.corrupt_message,
                                 40: ErrorCode.unknown_topic_or_partition}
                assert [p.index for p in answer] == [0, 5, 6, 7, 1, 2, 3, 4, 40]  # the request's order
                expected_base = sum(range(1, round_ + 1))  # 1, then 2 records were stored before
                assert {p.base_offset for p in answer if p.error_code == ErrorCode.none} == {expected_base}
                assert all(p.base_offset == -1 for p in answer if p.error_code != ErrorCode.none)
        assert len(list((data / "log" / "wide-0").glob("*.log"))) > 1  # the segment rolled
    finally:
        broker.stop()
    again = InProcessBroker(data).start()  # what was acknowledged is there after a restart
    try:
        with again.client() as c:
            for i in (0, 5, 6, 7):
                values = [v for _o, v in values_of(_read_all(c, "wide", i))]
                assert values == [f"{i}.{r}.{n}".encode() for r in range(3) for n in range(r + 1)]
            for i in (1, 2, 3, 4):
                assert fetch(c, "wide", 0, partition=i).high_watermark == 0  # nothing refused was written
    finally:
        again.stop()


def _read_all(client, topic: str, partition: int) -> bytes:
    records, offset = b"", 0
    while True:
        part = fetch(client, topic, offset, partition=partition)
        if not part.records:
            return records
        records += part.records
        offset = values_of(part.records)[-1][0] + 1


def _variants(data: bytes):
    """`data` with each header byte and the last byte changed (those under the CRC also with the
    CRC made right again: a well-formed batch with odd fields), cut short and lengthened."""
    for position in [*range(HEADER_SIZE), len(data) - 1]:
        for value in (0x00, 0xFF, data[position] ^ 0x01):
            changed = bytearray(data)
            changed[position] = value
            yield bytes(changed)
            if ATTRIBUTES_OFFSET <= position < HEADER_SIZE:
                changed[CRC_OFFSET:CRC_OFFSET + 4] = compute_crc(changed).to_bytes(4, "big")
                yield bytes(changed)
    yield data[:-1]
    yield data + b"\x00"
    yield data[:HEADER_SIZE - 1]
    yield b""


@pytest.mark.parametrize("data", [
    batch([b"v"] * 3),
    batch([b"v"], producer_id=5, epoch=0, seq=0, compression="lz4"),
    build_batch([Record(0, 1, None, b"c", ())], is_control=True, producer_id=1, producer_epoch=0),
], ids=["plain", "idempotent-lz4", "control"])
def test_the_one_pass_check_agrees_with_validate_batch(data):
    """Whatever a damaged or odd batch breaks, the fast check passes exactly the batches
    validate_batch passes, with the same header."""
    for variant in [data, *_variants(data)]:
        for max_bytes in (len(variant) - 1, 1 << 20):
            try:
                expected = validate_batch(variant, max_bytes, "test")
            except Exception:  # noqa: BLE001 - any refusal: the fast check must refuse too
                expected = None
            assert _checked_header(variant, max_bytes) == expected, variant.hex()


def test_append_validated_keeps_the_log_checks(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=300, max_message_bytes=1000))
    data = batch([b"a", b"b"], ts=1_700_000_000_000)
    header = _checked_header(data, 1 << 20)
    first = log.append_validated(data, header, leader_epoch=3)
    assert (first.first_offset, first.last_offset, first.record_count, first.size) == (0, 1, 2, len(data))
    for _ in range(3):  # past segment.bytes: rolls as `append` does
        log.append_validated(data, header, leader_epoch=3)
    assert log.log_end_offset == 8 and log.segment_count > 1
    read = log.read(0, 1 << 20)
    assert values_of(read.to_bytes())[:2] == [(0, b"a"), (1, b"b")]
    stored = log.read(6, 1 << 20).to_bytes()
    assert stored[:8] == (6).to_bytes(8, "big") and stored[12:16] == (3).to_bytes(4, "big")  # offset, epoch
    log.update_config(LogConfig(segment_bytes=300, max_message_bytes=len(data) - 1))  # changed since the check
    with pytest.raises(RecordTooLargeError):
        log.append_validated(data, header)
    log.update_config(LogConfig(segment_bytes=300, max_message_bytes=1000))
    empty = build_batch([], base_offset=0, last_offset_delta=-1)
    with pytest.raises(CorruptRecordError, match="at least one record"):
        log.append_validated(empty, _checked_header(empty, 1 << 20))
    with pytest.raises(CorruptRecordError):
        log.append_validated(data[:-1], header)  # not the bytes the header was read from
    assert log.log_end_offset == 8  # nothing refused was written
    log.close()


def test_the_timestamp_bounds_are_judged_after_the_partitions_opened(tmp_path):
    """A request to cold partitions waits for their opens (seconds at a start that recovers): its
    batches' timestamps are judged at the time they are appended, not the time it arrived."""
    broker = InProcessBroker(tmp_path / "data").start()
    try:
        broker.create_topic("judged", 2, **{"message.timestamp.before.max.ms": "60000"})
        partitions = broker.context.partitions
        now = {"ms": partitions.clock()}
        partitions.clock = lambda: now["ms"]
        open_many = partitions.open_many

        async def slow_open_many(keys):
            await open_many(keys)
            now["ms"] += 120_000  # as if the opens had taken two minutes

        partitions.open_many = slow_open_many
        record = build_batch([Record(0, now["ms"] - 30_000, None, b"half a minute old on arrival")])
        with broker.client() as c:
            answer = c.request(_wide_request("judged", {0: record, 1: record})).responses[0].partition_responses
        assert {p.error_code for p in answer} == {ErrorCode.invalid_timestamp}, answer
    finally:
        broker.stop()
