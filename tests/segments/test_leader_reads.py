"""The readers' side of leader epochs over a real partition directory left by takeovers: which
segment files and batches are the log, the bound while a takeover is in progress, the check
after reading, and the decode twins dropping a fenced leader's batches."""

from __future__ import annotations

import os
import threading
import time

import pytest

from topiclake.segments import arrow, filenames
from topiclake.segments.batch import Record, build_batch, iter_batches
from topiclake.segments.errors import CorruptRecordError
from topiclake.segments.leader_epochs import EpochHistory
from topiclake.segments.leader_fence import PartitionFence
from topiclake.segments.leader_reads import LeadershipChangedError, ReadEpochs, log_batches, read_epochs

from tests.support.fenced_partition import BASE_TS, batch, lead

DECODERS = [pytest.param(arrow.decode_to_arrow_reference, id="reference")] + (
    [pytest.param(arrow.decode_to_arrow_native, id="native")] if arrow.HAS_NATIVE else [])


def bases(directory) -> list[int]:
    return sorted(p.base_offset for n in directory.iterdir()
                  if (p := filenames.parse_name(n.name)) is not None and p.kind == filenames.LOG_SUFFIX)


def read_all(directory, epochs: ReadEpochs | None) -> list[tuple[int, bytes]]:
    """Every record a reader following the rules sees, in order."""
    counted = bases(directory) if epochs is None else epochs.counted(directory, bases(directory))[0]
    out = []
    for i, base in enumerate(counted):
        limit = epochs.limit(counted[i + 1] if i + 1 < len(counted) else None) if epochs else None
        data = filenames.log_file(directory, base).read_bytes()
        for b in log_batches(data, epochs, limit=limit, last=i == len(counted) - 1, validate=True):
            out += [(r.offset, r.value) for r in b.records()]
    return out


def test_a_directory_without_leader_epochs_reads_as_today(tmp_path):
    directory = tmp_path / "t-0"
    directory.mkdir()
    data = batch(BASE_TS, (b"k", b"v"))
    filenames.log_file(directory, 0).write_bytes(data)
    assert read_epochs(directory) is None
    walker = log_batches(data, None, last=False)
    assert type(walker) is type(iter_batches(data))  # the very walker every reader used before


def test_only_the_valid_log_is_read_and_each_skip_has_its_reason(fenced):
    epochs = read_epochs(fenced.directory)
    assert epochs is not None and epochs.bound is None
    kept, skipped = epochs.counted(fenced.directory, bases(fenced.directory))
    assert kept == list(fenced.segments)
    assert [b for b, _ in skipped] == list(fenced.squatters)
    assert all("fenced leader" in why and "epoch 2 owns" in why for _, why in skipped)
    assert read_all(fenced.directory, epochs) == [(o, v) for o, _k, v in fenced.valid]

    reasons = []
    data = filenames.log_file(fenced.directory, 0).read_bytes()
    kept_batches = list(epochs.batches(data, limit=10, on_skip=lambda b, why: reasons.append((b.base_offset, why))))
    assert [b.base_offset for b in kept_batches] == [0, 5]
    assert reasons == [(10, "written by a fenced leader: leader epoch 1 wrote it, but epoch 2 owns offset 10 (from 10)")]
    # A limit stops the walk at the first batch past it, whatever follows.
    reasons.clear()
    assert [b.base_offset for b in epochs.batches(data, limit=5, on_skip=lambda b, why: reasons.append(why))] == [0]
    assert reasons == ["a stale tail: offsets from 5 are in the next segment of the log"]


def test_a_reader_ignoring_the_epochs_would_have_read_the_late_bytes(fenced):
    """The scenario is not vacuous: the plain walk of every file sees what the fenced leader wrote."""
    everything = []
    for base in bases(fenced.directory):
        data = filenames.log_file(fenced.directory, base).read_bytes()
        everything += [(r.offset, r.value) for b in iter_batches(data, allow_partial_tail=True) for r in b.records()]
    assert sorted(o for o, v in everything if v == b"late") == [10, 11, 13, 15]


def test_a_partial_batch_at_the_end_of_any_segment_is_tolerated(fenced):
    """A fenced leader may be writing its old segment right now: half a batch there is no damage."""
    old = filenames.log_file(fenced.directory, 0)
    with open(old, "ab") as f:
        f.write(batch(BASE_TS, (b"k9", b"torn"))[:30])
    assert read_all(fenced.directory, read_epochs(fenced.directory)) == [(o, v) for o, _k, v in fenced.valid]


