"""What recovering a killed log writes to its index files (issue 33: an unclean start of 2,000
partitions in <= 5 s). Rebuilding an index used to cut its preallocated file to zero bytes and
back, which frees its blocks (a journal commit each, a discard on a `discard` mount): now the
file is written only where the rebuilt entries differ, and whatever the old file held past them
(entries of a cut tail, stale bytes past a hole) is still gone, also after the next kill."""

from __future__ import annotations

import os
import time

from topiclake.segments import filenames as fn
from topiclake.segments.config import LogConfig
from topiclake.segments.log import Log
from topiclake.segments.offset_index import OffsetIndex

from tests.segments.segment_logs import make_batch, read_all

CONFIG = LogConfig(index_interval_bytes=100)  # an offset index entry every two batches or so
INDEX_BYTES = CONFIG.segment_index_bytes


def _killed_log(directory, batches: int, *, flush: bool = True) -> list[bytes]:
    """`batches` one-record batches of one timestamp (so the time index needs no final entry),
    left as a kill -9 leaves them: no trimmed index, no clean-shutdown marker."""
    log = Log.open(directory, CONFIG)
    for _ in range(batches):
        log.append(make_batch(1, timestamp=5_000, value_size=60))
    if flush:
        log.flush()
    stored = read_all(log)
    log.close_handlers()
    return stored


def _index_files(directory) -> list:
    return [fn.index_file(directory, 0), fn.time_index_file(directory, 0)]


def _entries_on_disk(directory) -> list:
    index = OffsetIndex(fn.index_file(directory, 0), 0, INDEX_BYTES, writable=False)
    try:
        return [index.entry(n) for n in range(index.entries)]
    finally:
        index.close_handler()


def test_recovering_a_killed_log_leaves_index_files_that_hold_the_rebuilt_entries_untouched(tmp_path):
    directory = tmp_path / "t-0"
    stored = _killed_log(directory, 30)
    before = {path.name: (path.stat().st_mtime_ns, path.stat().st_size, path.read_bytes()) for path in
              _index_files(directory)}
    assert _entries_on_disk(directory), "the log has offset index entries to rebuild"
    time.sleep(0.05)  # a write or truncation now would move the files' mtime
    log = Log.open(directory, CONFIG)
    assert log.load_result.recovered == (0,) and not log.load_result.had_clean_shutdown
    assert read_all(log) == stored
    log.close_handlers()  # killed again
    after = {path.name: (path.stat().st_mtime_ns, path.stat().st_size, path.read_bytes()) for path in
             _index_files(directory)}
    assert after == before, "the recovery truncated or rewrote index files that already held its entries"


def test_entries_a_kill_kept_in_memory_are_written_by_the_recovery(tmp_path):
    directory = tmp_path / "t-0"
    _killed_log(directory, 30, flush=False)  # the entries were never written: the file is all zeros
    assert _entries_on_disk(directory) == []
    log = Log.open(directory, CONFIG)
    rebuilt = [log.active_segment.offset_index.entry(n) for n in range(log.active_segment.offset_index.entries)]
    log.close_handlers()
    assert rebuilt and _entries_on_disk(directory) == rebuilt


def test_a_recovery_that_cuts_the_log_leaves_no_index_entry_past_the_cut_after_the_next_kill(tmp_path):
    directory = tmp_path / "t-0"
    _killed_log(directory, 30)
    entries = _entries_on_disk(directory)
    cut = entries[len(entries) // 2].position  # a damaged batch there: it and every later one go
    with open(fn.log_file(directory, 0), "r+b") as f:
        os.pwrite(f.fileno(), b"\xff", cut + 80)  # a record's byte: its CRC fails (the index stays sane)
    log = Log.open(directory, CONFIG)
    assert log.load_result.truncated_bytes > 0 and os.path.getsize(fn.log_file(directory, 0)) == cut
    log.close_handlers()  # killed right after the start: nothing trimmed or flushed
    kept = _entries_on_disk(directory)
    assert kept == entries[:len(kept)] and all(entry.position < cut for entry in kept)
    with open(fn.index_file(directory, 0), "rb") as f:
        past_the_cut = os.pread(f.fileno(), 8 * len(entries), 0)[8 * len(kept):]
    assert past_the_cut == bytes(8 * (len(entries) - len(kept))), "the old entries past the cut are zeros now"


def test_stale_bytes_far_past_the_entries_are_cleared_by_the_recovery(tmp_path):
    """An index file holding data past a hole (not what a running broker writes: stale bytes of
    an older file, a disk's damage) gets the reset recovery always gave it: zeros after the entries."""
    directory = tmp_path / "t-0"
    _killed_log(directory, 30)
    entries = _entries_on_disk(directory)
    stale_at = INDEX_BYTES // 2
    with open(fn.index_file(directory, 0), "r+b") as f:
        os.pwrite(f.fileno(), b"\x7f" * 64, stale_at)
    log = Log.open(directory, CONFIG)
    assert log.active_segment.offset_index.entries == len(entries)
    log.close_handlers()
    with open(fn.index_file(directory, 0), "rb") as f:
        assert os.pread(f.fileno(), 64, stale_at) == bytes(64)
    assert _entries_on_disk(directory) == entries
