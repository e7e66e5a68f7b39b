"""Benchmark: where an ingest's commit happens. One commit of 20 new files and 4 partitions' txn
actions to a topic table that already has 30 commits, as the last step of a new spark-submit
process (as Airflow starts every ingest): through delta-rs (`deltalake`, what jobs/ingest.py does)
against through delta-spark's own transaction in the driver JVM (DeltaLog, OptimisticTransaction),
in one run, alternating. Each process starts the same session (Delta's extension and jars, the
venv's spark-submit); the figure is the commit's own time inside it, and the whole process.

"ratio" = delta-spark commit seconds / delta-rs commit seconds (> 1: delta-rs is faster).

    python bench/commit.py [--repeat 3] [--master local[2]]

The last line is one JSON object with every figure measured.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, os, sys, time
import pyarrow as pa, pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.transaction import AddAction, CommitProperties, Transaction
from topiclake.lake.spark.session import get_session
from topiclake.lake.table import delta_spark

uri, engine, run = sys.argv[1], sys.argv[2], int(sys.argv[3])
spark = get_session("bench-commit")
adds = []
for n in range(20):
    name = f"part-{run}-{engine}-{n}.parquet"
    pq.write_table(pa.table({"offset": pa.array([n], pa.int64())}), f"{uri}/{name}")
    adds.append((name, os.path.getsize(f"{uri}/{name}")))
txns = [(f"g:t:{p}", 1000 * run + p + 10) for p in range(4)]
started = time.perf_counter()
if engine == "delta-rs":
    table = DeltaTable(uri)
    table.create_write_transaction(
        [AddAction(name, size, {}, int(time.time() * 1000), True, '{"numRecords": 1}') for name, size in adds],
        mode="append", schema=table.schema(),
        commit_properties=CommitProperties(app_transactions=[Transaction(a, v) for a, v in txns]))
else:
    jvm = spark._jvm
    txn = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, uri).startTransaction()
    actions = jvm.java.util.ArrayList()
    for name, size in adds:
        actions.add(jvm.org.apache.spark.sql.delta.actions.Action.fromJson(
            delta_spark.add_json(name, size, {}, int(time.time() * 1000), '{"numRecords": 1}')))
    for app, version in txns:
        actions.add(jvm.org.apache.spark.sql.delta.actions.Action.fromJson(json.dumps(
            {"txn": {"appId": app, "version": version, "lastUpdated": int(time.time() * 1000)}})))
    manual_update = getattr(getattr(jvm.org.apache.spark.sql.delta, "DeltaOperations$ManualUpdate$"), "MODULE$")
    txn.commit(jvm.scala.jdk.javaapi.CollectionConverters.asScala(actions).toList(), manual_update)
print("commit_s", time.perf_counter() - started)
spark.stop()
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    submit = str(Path(sys.executable).parent / "spark-submit")
    env = {**os.environ, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
    with tempfile.TemporaryDirectory(prefix="topiclake-bench-commit-") as tmp:
        import pyarrow as pa
        from deltalake import write_deltalake

        uri = Path(tmp) / "table"
        for n in range(30):
            write_deltalake(str(uri), pa.table({"offset": pa.array([n], pa.int64())}), mode="append")
        script = Path(tmp) / "child.py"
        script.write_text(CHILD)
        figures: dict[str, list[float]] = {"delta-rs": [], "delta-spark": []}
        processes: dict[str, list[float]] = {"delta-rs": [], "delta-spark": []}
        for run in range(args.repeat):
            for engine in ("delta-rs", "delta-spark"):
                started = time.perf_counter()
                done = subprocess.run([submit, "--master", args.master, "--conf", "spark.ui.enabled=false",
                                       str(script), str(uri), engine, str(run)],
                                      capture_output=True, text=True, env=env, cwd=REPO)
                processes[engine].append(time.perf_counter() - started)
                if done.returncode != 0:
                    raise SystemExit(f"{engine} run failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
                line = next(x for x in done.stdout.splitlines() if x.startswith("commit_s "))
                figures[engine].append(float(line.split()[1]))
    rs, spark = statistics.median(figures["delta-rs"]), statistics.median(figures["delta-spark"])
    rs_p, spark_p = statistics.median(processes["delta-rs"]), statistics.median(processes["delta-spark"])
    print(f"commit in a new spark-submit process: delta-rs {rs:.2f} s (runs "
          f"{', '.join(f'{s:.2f}' for s in figures['delta-rs'])}; process {rs_p:.1f} s), delta-spark {spark:.2f} s "
          f"(runs {', '.join(f'{s:.2f}' for s in figures['delta-spark'])}; process {spark_p:.1f} s): "
          f"ratio {spark / rs:.1f}", flush=True)
    print(json.dumps({"delta_rs_commit_s": round(rs, 3), "delta_spark_commit_s": round(spark, 3),
                      "delta_rs_process_s": round(rs_p, 2), "delta_spark_process_s": round(spark_p, 2),
                      "ratio": round(spark / rs, 2)}))


if __name__ == "__main__":
    main()
