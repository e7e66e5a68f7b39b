import os

import pytest

from topiclake.segments import filenames as fn
from topiclake.segments import maintenance
from topiclake.segments.batch import NO_TIMESTAMP, iter_batches, read_header
from topiclake.segments.errors import CorruptRecordError, OffsetOutOfRangeError, TopiclakeError
from topiclake.segments.log import Log
from topiclake.segments.maintenance import MaintenanceError, delete_segments, replace_segments

from tests.segments.segment_logs import read_all, make_batch, CONFIG, record_offsets, write_dropping


def offsets(log):
    return [read_header(b).base_offset for b in read_all(log)]


def build_log(directory, batches=30):
    log = Log.open(directory, CONFIG)
    for i in range(batches):
        log.append(make_batch(2, timestamp=1000 + i))
    return log


def write_cleaned(directory, old_bases, keep_every=2):
    """A 'compacted' copy of segments old_bases: every other batch plus each segment's last."""
    log_files = [fn.log_file(directory, b) for b in old_bases]
    kept = []
    for path in log_files:
        batches = [bytes(b.data) for b in iter_batches(path.read_bytes())]
        kept += [b for i, b in enumerate(batches) if i % keep_every == 0 or i == len(batches) - 1]
    target = fn.log_file(directory, old_bases[0], fn.CLEANED_SUFFIX)
    target.write_bytes(b"".join(kept))
    return target, [read_header(b).base_offset for b in kept]


def test_replace_segments_and_refresh(tmp_path):
    directory = tmp_path / "t-0"
    log = build_log(directory)
    bases = [s.base_offset for s in log.segments()]
    before = offsets(log)
    in_flight = log.read(bases[1], 10_000)  # a read that started before the swap
    cleaned, kept = write_cleaned(directory, bases[:3])
    assert replace_segments(directory, bases[:3], [cleaned], CONFIG) == [bases[0]]
    names = os.listdir(directory)
    assert not [n for n in names if n.endswith((".swap", ".cleaned"))]
    assert fn.index_file(directory, bases[0]).exists() and fn.time_index_file(directory, bases[0]).exists()
    assert offsets(log) == before  # not refreshed yet: still the old view, and it still reads
    assert log.refresh()
    assert offsets(log) == kept + [o for o in before if o >= bases[3]]
    assert [s.base_offset for s in log.segments()] == [bases[0]] + bases[3:]
    assert in_flight.to_bytes() and next(iter_batches(in_flight.to_bytes())).is_valid()
    log.append(make_batch(1))
    log.close()
    maintenance.purge_deleted(directory)
    reopened = Log.open(directory, CONFIG)
    assert offsets(reopened)[: len(kept)] == kept
    assert reopened.load_result.recovered == ()  # indexes written by replace_segments are fine
    reopened.close()


def test_replace_refuses_bad_requests(tmp_path):
    directory = tmp_path / "t-0"
    log = build_log(directory)
    bases = [s.base_offset for s in log.segments()]
    cleaned, _ = write_cleaned(directory, [bases[-1]])
    with pytest.raises(MaintenanceError, match="active segment"):
        replace_segments(directory, [bases[-1]], [cleaned], CONFIG)
    cleaned.unlink()
    cleaned, _ = write_cleaned(directory, bases[:3])
    with pytest.raises(MaintenanceError, match="first cleaned segment"):
        replace_segments(directory, bases[1:3], [cleaned], CONFIG)
    with pytest.raises(MaintenanceError, match="contiguous"):
        replace_segments(directory, [bases[0], bases[2]], [cleaned], CONFIG)
    blob = bytearray(cleaned.read_bytes())
    blob[-3] ^= 1
    cleaned.write_bytes(bytes(blob))
    with pytest.raises(MaintenanceError, match="not valid batches"):
        replace_segments(directory, bases[:3], [cleaned], CONFIG)
    assert offsets(log) == list(range(0, 60, 2))
    log.close()


