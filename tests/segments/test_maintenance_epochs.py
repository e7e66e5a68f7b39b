"""Maintenance changes in a partition directory a cluster wrote: only segments of the log, never
the current leader's active one, never a fenced leader's file, nothing a takeover in progress has
not decided."""

from __future__ import annotations

import pytest

from topiclake.segments import filenames
from topiclake.segments.leader_fence import PartitionFence
from topiclake.segments.maintenance import MaintenanceError, delete_segments


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


def test_a_cleaned_group_that_is_only_padding_stays_part_of_a_cluster_log(tmp_path):
    """Compaction that empties a whole group of segments leaves one empty batch where they ended
    (maintenance._span_group). In a cluster partition it carries the epoch owning its offsets, so
    the cleaned segment still counts: the log start does not jump past it."""
    from topiclake.segments.batch import iter_batches
    from topiclake.segments.log import Log
    from topiclake.segments.maintenance import replace_segments

    from tests.segments.segment_logs import make_batch, CONFIG, record_offsets, write_dropping

    directory = tmp_path / "t-0"

    def lead(epoch: int) -> Log:
        fence = PartitionFence(directory)
        log = Log.open(directory, CONFIG, topic="t", partition=0, epochs=fence.begin_takeover(epoch),
                       create_segment=fence.create_segment)
        log.epochs = fence.record_start(epoch, log.log_end_offset)
        log.take_over()
        return log

    log = lead(1)
    for i in range(30):
        log.append(make_batch(2, timestamp=1000 + i), leader_epoch=1)
    bases = [s.base_offset for s in log.segments()]
    old = bases[:3]
    before = record_offsets(log)
    cleaned, kept = write_dropping(directory, old, set(old))  # every record of the group goes
    assert kept == [] and replace_segments(directory, old, [cleaned], CONFIG) == [old[0]]
    [padding] = list(iter_batches(filenames.log_file(directory, old[0]).read_bytes()))
    assert padding.header.records_count == 0 and padding.header.partition_leader_epoch == 1
    log.close_handlers()

    reopened = lead(2)
    assert reopened.log_start_offset == 0 and [s.base_offset for s in reopened.segments()][0] == old[0]
    assert record_offsets(reopened) == [o for o in before if o >= bases[3]]
    reopened.close()
