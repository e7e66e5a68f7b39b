"""Leader epochs in storage: Kafka's leader-epoch-checkpoint format, the epoch history and its
validity rule, and the fence protocol (leader_fence), in one process. Races between processes are
in test_leader_fence_races.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topiclake.segments import filenames
from topiclake.segments.errors import CorruptRecordError
from topiclake.segments.leader_epochs import (CHECKPOINT_FILE, UNDEFINED_EPOCH_OFFSET, EpochEntry, EpochHistory,
                                              claim_path, effective_entries, epochs_dir, format_checkpoint,
                                              parse_checkpoint, read_checkpoint, start_path, write_checkpoint)
from topiclake.segments.leader_fence import FencedLeaderError, PartitionFence

from tests.support.epoch_log import Leader, read_log, recovered_end

# ---- Kafka's leader-epoch-checkpoint ------------------------------------------------------------


def test_checkpoint_reads_kafkas_own_text():
    # What a Kafka broker writes after two leader changes (LeaderEpochCheckpointFile).
    assert parse_checkpoint(b"0\n3\n0 0\n1 150\n4 2000\n") == [(0, 0), (1, 150), (4, 2000)]
    assert parse_checkpoint(b"0\n1\n3\t\t42\n") == [(3, 42)]  # any whitespace separates, as in Kafka
    assert parse_checkpoint(b"") == [] and parse_checkpoint(b"0\n0\n") == []


def test_checkpoint_round_trips_atomically(tmp_path):
    entries = [EpochEntry(0, 0), EpochEntry(2, 17), EpochEntry(5, 17_000_000_000)]
    assert format_checkpoint(entries) == b"0\n3\n0 0\n2 17\n5 17000000000\n"
    write_checkpoint(tmp_path, entries)
    assert read_checkpoint(tmp_path) == entries
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_FILE]  # no temp file left
    assert read_checkpoint(tmp_path / "absent") == []


@pytest.mark.parametrize("text, reason", [
    (b"1\n0\n", "unrecognised version"),
    (b"0\nx\n", "bad entry count"),
    (b"0\n2\n0 0\n", "2 entries declared, 1 present"),
    (b"0\n1\n0 zero\n", "expected 'epoch start_offset'"),
    (b"0\n1\n0 1 2\n", "expected 'epoch start_offset'"),
    (b"0\n2\n3 10\n2 20\n", "does not follow"),
    (b"0\n2\n3 10\n4 5\n", "does not follow"),
])
def test_a_bad_checkpoint_is_a_clear_error(text, reason):
    with pytest.raises(CorruptRecordError, match=reason) as info:
        parse_checkpoint(text, source="p-0/leader-epoch-checkpoint")
    assert "p-0/leader-epoch-checkpoint line" in str(info.value)


# ---- the history and the validity rule -----------------------------------------------------------


def test_no_history_keeps_todays_log_valid(tmp_path):
    history = EpochHistory.load(tmp_path)
    assert history.entries == () and history.claimed is None and not history.pending
    assert history.owner(0) is None
    for epoch in (0, -1, 7, None):  # single-broker batches carry 0; old clients' may carry -1
        assert history.is_valid(12345, epoch)
    assert history.still_current(tmp_path)


def test_the_owner_is_the_highest_epoch_starting_at_or_below_the_offset():
    history = EpochHistory({1: 100, 2: 150, 4: 300})
    assert [history.owner(o) for o in (99, 100, 149, 150, 299, 300, 10 ** 12)] == [None, 1, 1, 2, 2, 4, 4]
    assert history.is_valid(50, 0) and history.is_valid(50, -1)  # below the first start: before the cluster
    assert history.is_valid(120, 1) and not history.is_valid(120, 2) and not history.is_valid(120, None)
    assert history.is_valid(150, 2) and not history.is_valid(150, 1)  # the old leader's late batch
    assert not history.is_valid(140, 1, last_offset=155)  # a batch may not run into the next epoch
    assert history.range_end(120) == 150 and history.range_end(300) is None
    assert history.latest_epoch == 4


def test_a_late_lower_start_and_a_sealed_epoch_own_nothing():
    # Epoch 2 won, paused, and recorded its start after epoch 3 started lower: 2 owns nothing.
    history = EpochHistory({1: 0, 2: 200, 3: 100, 5: UNDEFINED_EPOCH_OFFSET})
    assert history.entries == (EpochEntry(1, 0), EpochEntry(3, 100))
    assert history.owner(250) == 3 and not history.is_valid(250, 2)
    assert not history.is_valid(1000, 5)  # sealed
    # equal starts: the higher epoch wins, the lower owns nothing
    assert EpochHistory({2: 100, 3: 100}).entries == (EpochEntry(3, 100),)


def test_end_offset_for_follows_kafkas_cache():
    history = EpochHistory({1: 0, 3: 100, 6: 250})
    assert history.end_offset_for(6, log_end_offset=400) == (6, 400)
    assert history.end_offset_for(3, 400) == (3, 250)
    assert history.end_offset_for(4, 400) == (3, 250)  # an epoch this log never had: the one before it
    assert history.end_offset_for(9, 400) == (-1, -1)  # above every epoch
    assert history.end_offset_for(0, 400) == (0, 0)  # below every epoch: it ended where the first began
    assert history.end_offset_for(-1, 400) == (-1, -1)  # undefined
    assert EpochHistory({}).end_offset_for(0, 400) == (-1, -1)  # no history at all


def test_a_segment_counts_only_if_its_first_batch_is_valid():
    history = EpochHistory({1: 0, 2: 100})
    assert history.counts_segment(100, 2) and history.counts_segment(40, 1)
    assert not history.counts_segment(120, 1)  # created by the fenced epoch 1 after the takeover
    assert not history.counts_segment(None, None)  # an empty file carries no data


def test_load_reads_only_new_start_files_and_ignores_temp_files(tmp_path):
    fence = PartitionFence(tmp_path)
    fence.begin_takeover(0)
    fence.record_start(0, 0)
    first = EpochHistory.load(tmp_path)
    (epochs_dir(tmp_path) / ".0000000001.start.abc.tmp").write_text("garbage")
    start_path(tmp_path, 0).write_text("999\n")  # never rewritten in real life: proves it is not re-read
    again = EpochHistory.load(tmp_path, first)
    assert again.starts == {0: 0} and again == first


def test_a_corrupt_start_file_names_itself(tmp_path):
    epochs_dir(tmp_path).mkdir()
    start_path(tmp_path, 3).write_text("twelve\n")
    with pytest.raises(CorruptRecordError, match=r"0000000003\.start.*expected a start offset"):
        EpochHistory.load(tmp_path)


# ---- properties ----------------------------------------------------------------------------------

starts_strategy = st.dictionaries(st.integers(0, 40), st.one_of(st.just(UNDEFINED_EPOCH_OFFSET),
                                                                st.integers(0, 500)), max_size=12)


@settings(max_examples=300, deadline=None)
@given(starts=starts_strategy, offsets=st.lists(st.integers(0, 600), max_size=30))
def test_owner_and_the_kafka_entries_agree_with_the_definition(starts, offsets):
    history = EpochHistory(starts)
    entries = history.entries
    assert all(a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in zip(entries, entries[1:]))
    assert parse_checkpoint(format_checkpoint(entries)) == list(entries)
    for offset in offsets:
        owners = [e for e, s in starts.items() if s != UNDEFINED_EPOCH_OFFSET and s <= offset]
        assert history.owner(offset) == (max(owners) if owners else None)


@settings(max_examples=200, deadline=None)
@given(starts=starts_strategy,
       batches=st.lists(st.tuples(st.integers(0, 600), st.one_of(st.integers(-1, 42))), max_size=40))
def test_the_arrow_mask_is_the_per_batch_rule(starts, batches):
    history = EpochHistory(starts)
    mask = history.valid_mask([b for b, _ in batches], [e for _, e in batches]).to_pylist()
    assert mask == [history.is_valid(b, e) for b, e in batches]


@settings(max_examples=150, deadline=None)
@given(starts=starts_strategy, later=starts_strategy)
def test_adding_starts_never_changes_the_owner_below_the_new_starts(starts, later):
    """The history only grows, and an added start only takes offsets from its own start on: what
    a reader judged below every new start is judged the same forever."""
    new = {e: s for e, s in later.items() if e not in starts}
    before, after = EpochHistory(starts), EpochHistory({**starts, **new})
    floor = min((s for s in new.values() if s != UNDEFINED_EPOCH_OFFSET), default=10 ** 9)
    for offset in range(0, min(floor, 600)):
        assert before.owner(offset) == after.owner(offset)


# ---- the fence protocol in one process ----------------------------------------------------------


def test_claims_stay_contiguous_and_fence_every_lower_epoch(tmp_path):
    fence = PartitionFence(tmp_path)
    fence.claim(2, broker_id=1)
    assert [claim_path(tmp_path, e).exists() for e in range(4)] == [True, True, True, False]
    assert fence.current_epoch() == 2 and not fence.superseded(2) and fence.superseded(1)
    PartitionFence(tmp_path).claim(5, broker_id=2)
    assert all(claim_path(tmp_path, e).exists() for e in range(6))
    assert fence.superseded(2) and fence.superseded(4) and not fence.superseded(5)
    with pytest.raises(FencedLeaderError, match="epoch 2 is fenced"):
        fence.check(2)
    for stale in (3, 5):  # a lower or the same epoch cannot be claimed again
        with pytest.raises(FencedLeaderError, match="claiming"):
            PartitionFence(tmp_path).claim(stale)
    with pytest.raises(ValueError):
        fence.claim(-1)


def test_a_takeover_seals_an_epoch_that_never_recorded_its_start(tmp_path):
    old = PartitionFence(tmp_path)
    old.begin_takeover(1)  # won epoch 1, then paused before recording its start
    new = PartitionFence(tmp_path)
    history = new.begin_takeover(2)
    assert history.starts == {0: UNDEFINED_EPOCH_OFFSET, 1: UNDEFINED_EPOCH_OFFSET} and history.pending
    new.record_start(2, 0)
    with pytest.raises(FencedLeaderError, match="recording its start"):
        old.record_start(1, 0)  # woke up: it can no longer take offsets from anyone
    assert read_checkpoint(tmp_path) == [(2, 0)] and not EpochHistory.load(tmp_path).pending


def test_a_new_leader_steps_past_a_segment_a_fenced_leader_created(tmp_path):
    old = Leader(tmp_path, 1)
    old.take_over()
    for n in range(3):
        old.acknowledge(old.write(b"a%d" % n))
    new = Leader(tmp_path, 2)
    history = new.fence.begin_takeover(2)
    end = recovered_end(tmp_path, history)
    assert end == 3
    old.roll(3)  # the fenced leader rolls to 3 before the new one can
    filenames.index_file(tmp_path, 4).write_bytes(b"\0" * 8)  # a stale index of the next base
    old.write(b"late-1")
    new.fence.record_start(2, end)
    assert new.roll(end) == 4 and not filenames.index_file(tmp_path, 4).exists()
    new.acknowledge(new.write(b"b0"))
    old.write(b"late-2")
    with pytest.raises(FencedLeaderError):
        old.acknowledge(3)
    final = EpochHistory.load(tmp_path)
    assert [b.values[0] for b in read_log(tmp_path, final)] == [b"a0", b"a1", b"a2", b"b0"]
    assert (tmp_path / "00000000000000000003.log").stat().st_size > 0  # left alone, ignored


def test_a_reader_sees_a_takeover_begin_with_one_stat(tmp_path):
    leader = Leader(tmp_path, 0)
    leader.take_over()
    snapshot = EpochHistory.load(tmp_path)
    assert snapshot.still_current(tmp_path) and not snapshot.pending
    PartitionFence(tmp_path).begin_takeover(1)
    assert not snapshot.still_current(tmp_path)
    assert EpochHistory.load(tmp_path, snapshot).pending


def test_the_history_survives_a_stale_leader_rewriting_the_kafka_checkpoint(tmp_path):
    fence = PartitionFence(tmp_path)
    fence.begin_takeover(0)
    fence.record_start(0, 0)
    PartitionFence(tmp_path).begin_takeover(1)
    PartitionFence(tmp_path).record_start(1, 10)
    write_checkpoint(tmp_path, [EpochEntry(0, 0)])  # a stale writer's view of the derived file
    assert EpochHistory.load(tmp_path).entries == ((0, 0), (1, 10))  # the truth is the start files


def test_check_is_a_single_stat_of_a_missing_file(tmp_path, monkeypatch):
    fence = PartitionFence(tmp_path)
    fence.begin_takeover(3)
    calls = []
    real = os.path.lexists
    monkeypatch.setattr(os.path, "lexists", lambda p: calls.append(Path(p).name) or real(p))
    fence.check(3)
    assert calls == ["0000000004.claim"]


# ---- the whole protocol under every interleaving hypothesis can find -------------------------------


def _actor(directory: Path, epoch: int, acked: dict[int, bytes]):
    """One leader's steps, one per `next()`: take over in four steps, then write and acknowledge;
    once fenced it keeps writing (a stale process's queued writes) but acknowledges nothing. Such
    a write is b"late" once a newer epoch recorded its start (its recovery read the log before the
    write landed): never visible. Before that it is b"raced": the next recovery may adopt it."""
    leader = Leader(directory, epoch)
    try:
        history = leader.fence.begin_takeover(epoch)
        yield
        end = recovered_end(directory, history)
        yield
        leader.fence.record_start(epoch, end)
        yield
        leader.roll(end)
        yield
        for n in range(1000):
            offset = leader.write(b"e%d-%d" % (epoch, n))
            yield
            leader.acknowledge(offset)
            acked[offset] = b"e%d-%d" % (epoch, n)
            yield
    except FencedLeaderError:
        if leader.segment_fd is None:
            return
        for _ in range(3):
            starts = EpochHistory.load(directory).starts
            recovered = any(e > epoch and s != UNDEFINED_EPOCH_OFFSET for e, s in starts.items())
            leader.write(b"late" if recovered else b"raced")
            yield


@settings(max_examples=60, deadline=None)
@given(epochs=st.permutations(range(4)), schedule=st.lists(st.integers(0, 3), min_size=10, max_size=80),
       reads=st.sets(st.integers(0, 79), max_size=10))
def test_every_interleaving_keeps_acknowledged_writes_and_what_readers_saw(epochs, schedule, reads):
    """Leaders of epochs 0-3 started in any order, stepped in any interleaving: every acknowledged
    write stays at its offset, and whatever a reader saw with a settled, still-current history
    (no takeover in progress before or after its read) stays exactly as it saw it."""
    import tempfile

    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        acked: dict[int, bytes] = {}
        actors = {slot: _actor(directory, epoch, acked) for slot, epoch in enumerate(epochs)}
        seen: dict[int, tuple] = {}
        for step, slot in enumerate(schedule):
            if slot in actors and next(actors[slot], "done") == "done":
                del actors[slot]
            history = EpochHistory.load(directory)
            batches = read_log(directory, history)
            by_offset = {b.base_offset: b.values for b in batches}
            assert all(by_offset.get(o) == (v,) for o, v in acked.items())
            assert [b.base_offset for b in batches] == sorted({b.base_offset for b in batches})
            if step in reads and not history.pending:
                if history.still_current(directory):
                    seen.update(by_offset)
        final = {b.base_offset: b.values for b in read_log(directory, EpochHistory.load(directory))}
        assert {o: final.get(o) for o in seen} == seen
        assert all(v != (b"late",) for v in final.values())
