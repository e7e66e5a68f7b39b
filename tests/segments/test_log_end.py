"""segments.log_end: a partition's log end and the timestamp at an offset, read from its files by
a process that does not have it open, as the readers' rule of leader epochs says."""

from __future__ import annotations

import os

from topiclake.segments import filenames
from topiclake.segments.log import Log
from topiclake.segments.log_end import LogEnds, timestamp_at

from tests.support.fenced_partition import BASE_TS, CONFIG, batch, build


def test_a_single_brokers_log_is_followed_as_it_grows_and_rolls(tmp_path):
    directory = tmp_path / "t-0"
    ends = LogEnds()
    assert ends.end_offset(directory) == 0  # never written: no directory yet
    log = Log.open(directory, CONFIG, topic="t", partition=0)
    try:
        assert ends.end_offset(directory) == 0
        log.append(batch(BASE_TS, (b"k", b"v0"), (b"k", b"v1")))
        log.flush()
        assert ends.end_offset(directory) == 2
        tail = ends._tails[directory]
        read_once = tail.position
        log.append(batch(BASE_TS + 5000, (b"k", b"v2")))
        log.flush()
        assert ends.end_offset(directory) == 3 and ends._tails[directory].position > read_once  # only the new bytes
        log.roll()
        assert ends.end_offset(directory) == 3  # the new, empty active segment starts at the end
        log.append(batch(BASE_TS + 9000, (b"k", b"v3"), (b"k", b"v4")))
        log.flush()
        assert ends.end_offset(directory) == log.log_end_offset == 5
        assert timestamp_at(directory, 1) == BASE_TS + 1000
        assert timestamp_at(directory, 4) == BASE_TS + 10_000
        assert timestamp_at(directory, 5) is None  # nothing there yet
    finally:
        log.close()


def test_a_fenced_leaders_late_batches_and_files_are_not_the_end(tmp_path):
    """The end is the current leader's (14 + 1 = 15), not the late write at 15 in a file named
    last by the fenced leader, nor the late batch at 10 in the old segment."""
    partition = build(tmp_path / "p-0")
    try:
        ends = LogEnds()
        assert ends.end_offset(partition.directory) == partition.leader.log_end_offset == 15
        # a late batch of the fenced leader lands in its squatter file: still not part of the log
        partition.fenced.append(batch(BASE_TS + 90_000, (b"k9", b"late")), leader_epoch=1)
        partition.fenced.flush()
        assert ends.end_offset(partition.directory) == 15
        assert timestamp_at(partition.directory, 10) == BASE_TS + 10_000  # b10, not the late k1 at 10
        assert timestamp_at(partition.directory, 11) == BASE_TS + 12_000  # 11 is a gap: the next record, b12
        partition.leader.append(batch(BASE_TS + 20_000, (b"k", b"b15")), leader_epoch=2)
        partition.leader.flush()
        assert ends.end_offset(partition.directory) == 16
    finally:
        partition.close()


def test_a_segment_swapped_away_meanwhile_is_read_again(tmp_path):
    directory = tmp_path / "t-0"
    log = Log.open(directory, CONFIG, topic="t", partition=0)
    log.append(batch(BASE_TS, (b"k", b"v0")))
    log.flush()
    log.close()
    ends = LogEnds()
    assert ends.end_offset(directory) == 1
    path = filenames.log_file(directory, 0)
    copy = path.with_name("copy")
    copy.write_bytes(path.read_bytes())
    os.replace(copy, path)  # another inode with the same bytes (as a compaction swap leaves it)
    assert ends.end_offset(directory) == 1 and ends._tails[directory].inode == path.stat().st_ino
