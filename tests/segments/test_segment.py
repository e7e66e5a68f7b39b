import os

import pytest

from topiclake.segments.batch import iter_batches, read_header
from topiclake.segments.config import LogConfig
from topiclake.segments.segment import LogSegment, RollParams

from tests.segments.segment_logs import make_batch


def append(segment, data):
    headers = [b.header for b in iter_batches(data)]
    return segment.append(data, headers)


def batches_at(base_offset, counts, **kwargs):
    out, offset = [], base_offset
    for count in counts:
        out.append(make_batch(count, base_offset=offset, **kwargs))
        offset += count
    return out


@pytest.mark.parametrize("snapshot", ["codecrafters-kafka-tester-510714e"])
def test_recover_rebuilds_kafkas_indexes_byte_for_byte(tmp_path, corpus_copy, snapshot):
    directory = corpus_copy(snapshot, "__cluster_metadata-0")
    expected_index = (directory / "00000000000000000000.index").read_bytes()
    expected_time = (directory / "00000000000000000000.timeindex").read_bytes()
    (directory / "00000000000000000000.index").unlink()
    (directory / "00000000000000000000.timeindex").unlink()
    segment = LogSegment(directory, 0, LogConfig())
    assert segment.recover() == 0
    assert segment.read_next_offset() == 129
    segment.close()
    assert (directory / "00000000000000000000.index").read_bytes() == expected_index
    assert (directory / "00000000000000000000.timeindex").read_bytes() == expected_time
    assert len(expected_index) == 16 and len(expected_time) == 36


def test_append_builds_the_same_index_as_recover(tmp_path):
    config = LogConfig(index_interval_bytes=300)
    live = LogSegment(tmp_path / "a", 0, config) if (tmp_path / "a").mkdir() is None else None
    for data in batches_at(0, [1, 3, 2, 5, 1, 4, 2, 2, 6, 1, 1, 3] * 3, value_size=40):
        append(live, data)
    live.close()
    (tmp_path / "b").mkdir()
    for name in os.listdir(tmp_path / "a"):
        if name.endswith(".log"):
            (tmp_path / "b" / name).write_bytes((tmp_path / "a" / name).read_bytes())
    rebuilt = LogSegment(tmp_path / "b", 0, config)
    rebuilt.recover()
    rebuilt.close()
    for suffix in (".index", ".timeindex"):
        name = "00000000000000000000" + suffix
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
        assert len((tmp_path / "a" / name).read_bytes()) > 12


def test_read_translate_and_timestamps(tmp_path):
    segment = LogSegment(tmp_path, 100, LogConfig(index_interval_bytes=100))
    datas = batches_at(100, [2] * 30, value_size=30)
    for i, data in enumerate(datas):
        data = make_batch(2, base_offset=100 + 2 * i, timestamp=10_000 + 10 * i, value_size=30)
        append(segment, data)
    assert segment.offset_index.entries > 3
    found = segment.translate_offset(131)
    assert (found.base_offset, found.last_offset) == (130, 131)
    assert segment.translate_offset(160) is None
    piece = segment.read(131, 1)  # min one message
    assert piece.first_offset == 130 and piece.next_offset == 132
    piece = segment.read(101, 10_000)
    assert piece.first_offset == 100 and piece.next_offset == 160 and piece.size == segment.size
    data = segment.log_path.read_bytes()[piece.position : piece.position + piece.size]
    whole = [read_header(data, b.position).base_offset for b in iter_batches(data)]
    assert whole == list(range(100, 160, 2))
    assert segment.read(100, 1, min_one_message=False) is None
    limited = segment.read(100, 10_000, max_position=found.position)
    assert limited.next_offset == 130
    assert segment.find_offset_by_timestamp(10_051).offset == 111  # batch 5 holds 10_050, 10_051
    assert segment.find_offset_by_timestamp(10_051, starting_offset=120).offset == 120
    assert segment.find_offset_by_timestamp(99_999) is None
    assert segment.max_timestamp_so_far.timestamp == 10_291 and segment.largest_timestamp() == 10_291


def test_should_roll(tmp_path):
    config = LogConfig(segment_bytes=1000, segment_ms=1000, segment_index_bytes=36, index_interval_bytes=0)
    segment = LogSegment(tmp_path, 0, config, created_ms=0)
    data = make_batch(1, timestamp=5000)
    assert not segment.should_roll(RollParams(5000, 0, len(data), now_ms=10**9))  # empty: never by time
    append(segment, data)
    assert not segment.should_roll(RollParams(5900, 1, 100, now_ms=0))
    assert segment.should_roll(RollParams(6001, 1, 100, now_ms=0))  # max incoming ts - first batch ts > segment.ms
    assert segment.should_roll(RollParams(5000, 1, 1000 - segment.size + 1, now_ms=0))  # size
    assert segment.should_roll(RollParams(5000, 2**31, 10, now_ms=0))  # relative offset overflow
    append(segment, make_batch(1, base_offset=1, timestamp=5001))
    append(segment, make_batch(1, base_offset=2, timestamp=5002))
    # time index: 3 slots, full at 2 (the last one is kept for the roll entry)
    assert segment.offset_index.entries == 2 and not segment.offset_index.is_full()
    assert segment.time_index.is_full()
    assert segment.should_roll(RollParams(5003, 3, 10, now_ms=0))  # index full


def test_should_roll_when_offset_index_full(tmp_path):
    segment = LogSegment(tmp_path, 0, LogConfig(segment_index_bytes=36, index_interval_bytes=0))
    for offset in range(5):  # same timestamp: only the offset index grows (4 slots)
        append(segment, make_batch(1, base_offset=offset, timestamp=5000))
    assert segment.offset_index.is_full() and not segment.time_index.is_full()
    assert segment.should_roll(RollParams(5000, 5, 10, now_ms=0))


def test_roll_by_time_without_timestamps_uses_creation_time(tmp_path):
    segment = LogSegment(tmp_path, 0, LogConfig(segment_ms=1000), created_ms=0)
    append(segment, make_batch(1, timestamp=-1))
    assert not segment.should_roll(RollParams(-1, 1, 10, now_ms=1000))
    assert segment.should_roll(RollParams(-1, 1, 10, now_ms=1001))


def test_recover_truncates_at_first_bad_batch(tmp_path):
    segment = LogSegment(tmp_path, 0, LogConfig(index_interval_bytes=50))
    datas = batches_at(0, [1] * 10)
    for data in datas:
        append(segment, data)
    good = sum(len(d) for d in datas[:6])
    with open(segment.log_path, "r+b") as f:
        f.seek(good + 30)
        f.write(b"\xff")
    reopened = LogSegment(tmp_path, 0, LogConfig(index_interval_bytes=50))
    assert reopened.recover() == sum(len(d) for d in datas[6:])
    assert reopened.size == good and reopened.read_next_offset() == 6
    assert os.path.getsize(reopened.log_path) == good
    assert all(reopened.offset_index.entry(i).position < good for i in range(reopened.offset_index.entries))
