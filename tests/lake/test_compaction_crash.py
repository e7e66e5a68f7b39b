"""SIGKILL during the swap, at every step (TOPICLAKE_CRASH_AT), then reopen: the log is valid
and holds either the old or the compacted records — the compacted ones once old segments were
retired — and the next run finishes the job."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from topiclake.segments.storage import StorageLayout

from .compaction_model import active_base, committed_view, model_round, read_log_records, write_workload

REPO = Path(__file__).resolve().parents[2]
STEPS = ["swap-begin", "swap-partial", "swapped", "delete-partial", "deleted", "rename-partial", "renamed",
         "swapped-all"]
# Steps from which the old segments are (partly) retired: the swap must win on reopening.
COMMITTED = {"delete-partial", "deleted", "rename-partial", "renamed", "swapped-all"}

# The driver's swap on its own (same code as the job's: clean, write .cleaned, replace, checkpoint),
# without starting Spark, so every step can be killed cheaply.
DRIVER = r"""
import sys, time
from pathlib import Path
from topiclake.segments import filenames, maintenance
from topiclake.segments.cleaner import clean_log
from topiclake.segments.log_summary import SegmentData
from topiclake.segments.storage import StorageLayout, TopicRegistry
root, topic = sys.argv[1], sys.argv[2]
layout = StorageLayout(root)
config = TopicRegistry(layout).get(topic).log_config
d = layout.log_dir(topic, 0)
bases = sorted(int(p.name.split(".")[0]) for p in d.glob("*.log"))
segs = [SegmentData(b, filenames.log_file(d, b).read_bytes()) for b in bases]
result = clean_log(segs, first_dirty_offset=0, first_uncleanable_offset=bases[-1], config=config,
                   now_ms=int(time.time() * 1000), topic=topic, partition=0)
paths = []
for g in result.groups:
    path = filenames.segment_file(d, g.base_offset, ".log.cleaned")
    path.write_bytes(g.data)
    paths.append(path)
maintenance.replace_segments(d, [b for g in result.groups for b in g.replaces], paths, config)
maintenance.crash_point("swapped-all")
maintenance.write_cleaner_offset(d, result.checkpoint)
"""


def _setup(root, seed):
    written = write_workload(root, "kv", seed=seed, ops=60)[0]
    directory = StorageLayout(root).log_dir("kv", 0)
    upper = active_base(directory)
    # a rerun after the swap but before the checkpoint cleans [0, upper) again, now past the
    # tombstones' horizon (delete.retention.ms=0)
    again = committed_view(model_round(written, upper=upper, drop_tombstones_below=upper))
    return directory, committed_view(written), committed_view(model_round(written, upper=upper)), again


def _check(directory, step, before, after, proc):
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    got = read_log_records(directory)  # Log.open: the loader's crash repair
    assert got in (before, after), step
    if step in COMMITTED:
        assert got == after, step
    assert not [p for p in os.listdir(directory) if p.endswith((".swap", ".cleaned", ".deleted"))]


@pytest.mark.parametrize("step", STEPS)
def test_sigkill_the_driver_at_every_swap_step(tmp_path, step):
    root = tmp_path / "data"
    directory, before, after, _again = _setup(root, seed=sum(map(ord, step)))
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(root), "kv"], capture_output=True, text=True,
                          env=dict(os.environ, TOPICLAKE_CRASH_AT=step), timeout=120)
    _check(directory, step, before, after, proc)


def test_sigkill_the_spark_job_during_the_swap(tmp_path):
    step = "delete-partial"  # every step is covered by the driver test above; this is the real job
    root = tmp_path / "data"
    directory, before, after, again = _setup(root, seed=7)
    cmd = [sys.executable, str(REPO / "jobs" / "compact.py"), "--data", str(root), "--force",
           "--master", "local[1]"]
    env = dict(os.environ, TOPICLAKE_CRASH_AT=step, PYSPARK_PYTHON=sys.executable)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    _check(directory, step, before, after, proc)
    # the next run (no crash) leaves the compacted log
    env.pop("TOPICLAKE_CRASH_AT")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert read_log_records(directory) == again
