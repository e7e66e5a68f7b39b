"""Benchmark: OPTIMIZE (small-file compaction) of a topic table of 1,000 small files through
delta-spark on the Spark master, as `topiclake retain --optimize` runs it, against delta-rs's
`DeltaTable.optimize.compact()` in one process (what the job did before), over two identical
copies of the same table, in one run.

The table: the lake's columns (topic, partition, offset, timestamp, key, value 100 bytes, ...),
partitioned by record_date (one date), 1,000 files of --rows-per-file rows each, committed as one
Delta commit. "ratio" = delta-rs seconds / delta-spark seconds (> 1: delta-spark is faster). The
delta-spark figure is taken in a running session (its start, reported apart, is paid once per
maintenance run whatever the table count).

    python bench/optimize.py [--files 1000] [--rows-per-file 1000] [--master local[2]]

The last line is one JSON object with every figure measured.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, Schema as DeltaSchema
from deltalake.transaction import AddAction, CommitProperties, create_table_with_add_actions

from topiclake.lake.runs.table_maintenance import optimize
from topiclake.lake.table.files import file_stats
from topiclake.lake.table.schema import table_schema


def small_files_table(uri: Path, files: int, rows: int) -> int:
    """A Delta table of `files` Parquet files (one record_date), committed at once; its bytes."""
    schema = table_schema(("record_date",))
    data_schema = pa.schema([f for f in schema if f.name != "record_date"])
    directory = uri / "record_date=2024-05-01"
    directory.mkdir(parents=True)
    adds, total = [], 0
    value = b"v" * 100
    for n in range(files):
        first = n * rows
        part = pa.table({
            "topic": pa.array(["bench"] * rows), "partition": pa.array([0] * rows, pa.int32()),
            "offset": pa.array(range(first, first + rows), pa.int64()),
            "timestamp": pa.array([1_714_521_600_000_000 + i for i in range(rows)], pa.timestamp("us", "UTC")),
            "timestamp_type": pa.array([0] * rows, pa.int8()),
            "key": pa.array([f"k{first + i:015d}".encode() for i in range(rows)], pa.binary()),
            "value": pa.array([value] * rows, pa.binary()),
            "headers": pa.array([[]] * rows, data_schema.field("headers").type),
            "ingested_at": pa.array([1_714_521_600_000_000] * rows, pa.timestamp("us", "UTC")),
        }, schema=data_schema)
        name = f"record_date=2024-05-01/part-{n:05d}.snappy.parquet"
        pq.write_table(part, uri / name, compression="snappy")
        size = (uri / name).stat().st_size
        total += size
        adds.append(AddAction(name, size, {"record_date": "2024-05-01"}, int(time.time() * 1000), True,
                              file_stats(part)))
    create_table_with_add_actions(str(uri), DeltaSchema.from_arrow(schema), adds, mode="error",
                                  partition_by=["record_date"], commit_properties=CommitProperties())
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--rows-per-file", type=int, default=1000)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with tempfile.TemporaryDirectory(prefix="topiclake-bench-optimize-") as tmp:
        spark_copy, rs_copy = Path(tmp) / "spark", Path(tmp) / "rs"
        started = time.perf_counter()
        size = small_files_table(spark_copy, args.files, args.rows_per_file)
        shutil.copytree(spark_copy, rs_copy)
        print(f"table: {args.files} files, {args.files * args.rows_per_file:,} rows, {size / 1e6:.1f} MB "
              f"(made in {time.perf_counter() - started:.1f} s)", flush=True)

        started = time.perf_counter()
        rs_metrics = DeltaTable(str(rs_copy)).optimize.compact()
        rs_seconds = time.perf_counter() - started
        print(f"delta-rs optimize.compact: {rs_seconds:.2f} s ({rs_metrics['numFilesRemoved']} files -> "
              f"{rs_metrics['numFilesAdded']})", flush=True)

        from topiclake.lake.spark.session import get_session, set_spark_log, stop_session

        set_spark_log(verbose=False)
        started = time.perf_counter()
        spark = get_session("bench-optimize", master=args.master, conf={"spark.ui.showConsoleProgress": "false"},
                            long_queries=True)  # as topiclake retain starts it
        spark.range(1).collect()
        session_seconds = time.perf_counter() - started
        started = time.perf_counter()
        spark_metrics = optimize(spark, str(spark_copy), None)
        spark_seconds = time.perf_counter() - started
        stop_session(spark)
        print(f"delta-spark OPTIMIZE on {args.master}: {spark_seconds:.2f} s ({spark_metrics['numFilesRemoved']} "
              f"files -> {spark_metrics['numFilesAdded']}); session start {session_seconds:.1f} s", flush=True)
        rows = [DeltaTable(str(c)).to_pyarrow_dataset().count_rows() for c in (spark_copy, rs_copy)]
        assert rows == [args.files * args.rows_per_file] * 2, rows
    figures = {"files": args.files, "rows": args.files * args.rows_per_file, "master": args.master,
               "delta_rs_s": round(rs_seconds, 3), "delta_spark_s": round(spark_seconds, 3),
               "delta_spark_session_start_s": round(session_seconds, 3),
               "ratio": round(rs_seconds / spark_seconds, 3)}
    print(json.dumps(figures))


if __name__ == "__main__":
    sys.exit(main())
