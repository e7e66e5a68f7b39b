import os
import threading

import pytest

from topiclake.segments import filenames as fn
from topiclake.segments.batch import Record, TimestampType, build_batch, iter_batches, read_header
from topiclake.segments.config import LogConfig
from topiclake.segments.errors import (CorruptRecordError, LogClosedError, OffsetOutOfRangeError, RecordTooLargeError,
                                       TopiclakeError)
from topiclake.segments.log import Log
from topiclake.segments.read_constants import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from topiclake.segments.time_index import TimestampOffset

from tests.segments.segment_logs import make_batch, read_all


@pytest.fixture
def open_log(tmp_path):
    logs = []

    def opener(config=LogConfig(), name="t-0"):
        log = Log.open(tmp_path / name, config)
        logs.append(log)
        return log
    yield opener
    for log in logs:
        log.close()


def test_append_assigns_offsets_and_reads_back(open_log):
    log = open_log()
    first = log.append(make_batch(3, base_offset=77) + make_batch(2, base_offset=5), now_ms=1)
    assert (first.first_offset, first.last_offset, first.record_count) == (0, 4, 5)
    assert first.log_append_time == -1 and first.position == 0 and first.max_timestamp == 1002
    second = log.append(make_batch(1))
    assert second.first_offset == 5 and log.log_end_offset == log.high_watermark == 6
    result = log.read(0, 1 << 20)
    headers = [b.header for b in iter_batches(result.to_bytes())]
    assert [(h.base_offset, h.last_offset) for h in headers] == [(0, 2), (3, 4), (5, 5)]
    assert result.file.fileno() >= 0 and result.path.name == "00000000000000000000.log"
    assert [r.offset for b in iter_batches(log.read(4, 1).to_bytes()) for r in b.records()] == [3, 4]
    assert log.read(6, 100).size == 0
    with pytest.raises(OffsetOutOfRangeError, match="log end offset 6"):
        log.read(7, 100)
    assert log.read(0, 1 << 20, max_offset=3).next_offset == 3


def test_rejects_bad_input_and_writes_nothing(open_log):
    log = open_log(LogConfig(max_message_bytes=500))
    log.append(make_batch(1))
    size = log.active_segment.size
    good = make_batch(1)
    bad_crc = bytearray(make_batch(1))
    bad_crc[-1] ^= 1
    cases = [
        (good + bytes(bad_crc), CorruptRecordError, "CRC"),
        (good + good[:30], CorruptRecordError, "truncated"),
        (make_batch(1, value_size=600), RecordTooLargeError, "max.message.bytes 500"),
        (b"", CorruptRecordError, "empty"),
    ]
    for data, error, message in cases:
        with pytest.raises(error, match=message):
            log.append(data)
    assert log.active_segment.size == size and log.log_end_offset == 1


def test_log_append_time(open_log):
    log = open_log(LogConfig(message_timestamp_type="LogAppendTime"))
    result = log.append(make_batch(2, timestamp=5), now_ms=123_456)
    assert result.log_append_time == 123_456 and result.max_timestamp == 123_456
    batch = next(iter_batches(log.read(0, 1000).to_bytes()))  # validates the recomputed CRC
    assert batch.header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in batch.records()] == [123_456, 123_456]


def test_leader_epoch_is_stamped(open_log):
    log = open_log()
    log.append(make_batch(1), leader_epoch=7)
    assert read_header(log.read(0, 100).to_bytes()).partition_leader_epoch == 7


def test_roll_on_segment_bytes_and_read_across_segments(open_log):
    log = open_log(LogConfig(segment_bytes=500, index_interval_bytes=100))
    for i in range(40):
        log.append(make_batch(2, timestamp=1000 + 10 * i))
    infos = log.segments()
    assert len(infos) > 5 and all(info.size <= 500 for info in infos)
    assert [i.base_offset for i in infos[1:]] == [i.next_offset for i in infos[:-1]]
    # closed segments' indexes are trimmed to their entries
    first = infos[0]
    assert fn.index_file(log.directory, first.base_offset).stat().st_size % 8 == 0
    assert fn.index_file(log.directory, first.base_offset).stat().st_size < 1000
    offsets = [h.base_offset for b in read_all(log) for h in [read_header(b)]]
    assert offsets == list(range(0, 80, 2))
    result = log.read(infos[1].base_offset - 1, 10_000)  # starts in the first, stops at its end
    assert result.first_offset == infos[1].base_offset - 2 and result.next_offset == infos[1].base_offset


