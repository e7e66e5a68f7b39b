import struct

import pytest
from hypothesis import given, strategies as st

from topiclake.segments.index import IndexFullError, InvalidIndexOffsetError
from topiclake.segments.offset_index import OffsetIndex, OffsetPosition


def test_new_index_is_preallocated_and_trimmed(tmp_path):
    path = tmp_path / "00000000000000000100.index"
    index = OffsetIndex(path, 100, 1003)
    assert path.stat().st_size == 1000 and index.max_entries == 125 and index.entries == 0
    index.append(105, 0)
    index.append(110, 4200)
    assert index.lookup(104) == OffsetPosition(100, 0)
    assert index.lookup(105) == OffsetPosition(105, 0)
    assert index.lookup(109) == OffsetPosition(105, 0)
    assert index.lookup(10**9) == OffsetPosition(110, 4200)
    index.close()
    assert path.read_bytes() == struct.pack(">iiii", 5, 0, 10, 4200)


def test_reopen_existing_is_full_until_resized(tmp_path):
    path = tmp_path / "x.index"
    index = OffsetIndex(path, 0, 80)
    index.append(3, 10)
    index.close()
    reopened = OffsetIndex(path, 0, 80)
    assert reopened.entries == 1 and reopened.is_full()  # as Kafka: room only for what is there
    reopened.resize(80)
    assert not reopened.is_full() and path.stat().st_size == 80
    reopened.append(7, 20)
    assert reopened.last_offset == 7


def test_append_rules(tmp_path):
    index = OffsetIndex(tmp_path / "i.index", 10, 16)
    index.append(11, 0)
    with pytest.raises(InvalidIndexOffsetError, match="not larger"):
        index.append(11, 5)
    with pytest.raises(InvalidIndexOffsetError, match="relative"):
        index.append(10 + 2**31, 5)
    index.append(12, 5)
    with pytest.raises(IndexFullError, match="full"):
        index.append(13, 9)


def test_truncate_to(tmp_path):
    index = OffsetIndex(tmp_path / "i.index", 0, 800)
    for offset in (5, 10, 15, 20):
        index.append(offset, offset * 10)
    index.truncate_to(15)
    assert index.entries == 2 and index.last_offset == 10
    assert (tmp_path / "i.index").stat().st_size == 800
    assert (tmp_path / "i.index").read_bytes()[16:] == bytes(784)  # stale entries are not left behind
    index.truncate_to(0)
    assert index.entries == 0


def test_read_only_missing_index_is_empty(tmp_path):
    index = OffsetIndex(tmp_path / "none.index", 0, 800, writable=False)
    assert index.entries == 0 and index.lookup(5) == OffsetPosition(0, 0)


@given(st.lists(st.integers(1, 10_000), min_size=1, max_size=200, unique=True), st.integers(0, 11_000))
def test_lookup_is_largest_entry_at_or_below(tmp_path_factory, offsets, target):
    offsets.sort()
    path = tmp_path_factory.mktemp("idx") / "i.index"
    index = OffsetIndex(path, 0, 8 * 256)
    for i, offset in enumerate(offsets):
        index.append(offset, i * 7)
    below = [(o, i * 7) for i, o in enumerate(offsets) if o <= target]
    expected = OffsetPosition(*below[-1]) if below else OffsetPosition(0, 0)
    assert index.lookup(target) == expected
    index.close()


@pytest.mark.parametrize("written", [0, 1, 2, 7, 1000])
def test_reopen_after_a_crash_skips_the_preallocated_zeros(tmp_path, written):
    """kill -9 leaves an active segment's index at segment.index.bytes: its entries, then zeros.
    Those zeros are room for more entries, not entries (a broker restart used to parse them all)."""
    path = tmp_path / "00000000000000000100.index"
    index = OffsetIndex(path, 100, 10 * 1024 * 1024)
    entries = [(100 + 5 * (i + 1), 256 * i) for i in range(written)]  # position 0, 256: zero bytes inside
    for offset, position in entries:
        index.append(offset, position)
    index.flush()
    index.close_handler()  # as a crash: no trim
    assert path.stat().st_size == 10 * 1024 * 1024
    reopened = OffsetIndex(path, 100, 10 * 1024 * 1024)
    assert reopened.entries == written and not reopened.is_full()
    assert [reopened.entry(i) for i in range(written)] == [OffsetPosition(*e) for e in entries]
    reopened.append(100 + 5 * (written + 1), 300 * 1024)
    reopened.close()
    assert path.stat().st_size == 8 * (written + 1)


def test_every_flush_of_new_entries_is_fsynced(tmp_path, monkeypatch):
    """The index opens its file only to write: a flush after new entries writes and fsyncs them,
    one with nothing new fsyncs nothing."""
    import os

    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    index = OffsetIndex(tmp_path / "00000000000000000000.index", 0, 1000)
    for round_ in range(3):
        index.append(10 * (round_ + 1), 100 * round_)
        index.flush()
        assert len(synced) == round_ + 1, f"round {round_}: {len(synced)} fsyncs"
    index.flush()
    assert len(synced) == 3
    index.close()


def test_an_index_whose_file_was_replaced_never_writes_into_the_replacement(tmp_path):
    """A maintenance job outside the broker swaps in a cleaned segment at the same base offset while
    the live index still holds entries to write: they are dropped (they went to the unlinked file
    when the index held its descriptor), and the replacement keeps its bytes."""
    import os

    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 1000)
    index.append(5, 0)
    index.flush()
    index.append(9, 4096)  # pending, not yet written
    cleaned = tmp_path / "cleaned"
    cleaned.write_bytes(struct.pack(">ii", 3, 0))
    os.replace(cleaned, path)
    index.flush()
    index.close()
    assert path.read_bytes() == struct.pack(">ii", 3, 0)
    gone = OffsetIndex(tmp_path / "00000000000000000100.index", 100, 1000)
    gone.append(105, 0)
    os.unlink(gone.path)
    gone.close()  # the trim finds no file: nothing raised, nothing created
    assert not gone.path.exists()
