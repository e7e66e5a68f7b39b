"""Aborted-transaction index (`.txnindex`): Kafka's 34-byte entries, atomic appends, damage."""

import struct

import pytest

from topiclake.segments.errors import CorruptRecordError
from topiclake.segments.txn_index import (TxnIndexEntry, append_txn_index, decode_txn_index, encode_txn_index,
                                          read_txn_index, write_txn_index)
from topiclake.segments.txn_metadata import AbortedTxn


def test_entries_are_kafkas_abortedtxn_layout(tmp_path):
    entry = TxnIndexEntry(producer_id=7, first_offset=10, last_offset=14, last_stable_offset=15)
    assert encode_txn_index([entry]) == struct.pack(">hqqqq", 0, 7, 10, 14, 15)
    assert entry.aborted == AbortedTxn(10, 7, 14)
    path = tmp_path / "00000000000000000010.txnindex"
    assert read_txn_index(path) == []  # no file: no aborted transaction in that segment
    append_txn_index(path, entry)
    append_txn_index(path, TxnIndexEntry(8, 12, 20, 21))
    assert read_txn_index(path, base_offset=10) == [entry, TxnIndexEntry(8, 12, 20, 21)]
    assert path.stat().st_size == 68 and [p.name for p in tmp_path.iterdir()] == [path.name]
    write_txn_index(path, [])
    assert not path.exists()


@pytest.mark.parametrize("data, base, reason", [
    (struct.pack(">hqqqq", 0, 1, 2, 3, 4)[:-3], None, "truncated"),
    (struct.pack(">hqqqq", 1, 1, 2, 3, 4), None, "version 1"),
    (struct.pack(">hqqqq", 0, 1, 2, 3, 4), 10, "below the segment's base offset"),
])
def test_damaged_indexes_are_rejected(data, base, reason):
    with pytest.raises(CorruptRecordError, match=reason):
        decode_txn_index(data, base_offset=base, source="x.txnindex")


def test_compaction_keeps_entries_of_kept_markers_and_retention_retires_the_file(tmp_path):
    from topiclake.segments import filenames as fn
    from topiclake.segments.batch import Record, build_batch, iter_batches
    from topiclake.segments.control import build_end_txn_marker
    from topiclake.segments.log import Log
    from topiclake.segments.maintenance import delete_segments, replace_segments

    def data(pid):
        return build_batch([Record(0, 1000, b"k", b"v", ())], base_offset=0, producer_id=pid, producer_epoch=0,
                           base_sequence=0, is_transactional=True)

    def abort(pid):
        return build_end_txn_marker(offset=0, timestamp=1000, producer_id=pid, producer_epoch=0, commit=False)

    directory = tmp_path / "t-0"
    log = Log.open(directory)
    for batch in (data(1), abort(1), data(2), abort(2), data(3)):  # offsets 0..4
        log.append(batch)
    log.roll()
    log.append(data(4))
    log.roll()
    index = fn.txn_index_file(directory, 0)
    entries = [TxnIndexEntry(1, 0, 1, 2), TxnIndexEntry(2, 2, 3, 4)]
    write_txn_index(index, entries)
    old = [bytes(b.data) for b in iter_batches(fn.log_file(directory, 0).read_bytes())]
    cleaned = fn.log_file(directory, 0, fn.CLEANED_SUFFIX)
    cleaned.write_bytes(b"".join(old[:3] + old[4:]))  # the cleaner dropped producer 2's marker
    replace_segments(directory, [0], [cleaned])
    assert read_txn_index(index, 0) == entries[:1]
    assert read_txn_index(fn.txn_index_file(directory, 0, fn.DELETED_SUFFIX)) == entries  # the old one, retired
    delete_segments(directory, [0], 5)
    assert not index.exists() and fn.txn_index_file(directory, 0, fn.DELETED_SUFFIX).exists()
    log.close()