@pytest.mark.parametrize("crash_after", range(0, 14))
def test_crash_at_every_rename_is_repaired(tmp_path, monkeypatch, crash_after):
    directory = tmp_path / "t-0"
    log = build_log(directory)
    bases = [s.base_offset for s in log.segments()]
    before = offsets(log)
    log.close()
    cleaned, kept = write_cleaned(directory, bases[:2])
    new_view = kept + [o for o in before if o >= bases[2]]
    calls = []
    real_rename = os.rename

    def crashing_rename(src, dst):
        if len(calls) == crash_after:
            raise SystemExit("crash")
        calls.append((src, dst))
        real_rename(src, dst)

    monkeypatch.setattr(maintenance.os, "rename", crashing_rename)
    try:
        replace_segments(directory, bases[:2], [cleaned], CONFIG)
        finished = True
    except SystemExit:
        finished = False
    monkeypatch.setattr(maintenance.os, "rename", real_rename)
    reopened = Log.open(directory, CONFIG)
    got = offsets(reopened)
    assert got in (before, new_view)
    if finished:
        assert got == new_view
    assert not [n for n in os.listdir(directory) if n.endswith((".swap", ".cleaned", ".deleted"))]
    reopened.close()


def test_delete_segments_moves_log_start(tmp_path):
    directory = tmp_path / "t-0"
    log = build_log(directory)
    bases = [s.base_offset for s in log.segments()]
    with pytest.raises(MaintenanceError, match="prefix"):
        delete_segments(directory, [bases[1]], bases[2])
    with pytest.raises(MaintenanceError, match="active"):
        delete_segments(directory, bases, bases[-1])
    with pytest.raises(MaintenanceError, match="point into deleted"):
        delete_segments(directory, bases[:2], bases[2] - 1)
    assert delete_segments(directory, bases[:2], bases[2]) == bases[2]
    assert fn.log_file(directory, bases[0], fn.DELETED_SUFFIX).exists()
    assert log.refresh()
    assert log.log_start_offset == bases[2] and offsets(log)[0] == bases[2]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    log.roll()  # writing checkpoints must not move the start back
    log.close()
    assert (directory / "log-start-offset-checkpoint").read_text() == f"0\n1\nt 0 {bases[2]}\n"
    assert maintenance.purge_deleted(directory, min_age_ms=60_000) == 0
    assert maintenance.purge_deleted(directory) > 0
    reopened = Log.open(directory, CONFIG)
    assert reopened.log_start_offset == bases[2]
    reopened.close()


def test_refresh_waits_for_a_job_holding_the_lock(tmp_path):
    from topiclake.segments.loader import partition_lock
    directory = tmp_path / "t-0"
    log = build_log(directory, batches=10)
    import subprocess, sys, time
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl,sys,time; f=open(sys.argv[1],'a+b'); fcntl.flock(f, fcntl.LOCK_EX); "
        "print('locked', flush=True); time.sleep(30)"), str(directory / ".topiclake.lock")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert log.refresh() is False
    finally:
        holder.kill()
        holder.wait()
    assert log.refresh() is True
    log.close()


def test_cleaner_offset_checkpoint(tmp_path):
    directory = tmp_path / "t-3"
    directory.mkdir()
    assert maintenance.read_cleaner_offset(directory) is None
    maintenance.write_cleaner_offset(directory, 42)
    assert (directory / "cleaner-offset-checkpoint").read_text() == "0\n1\nt 3 42\n"
    assert maintenance.read_cleaner_offset(directory) == 42


# --- cleaner output that ends below the last old segment (a segment or a whole group emptied)


