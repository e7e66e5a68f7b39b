"""The Spark compaction job against the model (tests/lake/compaction_model.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from topiclake.lake.runs.compaction import CompactOptions, compact, format_summary
from topiclake.segments.maintenance import read_cleaner_offset
from topiclake.segments.storage import StorageLayout

from .compaction_model import active_base, append_more, committed_view, model_round, read_log_records, write_workload


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_compaction_matches_the_model_over_two_rounds(spark, root, seed):
    written = write_workload(root, "kv", seed=seed, ops=70, partitions=2)
    layout = StorageLayout(root)
    uppers = [active_base(layout.log_dir("kv", p)) for p in range(2)]
    result = compact(spark, CompactOptions(root=root, force=True, target_task_bytes=700))
    assert not result.errors, format_summary(result)
    # as many partitions as task slots (local[2]): each cleaned whole by one task, however large
    assert not any(part.split for part in result.partitions)
    for p in range(2):
        directory = layout.log_dir("kv", p)
        expected = model_round(written[p], upper=uppers[p])
        assert read_log_records(directory) == committed_view(expected), f"partition {p}"
        assert read_cleaner_offset(directory) == uppers[p]
        part = next(x for x in result.partitions if x.partition == p)
        assert part.records_dropped > 0 and part.bytes_after < part.bytes_before
    # Round two, with new dirty data and past the tombstones' horizon (delete.retention.ms=0):
    # the tombstones cleaned in round one go too.
    kept = [model_round(written[p], upper=uppers[p]) for p in range(2)]
    now = int(time.time() * 1000)
    for p in range(2):
        kept[p] += append_more(root, "kv", p, 12, now_ms=now)
    uppers2 = [active_base(layout.log_dir("kv", p)) for p in range(2)]
    time.sleep(0.01)
    result = compact(spark, CompactOptions(root=root, force=True))
    assert not result.errors, format_summary(result)
    for p in range(2):
        expected = model_round(kept[p], upper=uppers2[p], checkpoint=uppers[p], drop_tombstones_below=uppers[p])
        assert read_log_records(layout.log_dir("kv", p)) == committed_view(expected), f"partition {p}"
        assert read_cleaner_offset(layout.log_dir("kv", p)) == uppers2[p]


@pytest.mark.parametrize("seed", [5, 6])
def test_a_partition_alone_has_its_key_map_built_by_map_tasks(spark, root, seed):
    # One partition and two task slots: its dirty range (above target_task_bytes) is cut into map
    # tasks whose shares the driver merges and broadcasts to the rewrite task: the same log.
    written = write_workload(root, "kv", seed=seed, ops=70)
    directory = StorageLayout(root).log_dir("kv", 0)
    upper = active_base(directory)
    result = compact(spark, CompactOptions(root=root, force=True, target_task_bytes=700))
    assert not result.errors, format_summary(result)
    part = result.partitions[0]
    assert part.split and len(part.map_tasks) > 1
    assert read_log_records(directory) == committed_view(model_round(written[0], upper=upper))
    assert read_cleaner_offset(directory) == upper and part.records_dropped > 0


def test_dump_log_shows_valid_batches_only(spark, root):
    write_workload(root, "kv", seed=9, ops=50)
    compact(spark, CompactOptions(root=root, force=True))
    directory = StorageLayout(root).log_dir("kv", 0)
    out = subprocess.run([sys.executable, "-m", "topiclake.cli", "dump-log", "--json",
                          *map(str, sorted(directory.glob("*.log")))], capture_output=True, text=True, check=True)
    batches = [json.loads(line) for line in out.stdout.splitlines()]
    assert batches and all(b["isValid"] for b in batches)
    offsets = [b["baseOffset"] for b in batches]
    assert offsets == sorted(offsets)


def test_nothing_to_do_and_ratio_respected(spark, root):
    write_workload(root, "kv", seed=4, ops=40, config={"min.cleanable.dirty.ratio": "0.9"})
    first = compact(spark, CompactOptions(root=root))  # all dirty: ratio 1.0 > 0.9
    assert first.partitions[0].checkpoint is not None
    append_more(root, "kv", 0, 3, now_ms=int(time.time() * 1000))
    lazy = compact(spark, CompactOptions(root=root))
    assert lazy.partitions[0].skipped.startswith("dirty ratio")
    assert compact(spark, CompactOptions(root=root, force=True)).partitions[0].checkpoint is not None
    again = compact(spark, CompactOptions(root=root, force=True))
    assert again.partitions[0].skipped.startswith("nothing cleanable")
