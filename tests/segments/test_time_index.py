import struct

import pytest

from topiclake.segments.index import IndexFullError, InvalidIndexOffsetError
from topiclake.segments.time_index import TimeIndex, TimestampOffset


def test_maybe_append_and_lookup(tmp_path):
    path = tmp_path / "00000000000000000050.timeindex"
    index = TimeIndex(path, 50, 12 * 10)
    assert index.last_entry == TimestampOffset(-1, 50)
    assert index.maybe_append(100, 55)
    assert not index.maybe_append(100, 56)  # same timestamp: nothing new to say
    assert index.maybe_append(200, 60)
    assert index.lookup(99) == TimestampOffset(-1, 50)
    assert index.lookup(150) == TimestampOffset(100, 55)
    assert index.lookup(500) == TimestampOffset(200, 60)
    with pytest.raises(InvalidIndexOffsetError):
        index.maybe_append(300, 59)
    with pytest.raises(InvalidIndexOffsetError, match="smaller than the last timestamp"):
        index.maybe_append(150, 61)
    index.close()
    assert path.read_bytes() == struct.pack(">qiqi", 100, 5, 200, 10)


def test_full_keeps_last_slot_for_roll(tmp_path):
    index = TimeIndex(tmp_path / "t.timeindex", 0, 36)  # 3 entries
    index.maybe_append(1, 1)
    index.maybe_append(2, 2)
    assert index.is_full()  # entries >= maxEntries - 1
    with pytest.raises(IndexFullError, match="full"):
        index.maybe_append(3, 3)
    assert index.maybe_append(3, 3, skip_full_check=True)
    assert index.entries == 3


def test_truncate_to(tmp_path):
    index = TimeIndex(tmp_path / "t.timeindex", 0, 120)
    for ts, offset in ((10, 1), (20, 5), (30, 9)):
        index.maybe_append(ts, offset)
    index.truncate_to(5)
    assert index.entries == 1 and index.last_entry == TimestampOffset(10, 1)


def test_entries_for_tools_stop_at_the_preallocated_zeros(tmp_path):
    from topiclake.segments.offset_index import OffsetIndex, OffsetPosition, dump_offset_index
    from topiclake.segments.time_index import dump_time_index
    offsets = OffsetIndex(tmp_path / "o.index", 10, 80)
    offsets.append(12, 300)
    offsets.flush()  # not closed: the file keeps its preallocated zeros after the entry
    times = TimeIndex(tmp_path / "t.timeindex", 10, 120)
    times.maybe_append(55, 12)
    times.flush()
    assert (tmp_path / "o.index").stat().st_size == 80 and (tmp_path / "t.timeindex").stat().st_size == 120
    assert list(dump_offset_index(tmp_path / "o.index", 10)) == [OffsetPosition(12, 300)]
    assert list(dump_time_index(tmp_path / "t.timeindex", 10)) == [TimestampOffset(55, 12)]
    offsets.close()
    times.close()


def test_reopen_after_a_crash_skips_the_preallocated_zeros(tmp_path):
    path = tmp_path / "00000000000000000050.timeindex"
    index = TimeIndex(path, 50, 12 * 1000)
    assert index.maybe_append(1000, 50)  # relative offset 0: the entry ends in zero bytes
    index.flush()
    index.close_handler()  # as a crash: the file stays preallocated
    reopened = TimeIndex(path, 50, 12 * 1000)
    assert reopened.entries == 1 and reopened.last_entry == TimestampOffset(1000, 50)
    assert not reopened.is_full()
