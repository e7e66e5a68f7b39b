"""Maintenance changes in a partition directory a cluster wrote: only segments of the log, never
the current leader's active one, never a fenced leader's file, nothing a takeover in progress has
not decided."""

from __future__ import annotations

import pytest

from topiclake.segments import filenames
from topiclake.segments.leader_fence import PartitionFence
from topiclake.segments.maintenance import MaintenanceError, delete_segments

from .fenced_partition import build


@pytest.fixture
def fenced(tmp_path):
    partition = build(tmp_path / "t-0")
    yield partition
    partition.close()


def test_a_fenced_leaders_file_is_never_deleted(fenced):
    with pytest.raises(MaintenanceError, match="segment 11 .* is not part of the log .*fenced leader.*leave it alone"):
        delete_segments(fenced.directory, [0, 10, 11], 12)
    assert filenames.log_file(fenced.directory, 11).exists() and filenames.log_file(fenced.directory, 0).exists()


def test_the_active_segment_is_the_leaders_not_the_last_file_by_name(fenced):
    with pytest.raises(MaintenanceError, match="segment 14 is the active segment"):
        delete_segments(fenced.directory, [0, 10, 12, 14], 15)
    assert delete_segments(fenced.directory, [0, 10, 12], 14) == 14
    assert sorted(p.base_offset for n in fenced.directory.iterdir()
                  if (p := filenames.parse_name(n.name)) and p.kind == ".log" and not p.transient) == [11, 13, 14, 15]


def test_nothing_a_takeover_in_progress_has_not_decided_is_changed(fenced):
    PartitionFence(fenced.directory).begin_takeover(3)
    with pytest.raises(MaintenanceError, match="segment 10 .*undecided"):
        delete_segments(fenced.directory, [10], 12)
    with pytest.raises(MaintenanceError, match="segment 0 is the active segment"):
        delete_segments(fenced.directory, [0], 10)  # the last decided segment is treated as active
