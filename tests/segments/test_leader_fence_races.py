"""Leader epochs in storage with real processes sharing one partition directory: a leader paused
by SIGSTOP (at the worst moments and at random ones) never acknowledges after a takeover and
nothing it writes late is ever read; racing takeovers keep one history."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from topiclake.segments.leader_epochs import UNDEFINED_EPOCH_OFFSET, EpochHistory, claim_path
from topiclake.segments.leader_fence import FencedLeaderError

from tests.support.epoch_log import Leader, read_log

REPO = Path(__file__).resolve().parents[2]


def spawn_leader(directory: Path, epoch: int, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.support.epoch_log", "leader", str(directory), str(epoch),
                             *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


_seen: dict[int, list[dict]] = {}  # events each leader printed before the test waited for a later one


def wait_line(process: subprocess.Popen, key: str) -> dict:
    while line := process.stdout.readline():
        event = json.loads(line)
        _seen.setdefault(process.pid, []).append(event)
        if key in event:
            return event
    raise AssertionError(f"leader exited before {key!r}: {process.stderr.read()}")


def wait_stopped(pid: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "T":
                return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} did not stop")


def finish(process: subprocess.Popen) -> list[dict]:
    out, err = process.communicate(timeout=60)
    assert process.returncode in (0, 3), err
    return _seen.pop(process.pid, []) + [json.loads(line) for line in out.splitlines()]


def acknowledged(events: list[dict]) -> dict[int, bytes]:
    return {e["acked"]: e["value"].encode() for e in events if "acked" in e}


def assert_one_clean_log(directory: Path, acked_values: dict[int, bytes], *, late_invisible: bool = True) -> list:
    """Every acknowledged record is read back at its offset; offsets rise; every batch read
    carries the epoch owning its offset; nothing written after the new leader's recovery (b"late")
    is read. (`late_invisible` False: a fenced leader's write that races the claim may land before
    the recovery, and is then adopted, never having been acknowledged.)"""
    history = EpochHistory.load(directory)
    batches = read_log(directory, history)
    offsets = [b.base_offset for b in batches]
    assert offsets == sorted(set(offsets)), "an offset read twice or out of order"
    by_offset = {b.base_offset: b for b in batches}
    for offset, value in acked_values.items():
        assert offset in by_offset and by_offset[offset].values == (value,), f"acknowledged offset {offset} lost"
    if late_invisible:
        assert all(b.values != (b"late",) for b in batches), "a fenced leader's late write became visible"
    assert all(history.owner(b.base_offset) in (None, b.epoch) for b in batches)
    return batches


def test_a_leader_paused_between_fsync_and_check_acknowledges_nothing_more(tmp_path):
    old = spawn_leader(tmp_path, 1, "--count", "20", "--stop-before-check", "5", "--late", "4")
    stopped = wait_line(old, "stopping")
    assert stopped["written"] == 5
    wait_stopped(old.pid)
    new = Leader(tmp_path, 2)
    base = new.take_over()
    assert base == 6  # record 5 was fsynced before the takeover read the log: adopted, never acknowledged
    acked = {new.write(b"new-%d" % n): b"new-%d" % n for n in range(3)}
    for offset in acked:
        new.acknowledge(offset)
    os.kill(old.pid, signal.SIGCONT)
    events = finish(old)
    old_acks = [e["acked"] for e in events if "acked" in e]
    assert old_acks == [0, 1, 2, 3, 4]
    assert events[-1]["at"] == 5 and "fenced" in events[-1]
    acked.update(acknowledged(events))
    batches = assert_one_clean_log(tmp_path, acked)
    assert [b.base_offset for b in batches] == list(range(9))
    assert batches[5].values == (b"e1-5",)  # adopted by the new leader's recovery


def test_a_leader_woken_before_recording_its_start_can_take_no_offsets(tmp_path):
    first = Leader(tmp_path, 0)
    first.take_over()
    for n in range(3):
        first.acknowledge(first.write(b"z%d" % n))
    stale = spawn_leader(tmp_path, 1, "--stop-before-start")
    assert wait_line(stale, "stopping")["recovered"] == 3
    wait_stopped(stale.pid)
    # Epoch 0 raced epoch 1's claim: its write lands after the claim, so it is never acknowledged,
    # but before the next recovery reads the log, so that recovery adopts it (as a Kafka follower
    # keeps a record it replicated that the old leader never acknowledged).
    first.write(b"raced")
    with pytest.raises(FencedLeaderError):
        first.acknowledge(3)
    newest = Leader(tmp_path, 2)
    assert newest.take_over() == 4  # epoch 0's late write was adopted: it landed before this recovery
    newest.acknowledge(newest.write(b"n0"))
    os.kill(stale.pid, signal.SIGCONT)
    events = finish(stale)
    assert events[-1].get("at") == "takeover" and "recording its start" in events[-1]["fenced"]
    history = EpochHistory.load(tmp_path)
    assert history.starts[1] == UNDEFINED_EPOCH_OFFSET and history.entries == ((0, 0), (2, 4))
    batches = assert_one_clean_log(tmp_path, {0: b"z0", 1: b"z1", 2: b"z2", 4: b"n0"})
    assert [(b.base_offset, b.epoch, b.values) for b in batches][3:] == [(3, 0, (b"raced",)), (4, 2, (b"n0",))]


@pytest.mark.parametrize("seed", range(4))
def test_a_leader_stopped_at_a_random_moment_loses_no_acknowledged_write(tmp_path, seed):
    rng = random.Random(seed)
    old = spawn_leader(tmp_path, 1, "--count", "100000", "--late", "3")
    wait_line(old, "leading")
    time.sleep(rng.uniform(0.05, 0.3))
    os.kill(old.pid, signal.SIGSTOP)
    wait_stopped(old.pid)
    new = Leader(tmp_path, 2)
    new.take_over()
    acked = {}
    for n in range(5):
        offset = new.write(b"new-%d" % n)
        new.acknowledge(offset)
        acked[offset] = b"new-%d" % n
    os.kill(old.pid, signal.SIGCONT)
    events = finish(old)
    assert "fenced" in events[-1]
    assert acknowledged(events), "the old leader acknowledged nothing before it was stopped"
    acked.update(acknowledged(events))
    assert_one_clean_log(tmp_path, acked)


def test_racing_takeovers_leave_one_history_and_lose_no_acknowledged_write(tmp_path):
    first = Leader(tmp_path, 0)
    first.take_over()
    first.acknowledge(first.write(b"e0-0"))
    epochs = list(range(1, 7))
    random.Random(7).shuffle(epochs)
    racers = {epoch: spawn_leader(tmp_path, epoch, "--count", "30", "--interval", "0.002") for epoch in epochs}
    acked = {0: b"e0-0"}
    outcomes = {}
    for epoch, process in racers.items():
        events = finish(process)
        outcomes[epoch] = events
        acked.update(acknowledged(events))
    leaders = [epoch for epoch, events in outcomes.items() if any("leading" in e for e in events)]
    assert max(epochs) in leaders or any("fenced" in e for e in outcomes[max(epochs)])
    assert all(claim_path(tmp_path, e).exists() for e in range(7))  # contiguous
    history = EpochHistory.load(tmp_path)
    assert not history.pending and history.claimed == 6
    assert all(e in history.starts for e in range(7))  # every epoch started or sealed: nothing can change
    batches = assert_one_clean_log(tmp_path, acked, late_invisible=False)
    epochs_in_order = [b.epoch for b in batches]
    assert epochs_in_order == sorted(epochs_in_order)