def test_while_a_takeover_is_pending_reads_stop_at_the_last_recorded_start(fenced):
    fence = PartitionFence(fenced.directory)
    fence.begin_takeover(3)  # C claimed 3; its start is not recorded yet
    epochs = read_epochs(fenced.directory, wait_s=0.2)
    claimed_at = (fenced.directory / "leader-epochs" / "0000000003.claim").stat().st_mtime
    assert time.time() >= claimed_at + 0.2  # it waited for the takeover first, 0.2 s from the claim
    assert epochs.bound == 10  # epoch 2's start: B's offsets are not decided
    kept, skipped = epochs.counted(fenced.directory, bases(fenced.directory))
    assert kept == [0] and all("undecided" in why for b, why in skipped if b in (10, 12, 14))
    assert read_all(fenced.directory, epochs) == [(o, v) for o, _k, v in fenced.valid if o < 10]


def test_a_takeover_stuck_for_longer_than_the_wait_costs_no_reader_any_wait(fenced):
    fence = PartitionFence(fenced.directory)
    fence.begin_takeover(3)
    claim = fenced.directory / "leader-epochs" / "0000000003.claim"
    os.utime(claim, (time.time() - 60, time.time() - 60))  # claimed a minute ago, never started
    started = time.monotonic()
    epochs = read_epochs(fenced.directory, wait_s=5)
    assert time.monotonic() - started < 1 and epochs.bound == 10


def test_a_reader_waits_for_a_takeover_that_completes(fenced):
    fence = PartitionFence(fenced.directory)
    fence.begin_takeover(3)

    def finish() -> None:
        time.sleep(0.1)
        fence.record_start(3, 15)

    finisher = threading.Thread(target=finish)
    finisher.start()
    epochs = read_epochs(fenced.directory, wait_s=5)
    finisher.join()
    assert epochs.bound is None and epochs.history.latest_epoch == 3
    assert read_all(fenced.directory, epochs) == [(o, v) for o, _k, v in fenced.valid]


def test_reads_stand_when_the_next_leader_adopts_them(fenced):
    epochs = read_epochs(fenced.directory)
    assert epochs.confirm(fenced.directory, 15) is epochs  # nothing happened: one stat
    c = lead(fenced.directory, 3)  # C's recovery adopts everything B wrote: it starts at 15
    try:
        now = epochs.confirm(fenced.directory, 15)
        assert now.history.latest_epoch == 3
    finally:
        c.close_handlers()


def test_reads_of_a_write_the_next_leader_did_not_adopt_are_refused(fenced):
    epochs = read_epochs(fenced.directory)  # the reader loads the history (epoch 2 leads)
    fence = PartitionFence(fenced.directory)
    history = fence.begin_takeover(3)  # C claims and recovers: the log ends at 15
    fenced.leader.append(batch(BASE_TS + 20_000, (b"k0", b"b15")), leader_epoch=2)  # B, not yet fenced, at 15
    fenced.leader.flush()
    assert read_all(fenced.directory, epochs)[-1] == (15, b"b15")  # the reader sees it as valid
    fence.record_start(3, 15)  # C starts at 15: B's write is not part of the log
    assert history is not None
    with pytest.raises(LeadershipChangedError, match=r"leader epoch 3 now starts at offset 15"):
        epochs.confirm(fenced.directory, 16)
    assert epochs.confirm(fenced.directory, 15).history.latest_epoch == 3  # below it, the reads stand


@pytest.mark.parametrize("decode", DECODERS)
def test_the_decoders_drop_a_fenced_leaders_batches(fenced, decode):
    data = filenames.log_file(fenced.directory, 0).read_bytes()
    history = ReadEpochs.history_of(read_epochs(fenced.directory).entries)
    assert history.entries == read_epochs(fenced.directory).history.entries  # what a task carries suffices
    everything = decode(data, epochs=None)
    assert everything.column("value").to_pylist()[-1] == b"late"
    table = decode(data, epochs=history)
    assert table.column("offset").to_pylist() == list(range(10))
    assert table.equals(decode(data, end=len(data) - len(batch(BASE_TS, (b"k1", b"late")))))


@pytest.mark.parametrize("decode", DECODERS)
def test_a_fenced_leaders_damaged_batch_is_dropped_before_its_crc_is_checked(decode):
    history = EpochHistory({1: 0, 2: 2})
    good = build_batch([Record(0, BASE_TS, b"a", b"0"), Record(1, BASE_TS, b"b", b"1")], partition_leader_epoch=1)
    late = bytearray(build_batch([Record(2, BASE_TS, b"c", b"late")], base_offset=2, partition_leader_epoch=1))
    late[-1] ^= 0xFF  # a bad CRC too
    table = decode(good + bytes(late), epochs=history)
    assert table.column("offset").to_pylist() == [0, 1]
    with pytest.raises(CorruptRecordError):
        decode(good + bytes(late), epochs=None)
