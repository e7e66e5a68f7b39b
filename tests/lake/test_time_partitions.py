"""Time-partitioned append tables: `--partition-by hour` puts each record under the UTC date and
hour of its timestamp, and a Delta reader's partition filter returns exactly those records."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pyarrow.compute as pc
import pytest

from topiclake.lake.runs.backfill import BackfillOptions, backfill
from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.table.schema import parse_partition_by

from tests.support.lake import BASE_TS, read_table

HOUR_MS = 3_600_000


def test_hourly_table_partitions_by_date_and_hour(spark, root, topic_writer):
    w = topic_writer("clicks")
    # 23:30 on April 30th, then 00:10, 00:50 and 02:00 on May 1st (UTC)
    stamps = [BASE_TS - HOUR_MS // 2, BASE_TS + 600_000, BASE_TS + 3_000_000, BASE_TS + 2 * HOUR_MS]
    for i, ts in enumerate(stamps):
        w.produce(0, [f"v{i}".encode()], timestamp=ts)
    uri = root / "tables" / "clicks"

    ingest(spark, IngestOptions(topics=("clicks",), root=root, partition_by=parse_partition_by("hour")))

    table, data = read_table(uri)
    assert table.metadata().partition_columns == ["record_date", "record_hour"]
    got = sorted((r["offset"], r["record_date"], r["record_hour"]) for r in data.to_pylist())
    assert got == [(0, dt.date(2024, 4, 30), 23), (1, dt.date(2024, 5, 1), 0),
                   (2, dt.date(2024, 5, 1), 0), (3, dt.date(2024, 5, 1), 2)]
    # each file sits in its hive-style directory, one per (date, hour)
    dirs = sorted({p.rsplit("/", 1)[0] for p in table.file_uris()})
    assert [d.split("/tables/clicks/")[1] for d in dirs] == [
        "record_date=2024-04-30/record_hour=23", "record_date=2024-05-01/record_hour=0",
        "record_date=2024-05-01/record_hour=2"]
    # Spark prunes by the partition columns and reads the right rows back
    spark_rows = spark.read.format("delta").load(str(uri)).where("record_date = '2024-05-01' AND record_hour = 0")
    assert sorted(r["offset"] for r in spark_rows.collect()) == [1, 2]

    # a backfill of a range that spans two hours rewrites it into the same directories, exactly once
    before = sorted((r["offset"], r["record_date"], r["record_hour"]) for r in data.to_pylist())
    backfill(spark, BackfillOptions(root=root, table="clicks", topic="clicks", partition=0, from_offset=0,
                                    to_offset=3))
    table, data = read_table(uri)
    assert sorted((r["offset"], r["record_date"], r["record_hour"]) for r in data.to_pylist()) == before

    w.produce(0, [b"late"], timestamp=BASE_TS + 2 * HOUR_MS + 1)  # a later run keeps the table's partitioning
    ingest(spark, IngestOptions(topics=("clicks",), root=root))  # default day: the table keeps its own
    table, data = read_table(uri)
    assert table.metadata().partition_columns == ["record_date", "record_hour"]
    assert data.filter(pc.equal(data["offset"], 4))["record_hour"].to_pylist() == [2]


def test_daily_is_the_default_and_none_is_unpartitioned():
    assert parse_partition_by("day") == ("record_date",)
    assert parse_partition_by("record_date") == ("record_date",)
    assert parse_partition_by("none") == ()
    assert parse_partition_by("hour") == ("record_date", "record_hour")


@pytest.mark.parametrize("spec", ["record_hour", "minute", "record_hour,record_date", "../x"])
def test_bad_partitioning_is_refused(spec):
    with pytest.raises(ValueError, match="partition"):
        parse_partition_by(spec)


def test_cli_refuses_bad_partitioning_in_one_line(root, topic_writer):
    topic_writer("j").produce(0, [b"a"])
    done = subprocess.run([sys.executable, "-m", "topiclake.cli", "ingest", "--topic", "j", "--data", str(root),
                           "--partition-by", "minute"], capture_output=True, text=True, timeout=120)
    err = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(err) == 1, done.stderr
    assert "--partition-by minute" in err[0] and "hour" in err[0]
    assert not (root / "tables" / "j").exists()
