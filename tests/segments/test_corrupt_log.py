"""A damaged log is damage to every reader, never a silent end (issue 31): a bad length inside
the active segment is told apart from an append in progress, the broker's read at the damage
raises (CORRUPT_MESSAGE on the wire) instead of skipping to the next segment, and the repair
truncates there as Kafka's recovery does."""

from __future__ import annotations

import mmap
import struct

import pytest

from topiclake.segments.config import LogConfig
from topiclake.segments.filenames import CLEAN_SHUTDOWN_FILE
from topiclake.segments.errors import CorruptRecordError
from topiclake.segments.leader_reads import log_batches
from topiclake.segments.log import Log
from topiclake.segments.repair import truncate_at

from tests.segments.segment_logs import make_batch

ONE_SEGMENT = LogConfig(index_interval_bytes=1)  # an index entry for every batch
SMALL_SEGMENTS = LogConfig(segment_bytes=1500, index_interval_bytes=1)


def write_log(directory, config: LogConfig, batches: int, per_batch: int = 5) -> list[tuple[str, int, int]]:
    """Append and close cleanly; returns (file, position, base offset) of every batch."""
    log = Log.open(directory, config, topic="t", partition=0)
    for i in range(batches):
        log.append(make_batch(per_batch, timestamp=1_000 + i, value_size=30))
    log.close()
    return batch_places(directory)


def batch_places(directory) -> list[tuple[str, int, int]]:
    out = []
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        pos = 0
        while pos + 12 <= len(data):
            out.append((str(path), pos, struct.unpack_from(">q", data, pos)[0]))
            pos += struct.unpack_from(">i", data, pos + 8)[0] + 12
    return out


def set_length(path: str, position: int, length: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position + 8)
        f.write(struct.pack(">i", length))


def walk(path: str) -> list[int]:
    with open(path, "rb") as f:
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return [b.base_offset for b in log_batches(buf, None, source=path, last=True)]


@pytest.mark.parametrize("length", [0x7FFFFFFF, 100_000])
def test_a_damaged_length_in_the_active_segment_is_damage(tmp_path, length):
    places = write_log(tmp_path / "t-0", ONE_SEGMENT, 10)
    path, position, _base = places[4]
    set_length(path, position, length)
    with pytest.raises(CorruptRecordError) as caught:
        walk(path)
    assert caught.value.source == path and caught.value.position == position
    assert "runs past the end" in caught.value.reason


def test_an_append_in_progress_is_still_a_tail_unless_the_partition_shut_down_cleanly(tmp_path):
    places = write_log(tmp_path / "t-0", ONE_SEGMENT, 10)
    path = places[0][0]
    (tmp_path / "t-0" / CLEAN_SHUTDOWN_FILE).unlink()  # a broker that runs: the marker goes when it loads
    with open(path, "ab") as f:  # half of the next batch, not indexed yet: a broker mid-append
        f.write(make_batch(5, base_offset=50)[:40])
    assert walk(path) == [p[2] for p in places]
    (tmp_path / "t-0" / CLEAN_SHUTDOWN_FILE).write_text("{}")  # shut down cleanly: no append is in progress
    with pytest.raises(CorruptRecordError, match="shut down cleanly"):
        walk(path)


def test_the_broker_read_at_the_damage_raises_instead_of_skipping_to_the_next_segment(tmp_path):
    directory = tmp_path / "t-0"
    log = Log.open(directory, SMALL_SEGMENTS, topic="t", partition=0)
    for i in range(20):
        log.append(make_batch(5, timestamp=1_000 + i, value_size=30))
    log.flush()
    places = batch_places(directory)
    middle = sorted({p[0] for p in places})[1]
    path, position, base = [p for p in places if p[0] == middle][1]
    with open(path, "r+b") as f:  # cut short in its middle, later segments whole
        f.truncate(position + 30)
    try:
        before = log.read(base - 5, 1 << 20)
        assert before.first_offset == base - 5 and before.next_offset == base  # whole batches up to the damage
        with pytest.raises(CorruptRecordError) as caught:
            log.read(base, 1 << 20)
        assert caught.value.source == path and caught.value.position == position
    finally:
        log.close_handlers()


def test_repair_truncates_at_the_damage_as_kafkas_recovery_and_appends_continue_there(tmp_path):
    directory = tmp_path / "t-0"
    places = write_log(directory, SMALL_SEGMENTS, 20)
    files = sorted({p[0] for p in places})
    path, position, base = [p for p in places if p[0] == files[1]][1]
    set_length(path, position, 0x7FFFFFFF)

    done = truncate_at(directory, SMALL_SEGMENTS, topic="t", partition=0,
                       segment_base=[p for p in places if p[0] == files[1]][0][2])
    assert done.log_end == base and done.deleted_segments
    assert sorted(str(p) for p in directory.glob("*.log")) == files[:2]
    log = Log.open(directory, SMALL_SEGMENTS, topic="t", partition=0)
    try:
        assert log.log_end_offset == base
        assert log.append(make_batch(3)).first_offset == base  # the lost offsets are reused, as in Kafka
    finally:
        log.close()