def test_roll_on_segment_ms_and_index_full(open_log):
    log = open_log(LogConfig(segment_ms=100))
    log.append(make_batch(1, timestamp=1000))
    log.append(make_batch(1, timestamp=1100))
    log.append(make_batch(1, timestamp=1101))
    assert [s.base_offset for s in log.segments()] == [0, 2]
    log2 = open_log(LogConfig(segment_index_bytes=24, index_interval_bytes=0), name="u-0")
    for i in range(10):
        log2.append(make_batch(1, timestamp=1000))
    assert len(log2.segments()) > 2


def test_offset_for_timestamp(open_log):
    log = open_log(LogConfig(segment_bytes=400))
    for i in range(30):
        log.append(make_batch(2, timestamp=10_000 + 100 * i))  # offsets 2i, 2i+1 at ts, ts+1
    assert log.offset_for_timestamp(10_000).offset == 0
    assert log.offset_for_timestamp(10_001).offset == 1
    assert log.offset_for_timestamp(10_002).offset == 2
    assert log.offset_for_timestamp(12_050).offset == 42
    assert log.offset_for_timestamp(99_999) is None
    assert log.offset_for_timestamp(LATEST_TIMESTAMP).offset == 60
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP).offset == 0
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == TimestampOffset(12_901, 59)


def _timed_batch(*timestamps: int) -> bytes:
    return build_batch([Record(i, ts, None, b"v" * 20) for i, ts in enumerate(timestamps)])


def test_max_timestamp_is_the_exact_record_not_its_batch_end(tmp_path):
    # KIP-734 as Kafka 3.8+ answers it: the first record with the largest timestamp, even inside
    # a batch, and the first segment that holds it; also after a reopen (from the time index).
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200))
    log.append(_timed_batch(100, 400, 200))  # offsets 0-2
    log.append(_timed_batch(150, 400))  # 3-4: a tie, later
    assert len(log.segments()) == 2
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == TimestampOffset(400, 1)
    log.close()
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200))
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == TimestampOffset(400, 1)
    log.append(_timed_batch(500, 499))  # 5-6
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == TimestampOffset(500, 5)
    log.close()


def test_close_and_reopen_is_clean(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=400))
    for _ in range(20):
        log.append(make_batch(2))
    stored = read_all(log)
    log.close()
    assert (tmp_path / "t-0" / fn.CLEAN_SHUTDOWN_FILE).exists()
    assert (tmp_path / "t-0" / "recovery-point-offset-checkpoint").read_text() == "0\n1\nt 0 40\n"
    reopened = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=400))
    assert reopened.load_result.had_clean_shutdown and reopened.load_result.recovered == ()
    assert not (tmp_path / "t-0" / fn.CLEAN_SHUTDOWN_FILE).exists()
    assert read_all(reopened) == stored and reopened.log_end_offset == 40
    reopened.close()


def test_flush_policy(open_log, monkeypatch):
    flushed = []
    log = open_log(LogConfig(flush_messages=3))
    monkeypatch.setattr(type(log.active_segment), "flush", lambda self, indexes=True: flushed.append(self.base_offset))
    log.append(make_batch(2))
    assert flushed == []
    log.append(make_batch(1))
    assert flushed == [0] and log.recovery_point == 3
    timed = open_log(LogConfig(flush_ms=50), name="u-0")
    timed.append(make_batch(1), now_ms=timed._last_flush_ms + 10)
    assert len(flushed) == 1
    timed.append(make_batch(1), now_ms=timed._last_flush_ms + 60)
    assert len(flushed) == 2


