"""Producer snapshots (`.snapshot`): real Kafka 3.8 bytes, exact round trip, rejected damage."""

import pytest

from topiclake.segments import filenames as fn
from topiclake.segments.errors import CorruptRecordError
from topiclake.segments.producer_snapshot import (ProducerSnapshotEntry, decode_snapshot, delete_snapshots,
                                                  encode_snapshot, list_snapshots, read_snapshot, write_snapshot)

from tests.support.paths import KAFKA_38_SEGMENTS as CORPUS

KAFKA = {
    "codecrafters-kafka-tester-510714e/foo-0/00000000000000000001.snapshot":
        [ProducerSnapshotEntry(0, 0, 0, 0, 0, 1726045973899, -1, -1)],
    "codecrafters-kafka-tester-e856b9a/foo-0/00000000000000000003.snapshot":
        [ProducerSnapshotEntry(0, 0, 2, 2, 0, 1725272041932, -1, -1)],
    "codecrafters-kafka-tester-e856b9a/__cluster_metadata-0/00000000000000000116.snapshot": [],
}


@pytest.mark.parametrize("name", KAFKA)
def test_reads_kafka_snapshots_and_writes_the_same_bytes(name):
    path = CORPUS / name
    entries = read_snapshot(path)
    assert entries == KAFKA[name]
    assert encode_snapshot(entries) == path.read_bytes()
    assert list_snapshots(path.parent)[fn.offset_from_name(path.name)] == path


def test_write_is_atomic_and_named_after_the_offset(tmp_path):
    entries = [ProducerSnapshotEntry(7, 2, 9, 41, 3, 1000, 5, 38), ProducerSnapshotEntry(8, 0, -1, -1, 0, -1)]
    path = write_snapshot(tmp_path, 42, entries)
    assert path.name == "00000000000000000042.snapshot" and read_snapshot(path) == entries
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temp file left
    assert entries[0].first_offset == 38 and entries[0].first_sequence == 6
    assert ProducerSnapshotEntry(1, 0, 1, 10, 3, 0).first_sequence == (1 << 31) - 2  # sequences wrap


@pytest.mark.parametrize("damage, reason", [
    (lambda b: b[:5], "truncated"),
    (lambda b: b[:-1], "CRC mismatch"),
    (lambda b: b[:20] + bytes([b[20] ^ 1]) + b[21:], "CRC mismatch"),
    (lambda b: b"\x00\x02" + b[2:], "version 2"),
])
def test_damaged_snapshots_are_rejected(damage, reason):
    data = encode_snapshot([ProducerSnapshotEntry(1, 0, 4, 4, 0, 1000)])
    with pytest.raises(CorruptRecordError, match=reason):
        decode_snapshot(damage(data))


def test_a_count_that_does_not_match_the_length_is_rejected():
    import crc32c
    body = (2).to_bytes(4, "big") + bytes(46)  # declares 2 entries, holds 1
    data = (1).to_bytes(2, "big") + crc32c.crc32c(body).to_bytes(4, "big") + body
    with pytest.raises(CorruptRecordError, match="declares 2 entries"):
        decode_snapshot(data, source="x.snapshot")


def test_delete_snapshots_above_below_and_beyond_the_newest(tmp_path):
    for offset in (0, 5, 10, 15, 20):
        write_snapshot(tmp_path, offset, [])
    assert delete_snapshots(tmp_path, above=15) == [20]
    assert delete_snapshots(tmp_path, below=5, keep_newest=2) == [0, 5]
    assert list(list_snapshots(tmp_path)) == [10, 15]


def test_the_loader_drops_snapshots_when_it_completes_a_swap(tmp_path):
    """It drops the swapped segments' index files, the .txnindex included: the broker must not
    trust a snapshot's promise that every abort below it is indexed."""
    from topiclake.segments.log import Log

    from tests.segments.segment_logs import make_batch

    directory = tmp_path / "t-0"
    log = Log.open(directory)
    log.append(make_batch(2))
    log.roll()
    log.append(make_batch(1))
    log.close()
    write_snapshot(directory, 2, [])
    write_snapshot(directory, 3, [])
    fn.log_file(directory, 0, fn.SWAP_SUFFIX).write_bytes(fn.log_file(directory, 0).read_bytes())
    Log.open(directory).close()
    assert not fn.log_file(directory, 0, fn.SWAP_SUFFIX).exists() and list_snapshots(directory) == {}
