"""Offset coverage: held ranges and the reason for every gap."""

from __future__ import annotations

import time

from deltalake.transaction import RemoveAction

from topiclake.lake.runs.coverage import OffsetRange, coverage, format_coverage
from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.table import delta
from topiclake.segments.batch import Record, build_batch
from topiclake.segments.checkpoints import LOG_START_OFFSET_CHECKPOINT, write_partition_offset

from tests.support.lake import BASE_TS

GROUP = "topiclake-ingest-mixed"


def test_every_gap_has_a_reason(spark, root, topic_writer):
    w = topic_writer("mixed", partitions=2)
    # partition 0: compaction left offsets 0, 2, 5 of a batch spanning 0-5; then a txn story
    w.append_bytes(0, build_batch([Record(o, BASE_TS, b"k", b"v") for o in (0, 2, 5)]))
    w.next_offset[0] = 6
    w.produce(0, [b"t"], producer_id=3, transactional=True)  # 6, aborted
    w.end_txn(0, 3, commit=False)  # 7
    w.produce(0, [b"a"])  # 8
    # partition 1: the first run reads offset 0, then retention deletes offsets 0-1
    w.produce(1, [b"x", b"y"])
    w.roll(1)
    w.produce(1, [b"z"])  # 2
    ingest(spark, IngestOptions(topics=("mixed",), root=root, ending_offsets='{"mixed": {"1": 1}}'))
    first_segment = w.layout.log_dir("mixed", 1) / "00000000000000000000.log"
    first_segment.unlink()
    write_partition_offset(first_segment.parent, LOG_START_OFFSET_CHECKPOINT, "mixed", 1, 2)
    ingest(spark, IngestOptions(topics=("mixed",), root=root, allow_data_loss=True))

    report = coverage(spark, root, "mixed", "mixed", [0, 1], group=GROUP)
    p0, p1 = report
    assert p0.committed == 9 and p0.held == (OffsetRange(0, 1), OffsetRange(2, 3), OffsetRange(5, 6),
                                             OffsetRange(8, 9))
    assert p0.gaps == (OffsetRange(1, 2, "compacted"), OffsetRange(3, 5, "compacted"),
                       OffsetRange(6, 7, "aborted"), OffsetRange(7, 8, "control"))
    assert p1.held == (OffsetRange(0, 1), OffsetRange(2, 3)) and p1.gaps == (OffsetRange(1, 2, "retention"),)
    assert p0.missing == () and "gap [6, 7) aborted" in format_coverage(report)

    # a table that lost a file: the log still has those records, so they are reported missing
    table = delta.load_table(str(root / "tables" / "mixed"))
    files = [f for f in delta.active_files(table).to_pylist() if f["min.partition"] == 1]
    delta.commit(str(root / "tables" / "mixed"), group="someone", offsets=[], schema=None,
                 partition_by=["record_date"], metadata={},
                 actions=[RemoveAction(f["path"], True, int(time.time() * 1000), f["size_bytes"],
                                       {"record_date": f["partition.record_date"].isoformat()}) for f in files])
    p1 = coverage(spark, root, "mixed", "mixed", [1], group=GROUP)[0]
    assert p1.gaps == (OffsetRange(0, 2, "retention"), OffsetRange(2, 3, "missing"))
