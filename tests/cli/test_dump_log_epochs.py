"""`topiclake dump-log` in a partition a cluster wrote: it dumps the log as every reader sees it and
says which batches it skips, and why (a fenced leader's late batch, a file it created after the
takeover, offsets a takeover in progress has not decided)."""

from __future__ import annotations

import json
import subprocess
import sys


from topiclake.segments import filenames
from topiclake.segments.leader_fence import PartitionFence


def dump(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "topiclake.cli", "dump-log", *map(str, args)], capture_output=True,
                          text=True, timeout=60)


def test_a_fenced_leaders_late_batch_is_skipped_with_its_reason(fenced):
    result = dump("--print-data", filenames.log_file(fenced.directory, 0))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[1] for line in lines if line.startswith("baseOffset:")] == ["0", "5"]
    payloads = [line.split("payload: ")[1] for line in lines if line.startswith("| offset:")]
    assert payloads == [f"a{i}" for i in range(10)]  # never "late"
    assert ("skipped baseOffset: 10 lastOffset: 10 partitionLeaderEpoch: 1 position: 240 size: 74 reason: written by "
            "a fenced leader: leader epoch 1 wrote it, but epoch 2 owns offset 10 (from 10)") in lines
    assert lines[-1].startswith("Skipped 1 of 3 batches: not part of the log by the leader epochs in ")


def test_a_file_a_fenced_leader_created_is_said_to_be_no_part_of_the_log(fenced):
    result = dump("--json", filenames.log_file(fenced.directory, 15))
    assert result.returncode == 0, result.stderr
    assert [json.loads(line) for line in result.stdout.splitlines()] == [
        {"baseOffset": 15, "lastOffset": 15, "partitionLeaderEpoch": 1, "position": 0, "size": 74,
         "skipped": "in a segment file that is not part of the log"}]
    text = dump(filenames.log_file(fenced.directory, 15)).stdout
    assert ("Segment not part of the log: its first batch (offset 15) was written by a fenced leader: leader epoch 1 "
            "wrote it, but epoch 2 owns offset 15 (from 10)") in text


def test_a_takeover_in_progress_is_announced_and_its_undecided_batches_skipped(fenced):
    PartitionFence(fenced.directory).begin_takeover(3)
    lines = dump(filenames.log_file(fenced.directory, 12)).stdout.splitlines()
    assert "Leader takeover in progress (epoch 3 claimed, its start not recorded): offsets from 10 are not decided yet" \
        in lines
    assert not [line for line in lines if line.startswith("baseOffset:")]
    assert lines[-1].startswith("Skipped 1 of 1 batches")


def test_a_partition_without_leader_epochs_dumps_as_before(tmp_path):
    from topiclake.segments.batch import Record, build_batch

    path = tmp_path / "p-0" / "00000000000000000000.log"
    path.parent.mkdir()
    path.write_bytes(build_batch([Record(0, 0, b"k", b"v")]))
    lines = dump(path).stdout.splitlines()
    assert lines[-1].startswith("baseOffset: 0 lastOffset: 0") and not [line for line in lines if "kipped" in line]
