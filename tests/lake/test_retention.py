"""Segment retention and table maintenance jobs (no Spark needed)."""

from __future__ import annotations

import datetime as dt
import json
import struct

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from topiclake.lake.runs.retention import RetentionOptions, format_summary, retain
from topiclake.lake.runs.table_maintenance import TableMaintenanceOptions
from topiclake.lake.table import delta
from topiclake.segments.batch import Record, build_batch
from topiclake.segments.errors import OffsetOutOfRangeError
from topiclake.segments.log import Log
from topiclake.segments.storage import StorageLayout, TopicRegistry
from tests.support.retention_logs import DAY, T0, make_log, bases


def test_retention_ms_deletes_old_segments_and_moves_log_start(root):
    directory = make_log(root, config={"retention.ms": str(DAY)})
    before = bases(directory)
    now = T0 + 3 * DAY + DAY // 2  # segments whose newest record is older than 2.5 days go
    result = retain(RetentionOptions(root=root, now_ms=now))
    part = result.partitions[0]
    assert part.deleted and part.deleted == tuple(before[: len(part.deleted)]), format_summary(result)
    assert bases(directory) == before[len(part.deleted):]
    log = Log.open(directory)
    try:
        assert log.log_start_offset == part.log_start_offset == bases(directory)[0]
        with pytest.raises(OffsetOutOfRangeError):
            log.read(0, 100)
    finally:
        log.close()
    # far in the future everything closed goes; the active segment stays with the broker
    result = retain(RetentionOptions(root=root, now_ms=now + 100 * DAY))
    assert result.partitions[0].active_kept and bases(directory) == [before[-1]]
    assert "active segment kept" in format_summary(result)


def test_retention_bytes_keeps_the_limit(root):
    directory = make_log(root, config={"retention.bytes": "1500", "retention.ms": "-1"})
    sizes = {b: (directory / f"{b:020d}.log").stat().st_size for b in bases(directory)}
    retain(RetentionOptions(root=root, now_ms=T0))
    assert sum((directory / f"{b:020d}.log").stat().st_size for b in bases(directory)) >= 1500
    assert len(bases(directory)) < len(sizes)


def test_dry_run_changes_nothing(root):
    directory = make_log(root, config={"retention.ms": "1"})
    before = bases(directory)
    result = retain(RetentionOptions(root=root, now_ms=T0 + 100 * DAY, dry_run=True))
    assert result.partitions[0].deleted and bases(directory) == before


def _offset_commit(group: str, topic: str, partition: int, offset: int) -> Record:
    def s(x: str) -> bytes:
        return struct.pack(">h", len(x)) + x.encode()
    key = struct.pack(">h", 1) + s(group) + s(topic) + struct.pack(">i", partition)
    value = struct.pack(">hqi", 3, offset, -1) + s("") + struct.pack(">q", T0)
    return Record(0, T0, key, value, ())


def test_protected_groups_hold_segments_back(root):
    directory = make_log(root, config={"retention.ms": "1"})
    before = bases(directory)
    layout = StorageLayout(root)
    # an ingest group: its offset is a Delta txn version in a table
    table_uri = str(layout.table_dir("events"))
    schema = pa.schema([("offset", pa.int64())])
    delta.commit(table_uri, group="lake", actions=[], offsets=[delta.OffsetUpdate("events", 0, None, before[3])],
                 schema=schema, partition_by=[], metadata={})
    # a broker group: its offset is an OffsetCommit record in __consumer_offsets
    TopicRegistry(layout).create("__consumer_offsets", 1, {"cleanup.policy": "compact"})
    offsets_log = Log.open(layout.log_dir("__consumer_offsets", 0))
    offsets_log.append(build_batch([_offset_commit("app", "events", 0, before[5])]))
    offsets_log.close()

    result = retain(RetentionOptions(root=root, topics=("events",), now_ms=T0 + 100 * DAY,
                                     protect_groups=("lake", "app")))
    part = result.partitions[0]
    assert bases(directory) == before[3:], format_summary(result)
    assert part.plan.blocking_groups == ("app", "lake") or part.plan.blocking_groups == ("lake",)
    assert "held back" in format_summary(result) and "lake at" in format_summary(result)
    retain(RetentionOptions(root=root, topics=("events",), now_ms=T0 + 100 * DAY, protect_groups=("app",)))
    assert bases(directory) == before[5:]


def test_table_retention_optimize_and_vacuum_run_through_delta_spark(spark, root):
    layout = StorageLayout(root)
    uri = str(layout.table_dir("events"))
    for day in range(5):
        for _ in range(2):  # two small files per date
            write_deltalake(uri, pa.table({"offset": pa.array([day], pa.int64()),
                                           "record_date": pa.array([dt.date(2024, 5, 1 + day)])}),
                            mode="append", partition_by=["record_date"])
    now = int(dt.datetime(2024, 5, 6, tzinfo=dt.timezone.utc).timestamp() * 1000)
    result = retain(RetentionOptions(root=root, now_ms=now, tables=TableMaintenanceOptions(
        retention_days=3, optimize=True, vacuum_hours=0)))
    outcome = result.tables[0]
    assert outcome.error is None and outcome.removed_files == 4 and outcome.cutoff == "2024-05-03"
    table = DeltaTable(uri)
    rows = table.to_pyarrow_table().column("offset").to_pylist()
    assert sorted(rows) == [2, 2, 3, 3, 4, 4]
    assert len(table.file_uris()) == 3  # optimize: one file per remaining date
    assert outcome.vacuumed > 0
    history = {h["operation"]: h for h in table.history(5)}
    assert list(history) == ["VACUUM END", "VACUUM START", "OPTIMIZE", "DELETE", "WRITE"]
    assert json.loads(history["DELETE"]["userMetadata"])["operation"] == "table-retention"
    assert "< 2024-05-03" in history["DELETE"]["operationParameters"]["predicate"]
    assert history["VACUUM END"]["operationMetrics"]["numDeletedFiles"] == str(outcome.vacuumed)
