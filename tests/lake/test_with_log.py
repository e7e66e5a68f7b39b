"""Ingest from a log written by the segment store's own `Log` (real rolls, offset indexes
preallocated while the log is open, the log-start-offset checkpoint of DeleteRecords)."""

from __future__ import annotations

import pytest

from topiclake.lake.errors import DataLossError
from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.table.delta import app_id
from topiclake.segments.batch import Record, build_batch
from topiclake.segments.config import LogConfig
from topiclake.segments.log import Log
from topiclake.segments.storage import StorageLayout, TopicRegistry

from tests.support.lake import BASE_TS, read_table


def test_ingest_from_an_open_log(spark, root):
    layout = StorageLayout(root)
    TopicRegistry(layout).create("live", 1)
    config = LogConfig(segment_bytes=2048, index_interval_bytes=128)
    log = Log.open(layout.log_dir("live", 0), config, topic="live", partition=0, now_ms=BASE_TS)
    try:
        def append(n):
            for i in range(n):
                log.append(build_batch([Record(j, BASE_TS + i, b"k", b"v" * 50) for j in (0, 1)]), now_ms=BASE_TS)
        append(40)  # 80 records over several segments
        assert len(log.segments()) > 3
        options = IngestOptions(topics=("live",), root=root, target_task_bytes=1000)
        ingest(spark, IngestOptions(topics=("live",), root=root, ending_offsets='{"live": {"0": 37}}'))
        ingest(spark, options)  # starts mid-segment, from the (preallocated) offset index
        table, data = read_table(root / "tables" / "live")
        assert sorted(data["offset"].to_pylist()) == list(range(80))
        append(5)
        ingest(spark, options)
        table, data = read_table(root / "tables" / "live")
        assert sorted(data["offset"].to_pylist()) == list(range(90))
        assert table.transaction_version(app_id("topiclake-ingest-live", "live", 0)) == 90

        append(5)  # 90-99, then DeleteRecords up to 95 before they are ingested
        log.advance_log_start_offset(95)
        with pytest.raises(DataLossError, match=r"offsets \[90, 95\)"):
            ingest(spark, options)
    finally:
        log.close()
