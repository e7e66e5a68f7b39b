"""Record batch v2: conformance vectors, header fields, attribute bits, round trips."""

from __future__ import annotations

import json
import struct

import pytest

from tests.support.paths import CONFORMANCE
from topiclake.segments import batch as b
from topiclake.segments.batch import Record, TimestampType, build_batch, iter_batches, read_header
from topiclake.segments.compression import Compression
from topiclake.segments.errors import CorruptRecordError

VECTORS = json.loads((CONFORMANCE / "vectors.json").read_text())


def _hex(data: bytes | None) -> str | None:
    return None if data is None else data.hex()


@pytest.mark.parametrize("vector", [v for v in VECTORS if v["expect_crc_ok"]], ids=lambda v: v["source"][-60:])
def test_vector_decodes_to_its_expected_fields(vector):
    data = bytes.fromhex(vector["hex"])
    expected = vector["decoded_by_independent_decoder"]
    (batch,) = list(iter_batches(data, source="vector"))
    h = batch.header
    assert h.size == len(data) == vector["length"]
    assert (h.base_offset, h.length, h.partition_leader_epoch, h.magic) == (
        expected["baseOffset"], expected["batchLength"], expected["partitionLeaderEpoch"], expected["magic"])
    assert h.crc == expected["crc"] == b.compute_crc(data)
    assert h.attributes == expected["attributes"]
    assert h.compression.label == expected["compression"]
    assert h.timestamp_type.label == expected["timestampType"]
    assert (h.is_transactional, h.is_control, h.has_delete_horizon) == (
        expected["isTransactional"], expected["isControl"], expected["hasDeleteHorizon"])
    assert (h.last_offset_delta, h.base_timestamp, h.max_timestamp) == (
        expected["lastOffsetDelta"], expected["baseTimestamp"], expected["maxTimestamp"])
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (
        expected["producerId"], expected["producerEpoch"], expected["baseSequence"], expected["recordCount"])
    records = batch.records()
    assert len(records) == len(expected["records"])
    for record, want in zip(records, expected["records"]):
        assert record.offset == h.base_offset + want["offsetDelta"]
        assert record.timestamp == h.base_timestamp + want["timestampDelta"]
        assert _hex(record.key) == want["key"]
        assert _hex(record.value) == want["value"]
        assert [[k, _hex(v)] for k, v in record.headers] == [list(hh) for hh in want["headers"]]
    # the fields the vector's source asserts, independently of the decoder above
    src = vector["expected"]
    if "records" in src:
        for record, want in zip(records, src["records"]):
            if "value" in want:
                assert _hex(record.value) == want["value"] or record.value == want["value"].encode()


def test_bad_crc_vector_is_rejected_with_position():
    (vector,) = [v for v in VECTORS if not v["expect_crc_ok"]]
    data = bytes.fromhex(vector["hex"])
    with pytest.raises(CorruptRecordError, match="CRC mismatch") as info:
        list(iter_batches(data, source="bad.log"))
    assert info.value.source == "bad.log" and info.value.position == 0
    assert "bad.log" in str(info.value)
    # without validation the header still parses, so tools can show isValid=false
    (batch,) = list(iter_batches(data, validate=False))
    assert not batch.is_valid()


@pytest.mark.parametrize("codec", list(Compression))
def test_build_then_parse_keeps_every_field(codec):
    records = [
        Record(100, 1_700_000_000_000, b"k1", b"v1", (("h", b"x"), ("n", None))),
        Record(101, 1_700_000_000_005, None, b"", ()),
        Record(103, 1_699_999_999_999, b"", None, ()),  # gap in offsets, timestamp going back
    ]
    data = build_batch(records, compression=codec, producer_id=7, producer_epoch=3, base_sequence=11,
                       is_transactional=True, partition_leader_epoch=5)
    (batch,) = list(iter_batches(data))
    h = batch.header
    assert (h.base_offset, h.last_offset, h.records_count) == (100, 103, 3)
    assert h.compression is codec
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (7, 3, 11, 14)
    assert h.is_transactional and not h.is_control and not h.has_delete_horizon
    assert h.partition_leader_epoch == 5
    assert h.base_timestamp == 1_700_000_000_000 and h.max_timestamp == 1_700_000_000_005
    assert batch.records() == records


