"""The Log in cluster mode (many brokers on one root): a takeover continues in a segment the new
leader created exclusively, a fenced leader's late bytes (in its old active segment, or in a
segment file it created after the takeover) are never part of the log a later leader loads, and
a new partition still starts at offset 0."""

from __future__ import annotations

from pathlib import Path

from topiclake.segments import filenames
from topiclake.segments.batch import Record, build_batch, iter_batches
from topiclake.segments.config import LogConfig
from topiclake.segments.leader_fence import PartitionFence
from topiclake.segments.log import Log

CONFIG = LogConfig(segment_bytes=1 << 20)


def batch(*values: bytes) -> bytes:
    return build_batch([Record(i, 1_700_000_000_000, None, v) for i, v in enumerate(values)])


def lead(directory: Path, epoch: int) -> Log:
    """A takeover as the broker runs it: claim, load with the history, record the start, roll."""
    fence = PartitionFence(directory)
    history = fence.begin_takeover(epoch)
    log = Log.open(directory, CONFIG, topic="t", partition=0, epochs=history, create_segment=fence.create_segment)
    log.epochs = fence.record_start(epoch, log.log_end_offset)
    log.take_over()
    return log


def values(log: Log) -> list[tuple[int, bytes]]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        result = log.read(offset, 1 << 20)
        for b in iter_batches(result.to_bytes()):
            out += [(r.offset, r.value) for r in b.records()]
        offset = result.next_offset
    return out


def test_a_new_partition_starts_at_offset_zero_in_a_segment_its_leader_created(tmp_path):
    log = lead(tmp_path / "t-0", 0)
    assert log.log_end_offset == 0 and log.active_segment.base_offset == 0
    log.append(batch(b"a", b"b"), leader_epoch=0)
    assert values(log) == [(0, b"a"), (1, b"b")]
    log.close()
    assert not (tmp_path / "t-0" / filenames.CLEAN_SHUTDOWN_FILE).exists()  # proves nothing in cluster mode


def test_a_fenced_leaders_late_bytes_never_load(tmp_path):
    directory = tmp_path / "t-0"
    a = lead(directory, 1)
    a.append(batch(b"a0", b"a1"), leader_epoch=1)
    a.flush()

    b = lead(directory, 2)  # A is paused, not dead: its Log is still open
    a.append(batch(b"late"), leader_epoch=1)  # A wakes: offset 2, in its old segment
    a.flush()
    b.append(batch(b"b2"), leader_epoch=2)
    b.flush()
    assert b.active_segment.base_offset == 2  # B never appends to A's file: its first append made its own
    assert values(b) == [(0, b"a0"), (1, b"a1"), (2, b"b2")]

    c = lead(directory, 3)  # B dies; C loads what A and B left
    assert values(c) == [(0, b"a0"), (1, b"a1"), (2, b"b2")]
    assert c.log_end_offset == 3
    a.close_handlers()
    b.close_handlers()
    c.close()


def test_a_segment_a_fenced_leader_created_after_the_takeover_is_skipped_and_left_alone(tmp_path):
    directory = tmp_path / "t-0"
    a = lead(directory, 1)
    a.append(batch(b"a0"), leader_epoch=1)
    b = lead(directory, 2)  # B starts at 1, and creates its first segment at its first append
    a.roll()  # A wakes and rolls: at its end, 1, before B wrote anything
    a.append(batch(b"late"), leader_epoch=1)
    squatter = filenames.log_file(directory, 1)
    assert squatter.stat().st_size > 0

    b.append(batch(b"b1"), leader_epoch=2)  # its segment cannot be 1: it is A's
    b.roll()
    b.append(batch(b"b2"), leader_epoch=2)
    assert values(b) == [(0, b"a0"), (2, b"b1"), (3, b"b2")]  # a gap where A's file is

    c = lead(directory, 3)
    assert values(c) == [(0, b"a0"), (2, b"b1"), (3, b"b2")]
    assert squatter.exists() and squatter.stat().st_size > 0  # untouched
    for log in (a, b):
        log.close_handlers()
    c.close()


def test_an_idle_partition_changes_leaders_without_growing(tmp_path):
    directory = tmp_path / "t-0"
    a = lead(directory, 1)
    a.append(batch(b"a0"), leader_epoch=1)
    a.roll()  # an empty active segment, as after a roll
    a.close_handlers()
    for epoch in (2, 3, 4):  # leaders come and go; nobody writes
        log = lead(directory, epoch)
        assert (log.log_start_offset, log.log_end_offset) == (0, 1)
        log.close_handlers()
    last = lead(directory, 5)
    last.append(batch(b"b"), leader_epoch=5)
    assert values(last) == [(0, b"a0"), (2, b"b")]  # the idle leader's empty file is never written again
    last.close()