SCENARIOS = {
    "last-segment-emptied": lambda bases: (bases[:3], {bases[2]}),
    "group-emptied": lambda bases: (bases[:3], set(bases[:3])),
    "middle-and-last-emptied": lambda bases: (bases[:4], {bases[1], bases[3]}),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_replace_pads_a_group_whose_end_was_dropped(tmp_path, scenario):
    directory = tmp_path / "t-0"
    log = build_log(directory)
    bases = [s.base_offset for s in log.segments()]
    old, drop = SCENARIOS[scenario](bases)
    before = record_offsets(log)
    cleaned, kept = write_dropping(directory, old, drop)
    assert replace_segments(directory, old, [cleaned], CONFIG) == [old[0]]
    assert log.refresh()
    rest = [o for o in before if o >= bases[len(old)]]
    assert record_offsets(log) == kept + rest
    # the last batch of the new segment is an empty batch where the old segments ended
    new_segment = fn.log_file(directory, old[0]).read_bytes()
    last = list(iter_batches(new_segment))[-1]
    assert last.header.records_count == 0 and last.next_offset == bases[len(old)]
    assert last.header.producer_id == -1 and not last.is_control and last.is_valid()
    # no timestamp either: the time index never points at it (Kafka's DumpLogSegments checks an
    # entry's timestamp against its batch's records)
    assert last.header.max_timestamp == NO_TIMESTAMP
    log.close()
    reopened = Log.open(directory, CONFIG)
    assert record_offsets(reopened) == kept + rest and reopened.load_result.recovered == ()
    reopened.close()


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("crash_after", range(0, 22, 3))
def test_crash_during_a_padded_swap_is_repaired(tmp_path, monkeypatch, scenario, crash_after):
    directory = tmp_path / "t-0"
    log = build_log(directory)
    bases = [s.base_offset for s in log.segments()]
    old, drop = SCENARIOS[scenario](bases)
    before = record_offsets(log)
    log.close()
    cleaned, kept = write_dropping(directory, old, drop)
    new_view = kept + [o for o in before if o >= bases[len(old)]]
    calls = []
    real_rename = os.rename

    def crashing_rename(src, dst):
        if len(calls) == crash_after:
            raise SystemExit("crash")
        calls.append((src, dst))
        real_rename(src, dst)

    monkeypatch.setattr(maintenance.os, "rename", crashing_rename)
    try:
        replace_segments(directory, old, [cleaned], CONFIG)
        finished = True
    except SystemExit:
        finished = False
    monkeypatch.setattr(maintenance.os, "rename", real_rename)
    reopened = Log.open(directory, CONFIG)
    got = record_offsets(reopened)
    assert got in (before, new_view), (finished, len(calls))
    if finished or any(dst.endswith(".deleted") for _src, dst in map(lambda c: (str(c[0]), str(c[1])), calls)):
        assert got == new_view  # past step 1 the swap wins
    assert not [n for n in os.listdir(directory) if n.endswith((".swap", ".cleaned", ".deleted"))]
    reopened.close()


def test_replace_with_several_groups_pads_each(tmp_path):
    directory = tmp_path / "t-0"
    log = build_log(directory)
    bases = [s.base_offset for s in log.segments()]
    before = record_offsets(log)
    first, kept1 = write_dropping(directory, bases[:2], {bases[1]})
    second, kept2 = write_dropping(directory, bases[2:4], set(bases[2:4]))
    assert replace_segments(directory, bases[:4], [first, second], CONFIG) == [bases[0], bases[2]]
    assert log.refresh()
    assert record_offsets(log) == kept1 + kept2 + [o for o in before if o >= bases[4]]
    log.close()


def test_a_refused_step_is_a_maintenance_error_not_corrupt_log_bytes(tmp_path):
    """MaintenanceError has its own place under TopiclakeError: whoever catches CorruptRecordError
    (bad bytes of the log) does not catch a refused job step, which names the job's file."""
    directory = tmp_path / "t-0"
    log = build_log(directory)
    bases = [s.base_offset for s in log.segments()]
    cleaned, _ = write_cleaned(directory, bases[:3])
    blob = bytearray(cleaned.read_bytes())
    blob[-3] ^= 1
    cleaned.write_bytes(bytes(blob))
    with pytest.raises(MaintenanceError, match="not valid batches") as raised:
        replace_segments(directory, bases[:3], [cleaned], CONFIG)
    refusal = raised.value
    assert isinstance(refusal, TopiclakeError) and not isinstance(refusal, CorruptRecordError)
    assert refusal.source == str(cleaned) and 0 < refusal.position < len(blob)
    assert str(refusal) == f"{cleaned}, position {refusal.position}: {refusal.reason}"
    with pytest.raises(MaintenanceError, match="active segment") as raised:
        delete_segments(directory, [bases[-1]], bases[-1])
    assert not isinstance(raised.value, CorruptRecordError)
    assert offsets(log) == list(range(0, 60, 2))
    log.close()


WRITERS_MTIME_NS = 1_000_000_000  # marks the index the writer built (an inode number may be reused)


def _writers_index(directory, base):
    """A compaction task's part: check the cleaned segment and build its indexes where it wrote it."""
    next_offset = maintenance.build_cleaned_indexes(directory, base, CONFIG)
    os.utime(fn.segment_file(directory, base, fn.INDEX_SUFFIX + fn.CLEANED_SUFFIX),
             ns=(WRITERS_MTIME_NS, WRITERS_MTIME_NS))
    return next_offset


def test_replace_swaps_in_the_writers_indexes(tmp_path):
    directory = tmp_path / "t-0"
    log = build_log(directory)
    bases = [s.base_offset for s in log.segments()]
    before = offsets(log)
    cleaned, kept = write_cleaned(directory, bases[:3])
    next_offset = _writers_index(directory, bases[0])
    indexed = {bases[0]: (cleaned.stat().st_size, next_offset)}
    assert replace_segments(directory, bases[:3], [cleaned], CONFIG, indexed=indexed) == [bases[0]]
    assert fn.index_file(directory, bases[0]).stat().st_mtime_ns == WRITERS_MTIME_NS  # not built again
    assert log.refresh() and offsets(log) == kept + [o for o in before if o >= bases[3]]
    log.close()
    reopened = Log.open(directory, CONFIG)
    assert reopened.load_result.recovered == ()  # the writer's indexes are the log's
    reopened.close()


@pytest.mark.parametrize("change", ["padded", "rewritten"])
def test_replace_builds_the_indexes_again_when_the_indexed_file_changed(tmp_path, change):
    directory = tmp_path / "t-0"
    log = build_log(directory)
    bases = [s.base_offset for s in log.segments()]
    if change == "padded":  # the swap appends an empty batch to span the old segments (step 0)
        cleaned, _ = write_dropping(directory, bases[:3], {bases[2]})
        next_offset = _writers_index(directory, bases[0])
        indexed = {bases[0]: (cleaned.stat().st_size, next_offset)}
    else:  # the file is not the one the writer indexed
        cleaned, _ = write_cleaned(directory, bases[:3])
        next_offset = _writers_index(directory, bases[0])
        indexed = {bases[0]: (cleaned.stat().st_size - 1, next_offset)}
    replace_segments(directory, bases[:3], [cleaned], CONFIG, indexed=indexed)
    assert fn.index_file(directory, bases[0]).stat().st_mtime_ns != WRITERS_MTIME_NS
    log.close()
    reopened = Log.open(directory, CONFIG)
    assert reopened.load_result.recovered == ()
    reopened.close()


@pytest.mark.parametrize("batches", [0, 1, 40])
def test_a_cleaned_segment_written_from_memory_has_the_indexes_of_one_read_back(tmp_path, batches):
    # timestamps out of order, so the time index's entries depend on the max so far
    data = b"".join(make_batch(2, base_offset=10 + 2 * i, timestamp=1000 + (i * 7919) % 53) for i in range(batches))
    mtime_ms = 1_700_000_000_000
    read_back = tmp_path / "read-back"
    read_back.mkdir()
    log_path = fn.segment_file(read_back, 10, fn.LOG_SUFFIX + fn.CLEANED_SUFFIX)
    log_path.write_bytes(data)
    expected_next = maintenance.build_cleaned_indexes(read_back, 10, CONFIG)
    in_memory = tmp_path / "in-memory"
    in_memory.mkdir()
    fn.segment_file(in_memory, 10, fn.INDEX_SUFFIX + fn.CLEANED_SUFFIX).write_bytes(b"stale")  # a crashed run's
    assert maintenance.write_cleaned_segment(in_memory, 10, data, CONFIG, mtime_ms) == expected_next
    for suffix in (fn.LOG_SUFFIX, fn.INDEX_SUFFIX, fn.TIME_INDEX_SUFFIX):
        name = fn.segment_file(in_memory, 10, suffix + fn.CLEANED_SUFFIX).name
        assert (in_memory / name).read_bytes() == (read_back / name).read_bytes(), suffix
    assert fn.segment_file(in_memory, 10, fn.LOG_SUFFIX + fn.CLEANED_SUFFIX).stat().st_mtime_ns == mtime_ms * 1_000_000
    assert expected_next == (10 + 2 * batches if batches else 10)