def test_append_without_assigning_offsets(open_log):
    log = open_log()
    log.append(make_batch(2, base_offset=0), assign_offsets=False)
    log.append(make_batch(1, base_offset=10), assign_offsets=False)  # gaps are allowed
    assert log.log_end_offset == 11
    with pytest.raises(CorruptRecordError, match="below the next offset 11"):
        log.append(make_batch(1, base_offset=5), assign_offsets=False)


def test_readers_in_other_threads_see_whole_batches(open_log):
    log = open_log(LogConfig(segment_bytes=2000, index_interval_bytes=200))
    stop = threading.Event()
    problems = []

    def reader():
        while not stop.is_set():
            end = log.log_end_offset
            offset = 0
            try:
                while offset < end:
                    result = log.read(offset, 700)
                    for batch in iter_batches(result.to_bytes()):
                        batch.ensure_valid()
                    offset = result.next_offset
            except Exception as exc:  # pragma: no cover - reported below
                problems.append(exc)
                return

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for i in range(300):
        log.append(make_batch(1 + i % 3, value_size=30))
    stop.set()
    for t in threads:
        t.join()
    assert problems == []


def test_advance_log_start_offset(open_log):
    log = open_log()
    log.append(make_batch(5))
    log.advance_log_start_offset(3)
    assert log.log_start_offset == 3
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.advance_log_start_offset(6)


def test_a_read_never_returns_bytes_appended_after_it_took_the_log_end(open_log, monkeypatch):
    """The soak caught a read_committed consumer reading a transaction's first batch before the
    transaction was decided: a read bounded by the log end offset it started from returned a batch
    appended while it ran (the segment's file had grown), past that bound."""
    from topiclake.segments.segment import LogSegment

    log = open_log()
    log.append(make_batch(3))  # offsets 0-2
    real_read = LogSegment.read

    def read_racing_an_append(segment, *args, **kwargs):
        monkeypatch.setattr(LogSegment, "read", real_read)
        log.append(make_batch(2))  # 3-4 land between the read's snapshot and its segment read
        return real_read(segment, *args, **kwargs)

    monkeypatch.setattr(LogSegment, "read", read_racing_an_append)
    result = log.read(0, 1 << 20, max_offset=3)  # e.g. read_committed: up to the LSO, 3
    assert (result.first_offset, result.next_offset) == (0, 3)
    assert log.read(0, 1 << 20).next_offset == 5


def test_a_closed_log_refuses_writes_with_its_own_error(open_log):
    """A closed log is not bad bytes: LogClosedError, never CorruptRecordError."""
    log = open_log()
    log.append(make_batch(1))
    log.close()
    for write in (lambda: log.append(make_batch(1)), log.roll, log.flush, log.refresh):
        with pytest.raises(LogClosedError, match="is closed") as raised:
            write()
        assert not isinstance(raised.value, CorruptRecordError) and isinstance(raised.value, TopiclakeError)


def _open_files_under(directory) -> list[str]:
    names = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed while listing
        if target.startswith(str(directory)):
            names.append(os.path.basename(target))
    return sorted(names)


def test_an_open_log_holds_a_descriptor_per_segment_file_not_per_index(tmp_path):
    """Indexes live in memory and open their files only to write, trim or fsync (as Kafka's are
    mapped and their files closed): 10,000 partitions must fit a 20,000-descriptor limit."""
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=500, index_interval_bytes=100))
    try:
        for i in range(20):
            log.append(make_batch(2, timestamp=1000 + i))
        log.flush()
        segments = log.segments()
        assert len(segments) > 2
        assert _open_files_under(tmp_path) == sorted(fn.log_file(log.directory, s.base_offset).name for s in segments)
        # the indexes still answer, and their files hold every entry
        assert log.offset_for_timestamp(1010) is not None
        assert all(fn.index_file(log.directory, s.base_offset).stat().st_size > 0 for s in segments[:-1])
    finally:
        log.close()
    reopened = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=500, index_interval_bytes=100))
    try:
        assert read_all(reopened) and reopened.log_end_offset == 40
        assert not [name for name in _open_files_under(tmp_path) if not name.endswith(".log")]
    finally:
        reopened.close()
    assert _open_files_under(tmp_path) == []
