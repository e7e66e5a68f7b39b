"""Benchmark: ad-hoc SQL on the standing SQL endpoint (`topiclake sql-server`, Spark Connect)
against `topiclake sql` starting its own Spark, in one run, over the same demo table.

The demo table: --rows records of the lake's columns in a Delta table under a fresh root (written
by delta-rs). Measured, each a whole new `topiclake sql` process as a user or Airflow runs it:
- warm: `topiclake sql "<query>"` while the server runs (its JVM already warm), --runs times;
- cold: `topiclake sql --endpoint none "<query>"` (a Spark of its own), --cold-runs times;
and, inside one Connect client, the query alone (--runs times), which is what a BI tool holding
a connection sees. "ratio" = cold p50 / warm p50; the target of issue 31 is a warm p50 < 1 s.

    python bench/sql_endpoint.py [--rows 1000000] [--runs 15] [--cold-runs 3] [--master local[2]]

The last line is one JSON object with every figure measured.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

QUERY = "SELECT partition, count(*) AS n, max(offset) AS last FROM demo GROUP BY partition ORDER BY partition"
TOPICLAKE = [sys.executable, "-m", "topiclake.cli"]


def demo_table(root: Path, rows: int) -> None:
    write_deltalake(str(root / "tables" / "demo"), pa.table({
        "topic": pa.array(["demo"] * rows), "partition": pa.array([i % 4 for i in range(rows)], pa.int32()),
        "offset": pa.array(range(rows), pa.int64()), "value": pa.array([b"v" * 100] * rows, pa.binary())}))


def timed_process(args: list[str]) -> float:
    started = time.monotonic()
    done = subprocess.run([*TOPICLAKE, *args], capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"bench: {' '.join(args)} failed: {done.stderr.strip()}")
    return elapsed


def client_query_seconds(url: str, runs: int) -> list[float]:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(url).getOrCreate()
    spark.sql(QUERY).toArrow()  # the first plan of the query in this session
    seconds = []
    for _ in range(runs):
        started = time.monotonic()
        spark.sql(QUERY).toArrow()
        seconds.append(time.monotonic() - started)
    spark.stop()
    return seconds


def p50(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--cold-runs", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--port", type=int, default=15202)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-sql-") as tmp:
        root = Path(tmp) / "root"
        demo_table(root, args.rows)
        data = ["--data", str(root)]
        cold = [timed_process(["sql", *data, "--endpoint", "none", "--master", args.master, QUERY])
                for _ in range(args.cold_runs)]
        log = (Path(tmp) / "server.log").open("w+")
        server_started = time.monotonic()
        server = subprocess.Popen([*TOPICLAKE, "sql-server", *data, "--port", str(args.port),
                                   "--master", args.master], stdout=log, stderr=subprocess.STDOUT)
        try:
            while "sql-server: serving" not in Path(log.name).read_text():
                if server.poll() is not None:
                    sys.exit(f"bench: the SQL server stopped: {Path(log.name).read_text()[-2000:]}")
                time.sleep(0.2)
            server_start = time.monotonic() - server_started
            first = timed_process(["sql", *data, QUERY])
            warm = [timed_process(["sql", *data, QUERY]) for _ in range(args.runs)]
            in_client = client_query_seconds(f"sc://127.0.0.1:{args.port}", args.runs)
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(60)
    figures = {
        "rows": args.rows, "master": args.master, "load": round(os.getloadavg()[0], 1),
        "server_start_s": round(server_start, 2), "first_query_process_s": round(first, 3),
        "warm_process_p50_s": p50(warm), "warm_process_max_s": round(max(warm), 3),
        "query_in_client_p50_s": p50(in_client), "cold_process_p50_s": p50(cold),
        "ratio": round(statistics.median(cold) / statistics.median(warm), 1),
        "target_warm_p50_s": 1.0,
    }
    print(f"warm `topiclake sql` on the server: p50 {figures['warm_process_p50_s']} s per process "
          f"(the query alone in a Connect client: p50 {figures['query_in_client_p50_s']} s); "
          f"cold, its own Spark: p50 {figures['cold_process_p50_s']} s; ratio {figures['ratio']}x")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
