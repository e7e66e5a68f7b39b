"""Cross-check with independent code: kafka-python's and kio's record readers and writers."""

from __future__ import annotations

import datetime
import io

import pytest
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder
from kio.records import readers as kio_readers
from kio.records import schema as kio_schema
from kio.records import writers as kio_writers

from topiclake.segments.batch import Record, build_batch, iter_batches
from topiclake.segments.compression import Compression
from topiclake.segments.records_file import iter_entries

RECORDS = [
    Record(0, 1_700_000_000_000, b"alpha", b"one", (("trace", b"t1"), ("empty", b""))),
    Record(1, 1_700_000_000_010, None, b"two", ()),
    Record(2, 1_700_000_000_020, b"gamma", None, (("n", None),)),
    Record(3, 1_700_000_000_015, b"", b"x" * 5000, ()),
]


def _kafka_python_records(data: bytes) -> list[Record]:
    out = []
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        for r in batch:
            out.append(Record(r.offset, r.timestamp, r.key, r.value, tuple((k, v) for k, v in r.headers)))
    return out


@pytest.mark.parametrize("codec", list(Compression))
def test_kafka_python_reads_what_we_write(codec):
    data = build_batch(RECORDS, compression=codec, producer_id=4, producer_epoch=0, base_sequence=0)
    assert _kafka_python_records(data) == RECORDS
    (theirs,) = list(MemoryRecords(data))
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (4, 0, 0)
    assert theirs.compression_type == int(codec) and theirs.max_timestamp == 1_700_000_000_020


@pytest.mark.parametrize("codec", list(Compression))
def test_we_read_what_kafka_python_writes(codec):
    builder = MemoryRecordsBuilder(magic=2, compression_type=int(codec), batch_size=1 << 20)
    for r in RECORDS:
        builder.append(r.timestamp, r.key, r.value, list(r.headers))
    builder.close()
    (batch,) = list(iter_batches(bytes(builder.buffer())))
    assert batch.compression is codec
    assert batch.records() == RECORDS


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4])
def test_we_read_kafka_python_legacy_message_sets(magic, codec):
    builder = MemoryRecordsBuilder(magic=magic, compression_type=int(codec), batch_size=1 << 20)
    plain = [r for r in RECORDS]
    for r in plain:
        builder.append(r.timestamp, r.key, r.value)
    builder.close()
    data = bytearray(builder.buffer())
    if codec is not Compression.NONE:
        # A producer leaves the wrapper's offset 0; the broker stores the last inner offset there
        # (outside the CRC), which is what v1's relative inner offsets are resolved against.
        data[0:8] = plain[-1].offset.to_bytes(8, "big")
    data = bytes(data)
    got = [rec for entry in iter_entries(data, source="legacy") for rec in entry.records()]
    assert [(r.offset, r.key, r.value) for r in got] == [(r.offset, r.key, r.value) for r in plain]
    want_ts = [r.timestamp for r in plain] if magic == 1 else [-1] * len(plain)
    assert [r.timestamp for r in got] == want_ts
    theirs = [(r.offset, r.key, r.value) for batch in MemoryRecords(data) for r in batch]
    assert theirs == [(r.offset, r.key, r.value) for r in got]


def test_legacy_crc_is_crc32_and_checked():
    from topiclake.segments.errors import CorruptRecordError

    builder = MemoryRecordsBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    builder.append(5, b"k", b"v")
    builder.close()
    data = bytearray(builder.buffer())
    data[-1] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC-32 mismatch"):
        list(iter_entries(bytes(data), source="old.log"))


def _kio_millis(ts: datetime.datetime) -> int:
    return round(ts.timestamp() * 1000)


def _seconds(records: list[Record]) -> list[Record]:
    """kio 0.6 keeps record timestamps to the second (it drops the microseconds)."""
    return [Record(r.offset, r.timestamp // 1000 * 1000, r.key, r.value, r.headers) for r in records]


def test_kio_reads_what_we_write():
    data = build_batch(RECORDS, producer_id=9, producer_epoch=2, base_sequence=3)
    batch, size = kio_readers.read_batch(data, 0)
    assert size == len(data)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (9, 2, 3)
    got = [Record(r.offset, _kio_millis(r.timestamp), r.key, r.value,
                  tuple((h.key.decode(), h.value) for h in r.headers)) for r in batch.records]
    assert got == _seconds(RECORDS)


def test_we_read_what_kio_writes():
    base = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    kio_records = tuple(
        kio_schema.Record(attributes=0, timestamp=base + datetime.timedelta(milliseconds=i), offset=i,
                          key=None if i == 1 else f"k{i}".encode(), value=f"v{i}".encode(),
                          headers=(kio_schema.RecordHeader(key=b"h", value=b"x"),))
        for i in range(3)
    )
    out = io.BytesIO()
    kio_writers.write_new_batch(out, kio_schema.NewRecordBatch(producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                                               records=kio_records, attributes=0))
    (batch,) = list(iter_batches(out.getvalue()))
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()] == [
        (r.offset, _kio_millis(r.timestamp), r.key, r.value, (("h", b"x"),)) for r in kio_records
    ]
