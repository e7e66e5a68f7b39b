"""Property tests: encode/decode round trips over every codec; corruption gives the same records
or the typed error, never another exception and never a hang."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topiclake.segments.batch import Record, TimestampType, build_batch, iter_batches
from topiclake.segments.compression import Compression
from topiclake.segments.errors import CorruptRecordError
from topiclake.segments.records_file import iter_entries

_bytes = st.one_of(st.none(), st.binary(max_size=64))
_header = st.tuples(st.text(max_size=8), _bytes)
_record_fields = st.tuples(st.integers(0, 3), st.integers(-(2**40), 2**40), _bytes, _bytes,
                           st.lists(_header, max_size=3).map(tuple))


@st.composite
def batches(draw):
    fields = draw(st.lists(_record_fields, min_size=1, max_size=20))
    base = draw(st.integers(0, 2**40))
    offset, records = base, []
    for gap, ts, key, value, headers in fields:
        records.append(Record(offset, 1_600_000_000_000 + ts, key, value, headers))
        offset += 1 + gap  # gaps, as compaction leaves them
    return records, dict(
        compression=draw(st.sampled_from(list(Compression))),
        producer_id=draw(st.integers(-1, 2**40)),
        producer_epoch=draw(st.integers(-1, 2**15 - 1)),
        base_sequence=draw(st.integers(-1, 2**31 - 1)),
        is_transactional=draw(st.booleans()),
        partition_leader_epoch=draw(st.integers(-1, 2**31 - 1)),
    )


@settings(max_examples=150, deadline=None)
@given(batches())
def test_round_trip_every_codec(case):
    records, options = case
    data = build_batch(records, **options)
    (batch,) = list(iter_batches(data))
    assert batch.records() == records
    h = batch.header
    assert h.compression is options["compression"]
    assert h.producer_id == options["producer_id"] and h.base_sequence == options["base_sequence"]
    assert h.timestamp_type is TimestampType.CREATE_TIME
    assert h.max_timestamp == max(r.timestamp for r in records)


def _decode_all(data: bytes) -> list[Record]:
    return [r for entry in iter_entries(data, source="fuzz") for r in entry.records()]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(batches(), min_size=1, max_size=3), st.data())
def test_corruption_gives_same_records_or_typed_error(cases, data):
    blob = bytearray(b"".join(build_batch(records, **options) for records, options in cases))
    expected = [r for records, _ in cases for r in records]
    mode = data.draw(st.sampled_from(["flip", "truncate", "garbage", "splice"]))
    if mode == "flip":
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(0, len(blob) - 1))
            blob[i] ^= data.draw(st.integers(1, 255))
    elif mode == "truncate":
        del blob[data.draw(st.integers(0, len(blob) - 1)):]
    elif mode == "garbage":
        blob += data.draw(st.binary(min_size=1, max_size=100))
    else:
        i = data.draw(st.integers(0, len(blob)))
        blob[i:i] = data.draw(st.binary(min_size=1, max_size=16))
    try:
        got = _decode_all(bytes(blob))
    except CorruptRecordError as exc:
        assert exc.reason and exc.position is not None
        return
    # A flip can land in fields outside the CRC (base offset, leader epoch) and still decode.
    if mode == "flip":
        assert len(got) == len(expected)
        assert [(r.key, r.value, r.headers) for r in got] == [(r.key, r.value, r.headers) for r in expected]
    else:
        assert got == expected[: len(got)] if mode == "truncate" else got[: len(expected)] == expected


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.data())
def test_hostile_record_bytes_behind_a_valid_crc_raise_the_typed_error(case, data):
    """The CRC only says the bytes are what the writer sent; a buggy writer's records must still
    fail cleanly. Corrupt the records section, then fix up the CRC so the record parser sees it."""
    from topiclake.segments.batch import CRC_OFFSET, HEADER_SIZE, compute_crc

    records, options = case
    blob = bytearray(build_batch(records, **dict(options, compression=Compression.NONE)))
    if len(blob) == HEADER_SIZE:
        return
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(HEADER_SIZE, len(blob) - 1))
        blob[i] = data.draw(st.integers(0, 255))
    struct.pack_into(">I", blob, CRC_OFFSET, compute_crc(blob))
    try:
        (batch,) = list(iter_batches(bytes(blob)))
        batch.records()
    except CorruptRecordError as exc:
        assert exc.position == 0