def test_delete_horizon_bit_moves_base_timestamp():
    records = [Record(0, 1000, b"k", None), Record(1, 1500, b"k2", b"v")]
    data = build_batch(records, delete_horizon=90_000)
    h = read_header(data)
    assert h.has_delete_horizon and h.delete_horizon == 90_000 and h.base_timestamp == 90_000
    assert h.max_timestamp == 1500
    assert b.RecordBatch(h, data).records() == records  # deltas are relative to the horizon


def test_empty_batch_keeps_offsets_like_write_empty_header():
    data = build_batch([], base_offset=40, last_offset_delta=9, producer_id=3, producer_epoch=1,
                       base_sequence=5, compression="zstd", max_timestamp=1234)
    h = read_header(data)
    assert (h.base_offset, h.last_offset, h.records_count) == (40, 49, 0)
    assert h.compression is Compression.NONE and h.base_timestamp == -1 and h.max_timestamp == 1234
    assert list(iter_batches(data))[0].records() == []


def test_log_append_time_patch_recomputes_crc_and_overrides_timestamps():
    data = bytearray(build_batch([Record(0, 5, b"a", b"b"), Record(1, 6, None, b"c")]))
    b.set_base_offset(data, 0, 1000)
    b.set_partition_leader_epoch(data, 0, 9)
    b.set_log_append_time(data, 0, 777)
    (batch,) = list(iter_batches(bytes(data)))
    assert batch.header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert batch.header.partition_leader_epoch == 9
    assert [(r.offset, r.timestamp) for r in batch.records()] == [(1000, 777), (1001, 777)]


def test_several_batches_and_partial_tail():
    one = build_batch([Record(0, 1, b"a", b"1")])
    two = build_batch([Record(1, 2, b"b", b"2")])
    data = one + two + two[:30]
    with pytest.raises(CorruptRecordError, match="truncated batch") as info:
        list(iter_batches(data))
    assert info.value.position == len(one) + len(two)
    batches = list(iter_batches(data, allow_partial_tail=True))
    assert [x.position for x in batches] == [0, len(one)]


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda d: d[:40], "truncated"),
        (lambda d: d[:8] + struct.pack(">i", 3) + d[12:], "impossible batch length"),
        (lambda d: d[:8] + struct.pack(">i", 0x7FFFFFF0) + d[12:], "truncated batch"),
        (lambda d: d[:16] + b"\x07" + d[17:], "magic"),
        (lambda d: d[:57] + struct.pack(">i", 5) + d[61:], "CRC"),  # count changed -> CRC fails first
        (lambda d: d[:-1] + bytes([d[-1] ^ 0xFF]), "CRC"),
    ],
)
def test_bad_bytes_raise_the_typed_error(mutate, reason):
    data = mutate(build_batch([Record(0, 1, b"key", b"value"), Record(1, 2, b"key2", b"value2")]))
    with pytest.raises(CorruptRecordError, match=reason):
        for x in iter_batches(data, source="t.log"):
            x.records()


def test_record_count_mismatch_with_valid_crc_is_reported():
    data = bytearray(build_batch([Record(0, 1, b"key", b"value"), Record(1, 2, b"key2", b"value2")]))
    struct.pack_into(">i", data, 57, 3)
    struct.pack_into(">I", data, b.CRC_OFFSET, b.compute_crc(data))
    (batch,) = list(iter_batches(bytes(data), source="t.log"))
    with pytest.raises(CorruptRecordError, match="Incorrect declared batch size") as info:
        batch.records()
    assert info.value.position == 0 and info.value.source == "t.log"


def test_unknown_codec_is_a_corrupt_record():
    data = bytearray(build_batch([Record(0, 1, b"k", b"v")]))
    struct.pack_into(">h", data, b.ATTRIBUTES_OFFSET, 6)
    struct.pack_into(">I", data, b.CRC_OFFSET, b.compute_crc(data))
    with pytest.raises(CorruptRecordError, match="unknown compression codec 6") as info:
        list(iter_batches(bytes(data), source="t.log"))
    assert info.value.position == 0
