"""Compaction and retention of a partition a cluster wrote (leader epochs in storage): they change
only segments of the valid log, never the current leader's active segment, never a file a fenced
leader created (not even when the compaction's swap spans it and the job is killed mid-swap), they
drop a fenced leader's late batches when they rewrite, and no valid record is lost that Kafka's
rules keep."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from topiclake.lake.runs.compaction import CompactOptions, compact
from topiclake.lake.runs.retention import RetentionOptions, retain
from topiclake.segments import filenames
from topiclake.segments.batch import Record, build_batch
from tests.support.fenced_partition import BASE_TS, lead, log_records


COMPACTED = {"cleanup.policy": "compact", "delete.retention.ms": "0"}
# Kafka's compaction of the valid log over [0, 14) (14 is B's active segment): the latest record of
# each key, and every record of the active segment.
KEPT = [5, 6, 7, 9, 10, 12, 13, 14]

COMPACT_AND_DIE = """
import sys
from pathlib import Path
from topiclake.lake.runs.compaction import CompactOptions, run
run(CompactOptions(root=Path(sys.argv[1]), topics=("t",), force=True), master="local[1]",
    spark_conf={"spark.ui.enabled": "false"})
"""


def test_compaction_keeps_the_valid_log_and_leaves_a_fenced_leaders_files_alone(spark, root, fenced_topic):
    fenced = fenced_topic(COMPACTED)
    squatters = fenced.squatter_files()
    result = compact(spark, CompactOptions(root=root, topics=("t",), force=True))
    part = result.partitions[0]
    assert part.error is None and part.checkpoint == 14, part.error
    assert part.records_read == 13 and part.records_retained == 7  # 0-13 of the valid log: no late record
    assert fenced.squatter_files() == squatters  # inode, size and bytes
    assert fenced.leader.refresh()  # the leader serves the swapped-in segment, and keeps appending
    expected = [r for r in fenced.valid if r[0] in KEPT]
    assert log_records(fenced.leader) == expected
    c = lead(fenced.directory, 3)  # and a new leader loads exactly that
    assert log_records(c) == expected
    c.close_handlers()


def test_a_compaction_killed_mid_swap_is_completed_without_touching_a_fenced_leaders_files(root, fenced_topic):
    fenced = fenced_topic(COMPACTED)
    squatters = fenced.squatter_files()
    proc = subprocess.run([sys.executable, "-c", COMPACT_AND_DIE, str(root)], capture_output=True, text=True,
                          env=dict(os.environ, TOPICLAKE_CRASH_AT="deleted"), timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    names = os.listdir(fenced.directory)
    assert any(n.endswith(".swap") for n in names) and any(n.endswith(".deleted") for n in names)
    c = lead(fenced.directory, 3)  # the loader completes the swap, whose range spans squatters 11 and 13
    assert fenced.squatter_files() == squatters
    assert log_records(c) == [r for r in fenced.valid if r[0] in KEPT]
    c.close_handlers()


def test_retention_never_deletes_the_leaders_active_segment_nor_a_fenced_leaders_files(root, fenced_topic):
    fenced = fenced_topic({"retention.ms": "1000"})  # every record is from 2024: all expired
    squatters = fenced.squatter_files()
    result = retain(RetentionOptions(root=root, topics=("t",)))
    part = result.partitions[0]
    assert part.error is None
    assert part.deleted == (0, 10, 12) and part.log_start_offset == 14 and part.active_kept
    assert fenced.squatter_files() == squatters  # 15, last by name, is not the active segment
    assert filenames.log_file(fenced.directory, 14).exists()
    assert fenced.leader.refresh()
    assert log_records(fenced.leader) == [r for r in fenced.valid if r[0] == 14]
    fenced.leader.append(build_batch([Record(0, BASE_TS, b"k", b"b15")]), leader_epoch=2)  # its segment is whole
    assert [r[0] for r in log_records(fenced.leader)] == [14, 15]
