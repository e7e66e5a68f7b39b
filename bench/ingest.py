"""Benchmark: Kafka segments -> Delta table with topiclake's Spark ingest, as Airflow runs it and
inside a running application, against the path a user would write by hand (a confluent-kafka
consumer fetching from the broker -> pyarrow -> deltalake.write_deltalake), over the same records,
in one run. Three measures (all by default):

--one-shot   Both paths as whole new processes from cold, as a scheduler starts them:
             `spark-submit jobs/ingest.py` (.venv/bin/spark-submit, local[2]) against a new Python
             process running the hand-written consumer (the broker it reads from is already up).
             "ratio_one_shot" = hand-written seconds / topiclake seconds. Target >= 2.5.
--increment  A new `spark-submit jobs/ingest.py` that ingests 20,000 new records (the table holds
             the rest already), against a new spark-submit process that only starts a
             SparkSession with the same master and settings and stops it.
             "increment_vs_bare_start" = ingest seconds / bare seconds. Target <= 1.6.
             Also the bare start with Delta's SQL extension and catalog, as every topiclake
             session has them ("delta_session_vs_bare_start": what Delta adds to a start).
--warm       Inside one running application (the session started, a first ingest done): a second
             ingest of the records into a new table against the hand-written path in this process
             ("ratio_warm", target >= 10), and against the Parquet-write limit: pyarrow.parquet
             writing the same rows, with the same settings, into the same files, in 2 processes
             ("of_parquet_limit", target >= 0.4).
--spark-kafka  The ingest a Spark user would write instead: Spark's own Kafka source
             (spark.read.format("kafka"), earliest to latest) appending to a Delta table with
             delta-spark, partitioned by record date, as a new `spark-submit --jars` process (the
             jars bin/fetch-peers fetched: spark-sql-kafka at the venv's Spark version, and
             delta-spark's), timed reading the same records once from Apache Kafka (one KRaft
             node from the fetched jars, filled with the same records by a confluent-kafka
             producer) and once from the topiclake broker, against `spark-submit
             jobs/ingest.py` in the same run. "ratio_spark_kafka_source_from_kafka" and
             "..._from_topiclake" = their seconds / topiclake's. Target >= 3.
--values avro  Typed tables: the same record count with 100-byte Avro values in Confluent's wire
             format, ingested into typed columns, against the raw-bytes ingest in the same
             application (target: >= 50% of the raw rate).

The records: 16-byte keys, 100-byte JSON-like values, batches of 1000, no compression by default,
written once as real segment files through the segment Log (indexes and all); the broker serves
those files to the consumer. Both paths write the same table layout (the lake's columns,
partitioned by record_date) and commit offsets nowhere else (--bootstrap none: the hand-written
path has no exactly-once; that only flatters it). The machine may be shared: every ratio is of
two measures taken back to back in this run.

    python bench/ingest.py                          # all four, 3 million records
    python bench/ingest.py --one-shot --records 1000000

The last line is one JSON object with every figure measured.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow as pa
import pyarrow.compute as pc

from _broker import create_topic, running_broker
from _data import RECORDS_PER_BATCH, template_batch
from _kafka import apache_kafka, fetch_peers
from topiclake.segments.config import LogConfig
from topiclake.segments.log import Log
from topiclake.segments.storage import StorageLayout, TopicRegistry

REPO = Path(__file__).resolve().parents[1]
TOPIC = "bench"
# Distinct batches the records are made of: enough that a compressor's window never sees a
# value twice (real events do not repeat verbatim), few enough to write 3 M records quickly.
TEMPLATES = 64
SEGMENT_BYTES = 64 * 1024 * 1024
INCREMENT = 20_000
BARE_SESSION = """
from pyspark.sql import SparkSession
SparkSession.builder.appName("bare").getOrCreate().stop()
"""
# What every topiclake session adds (topiclake.lake.spark.jars.DELTA_CONF); the venv's spark-submit
# has Delta's jars on the class path for both.
BARE_DELTA_SESSION = """
from pyspark.sql import SparkSession
SparkSession.builder.appName("bare-delta").config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension") \\
    .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog").getOrCreate().stop()
"""
# What a Spark user writes to land a topic in Delta: Spark's Kafka source, delta-spark's writer.
SPARK_KAFKA_INGEST = """
import sys
from pyspark.sql import SparkSession, functions as F

bootstrap, topic, table = sys.argv[1:4]
spark = SparkSession.builder.appName("spark-kafka-source-ingest").getOrCreate()
records = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
           .option("startingOffsets", "earliest").option("endingOffsets", "latest").option("includeHeaders", "true")
           .load())
(records.withColumn("record_date", F.to_date("timestamp"))
 .write.format("delta").mode("append").partitionBy("record_date").save(table))
spark.stop()
"""


# ------------------------------------------------------------------------------------- the data

def write_topic(root: Path, records: int, partitions: int, codec: str, *, seed: int = 0) -> int:
    """Append `records` records to the topic through the Log (offsets, indexes, a clean close)."""
    templates = [template_batch(seed + i, codec, base_timestamp=1_714_521_600_000, spread_ms=3_600_000)
                 for i in range(TEMPLATES)]
    return append_batches(root, TOPIC, templates, records, partitions)


def append_batches(root: Path, topic: str, templates: list[bytes], records: int, partitions: int) -> int:
    """`records` records of the template batches, round-robin over the partitions, through the Log."""
    layout = StorageLayout(root)
    if not TopicRegistry(layout).exists(topic):
        TopicRegistry(layout).create(topic, partitions, {"segment.bytes": str(SEGMENT_BYTES)})
    config = LogConfig.from_properties({"segment.bytes": str(SEGMENT_BYTES)})
    batches = records // RECORDS_PER_BATCH
    written = 0
    for p in range(partitions):
        log = Log.open(layout.log_dir(topic, p), config, topic=topic, partition=p)
        mine = [i for i in range(batches) if i % partitions == p]
        for start in range(0, len(mine), 64):
            log.append(bytearray(b"".join(templates[i % len(templates)] for i in mine[start:start + 64])),
                       assign_offsets=True)
            written += len(mine[start:start + 64]) * RECORDS_PER_BATCH
        log.close()
    return written


# ------------------------------------------------------------------------- new processes (cold)

def spark_submit() -> str:
    """The venv's spark-submit (bin/_env.sh's wrapper: this venv's pyspark, Python and JVM options)."""
    path = Path(sys.executable).parent / "spark-submit"
    if not path.is_file():
        raise SystemExit(f"{path} not found: run bin/test or bin/quickstart once to set up .venv")
    return str(path)


def timed(command: list[str], **kwargs) -> tuple[float, str]:
    env = {**os.environ, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env, **kwargs)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:3])} ... failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, done.stdout


def ingest_process(root: Path, table: str, master: str) -> tuple[float, int]:
    """`spark-submit jobs/ingest.py` as a new process: (seconds, records it says it ingested)."""
    seconds, out = timed([spark_submit(), "--master", master, "jobs/ingest.py", "--topic", TOPIC, "--data", str(root),
                          "--table", table, "--bootstrap", "none"])
    # the summary "ingest run <id>: <n> records, ..." (progress lines "... tasks done" may come first)
    summary = next(m for m in map(re.compile(r"^ingest run \S+: (\d+) records").match, out.splitlines()) if m)
    return seconds, int(summary.group(1))


def spark_kafka_process(bootstrap: str, table: Path, master: str, script: Path, jars: str) -> float:
    """SPARK_KAFKA_INGEST as a new spark-submit; the seconds it took (the rows are counted apart)."""
    try:
        from topiclake.lake.spark.jars import DELTA_CONF  # Delta's SQL extension and catalog (issue 19)
    except ImportError:
        raise SystemExit("--spark-kafka needs delta-spark in the venv (topiclake.lake.spark.jars)") from None

    conf = [a for k, v in {**DELTA_CONF, "spark.ui.showConsoleProgress": "false"}.items()
            for a in ("--conf", f"{k}={v}")]
    return timed([spark_submit(), "--master", master, "--jars", jars, *conf, str(script), bootstrap, TOPIC,
                  str(table)])[0]


def delta_rows(table: Path) -> int:
    """The rows of a Delta table's current snapshot, from its commit statistics."""
    from deltalake import DeltaTable

    return sum(DeltaTable(str(table)).get_add_actions(flatten=True).column("num_records").to_pylist())


def bare_session_process(master: str, script: Path) -> float:
    return timed([spark_submit(), "--master", master, "--conf", "spark.ui.showConsoleProgress=false", str(script)])[0]


def hand_written_process(bootstrap: str, uri: str, partitions: int, total: int, chunk: int) -> tuple[float, int]:
    seconds, out = timed([sys.executable, __file__, "--hand-written-child", json.dumps(
        {"bootstrap": bootstrap, "uri": uri, "partitions": partitions, "total": total, "chunk": chunk})])
    return seconds, int(out.split()[-1])


# --------------------------------------------------------------------------- the hand-written path

def run_hand_written(bootstrap: str, uri: str, partitions: int, total: int, chunk: int) -> tuple[float, int]:
    """What a user would write: consume everything, build Arrow columns, append to Delta."""
    from confluent_kafka import Consumer, TopicPartition
    from deltalake import write_deltalake

    started = time.perf_counter()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-hand-written", "enable.auto.commit": False,
                         "fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 16 * 1024 * 1024,
                         "queued.max.messages.kbytes": 256 * 1024})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    columns: dict[str, list] = {k: [] for k in ("partition", "offset", "timestamp", "timestamp_type", "key", "value",
                                                 "headers")}
    done = 0
    while done < total:
        for m in consumer.consume(num_messages=10_000, timeout=1.0):
            if m.error() is not None:
                raise RuntimeError(str(m.error()))
            ts_type, ts = m.timestamp()
            columns["partition"].append(m.partition())
            columns["offset"].append(m.offset())
            columns["timestamp"].append(ts)
            columns["timestamp_type"].append(ts_type - 1)
            columns["key"].append(m.key())
            columns["value"].append(m.value())
            columns["headers"].append([{"key": k, "value": v} for k, v in m.headers() or ()])
            done += 1
        if len(columns["offset"]) >= chunk or (done >= total and columns["offset"]):
            write_deltalake(uri, _to_arrow(columns), mode="append", partition_by=["record_date"])
            columns = {k: [] for k in columns}
    consumer.close()
    return time.perf_counter() - started, done


def _to_arrow(columns: dict[str, list]) -> pa.Table:
    n = len(columns["offset"])
    timestamp = pa.array(columns["timestamp"], pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    return pa.table({
        "topic": pa.array([TOPIC] * n, pa.string()),
        "partition": pa.array(columns["partition"], pa.int32()),
        "offset": pa.array(columns["offset"], pa.int64()),
        "timestamp": timestamp.cast(pa.timestamp("us", tz="UTC")),
        "timestamp_type": pa.array(columns["timestamp_type"], pa.int8()),
        "key": pa.array(columns["key"], pa.binary()),
        "value": pa.array(columns["value"], pa.binary()),
        "headers": pa.array(columns["headers"], pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        "ingested_at": pa.array([int(time.time() * 1e6)] * n, pa.timestamp("us", tz="UTC")),
        "record_date": pc.cast(timestamp, pa.date32()),
    })


# -------------------------------------------------------------------------- inside an application

def run_warm(root: Path, master: str) -> dict:
    """Two ingests of the same records into two new tables on one started session; the second is
    the steady state of a running application. Returns its seconds, records and planned tasks."""
    from topiclake.lake.runs.ingest import IngestOptions, ingest
    from topiclake.lake.spark.jvm import driver_java_options
    from topiclake.lake.spark.session import get_session

    spark = get_session("bench-ingest", master=master, conf={"spark.ui.showConsoleProgress": "false",
                                                             "spark.driver.extraJavaOptions": driver_java_options()})
    runs = []
    for table in ("warm-first-run", "warm-steady-state"):
        started = time.perf_counter()
        result = ingest(spark, IngestOptions(topics=(TOPIC,), root=root, table=table, bootstrap="none"))
        runs.append((time.perf_counter() - started, result))
    spark.stop()
    (first_s, first), (seconds, steady) = runs
    tasks = [t for table in steady.tables for p in table.partitions for t in p.plan.tasks]
    return {"first_run_seconds": first_s, "seconds": seconds, "records": steady.records, "tasks": tasks}


def parquet_limit(tasks: list, processes: int) -> tuple[float, int]:
    """pyarrow.parquet writing the rows of the ingest's tasks with the ingest's own settings, one
    file per task as the ingest writes them, the tasks shared out over `processes` processes that
    run at once. Decoding happens before the clock starts. (seconds of the slowest process, rows)"""
    context = multiprocessing.get_context("fork")
    start, results = context.Barrier(processes + 1), context.Queue()
    with tempfile.TemporaryDirectory(prefix="topiclake-bench-parquet-") as out:
        workers = [context.Process(target=_write_share, args=(tasks[i::processes], out, start, results))
                   for i in range(processes)]
        for w in workers:
            w.start()
        start.wait()  # every process decoded its share: go
        done = [results.get() for _ in workers]
        for w in workers:
            w.join()
    return max(seconds for seconds, _rows in done), sum(rows for _seconds, rows in done)


def _write_share(tasks: list, out: str, start, results) -> None:
    from topiclake.lake.log.decode import read_task
    from topiclake.lake.runs.tasks import TaskWriter
    from topiclake.lake.table.files import write_parquet

    writer = TaskWriter(run_id="limit", ingested_at_us=int(time.time() * 1e6), partition_by={})
    tables = []
    for task in tasks:
        plain = {"table_uri": task.table_uri, "topic": task.topic, "partition": task.partition, "path": task.path,
                 "inode": task.inode, "start": task.start, "end": task.end, "min_offset": task.min_offset,
                 "max_offset": task.max_offset, "aborted": []}
        tables.append(writer._table_columns(plain, read_task(plain)[0]))
    start.wait()
    started = time.perf_counter()
    for i, table in enumerate(tables):
        write_parquet(table, f"{out}/{os.getpid()}-{i}.parquet", compression=writer.compression)
    results.put((time.perf_counter() - started, sum(t.num_rows for t in tables)))


# ------------------------------------------------------------------------------------------- main

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=3_000_000, help="records to ingest (default 3 million)")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--codec", default="none", help="batch compression: none, lz4, zstd, ...")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--chunk", type=int, default=500_000, help="records per write_deltalake call, hand-written")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each new-process measure (the median counts)")
    parser.add_argument("--one-shot", action="store_true")
    parser.add_argument("--increment", action="store_true")
    parser.add_argument("--warm", action="store_true")
    parser.add_argument("--spark-kafka", action="store_true")
    parser.add_argument("--values", choices=("raw", "avro"), default="raw",
                        help="avro: typed-table ingest of Avro values against raw-bytes ingest (avro_mode below)")
    parser.add_argument("--hand-written-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hand_written_child:
        spec = json.loads(args.hand_written_child)
        print(run_hand_written(spec["bootstrap"], spec["uri"], spec["partitions"], spec["total"], spec["chunk"])[1])
        return
    if args.values == "avro":
        return avro_mode(args)
    if not (args.one_shot or args.increment or args.warm or args.spark_kafka):
        args.one_shot = args.increment = args.warm = args.spark_kafka = True

    figures: dict = {"bench": "ingest", "records": args.records, "codec": args.codec, "master": args.master}
    with tempfile.TemporaryDirectory(prefix="topiclake-bench-ingest-") as tmp:
        root = Path(tmp) / "data"
        t = time.perf_counter()
        total = write_topic(root, args.records, args.partitions, args.codec)
        print(f"wrote {total} records as segments in {time.perf_counter() - t:.1f} s", flush=True)
        figures["records"] = total
        if args.one_shot:
            figures.update(one_shot(root, Path(tmp), args, total))
        if args.spark_kafka:
            figures.update(spark_kafka_source(root, Path(tmp), args, total))
        if args.warm:
            figures.update(warm(root, Path(tmp), args, total))
        if args.increment:
            figures.update(increment(root, Path(tmp), args))
    print(json.dumps(figures))


def one_shot(root: Path, tmp: Path, args, total: int) -> dict:
    ours, theirs = [], []
    with running_broker(root) as (bootstrap, _data, _pid):
        for i in range(args.repeat):  # interleaved: a change in the machine's load hits both
            seconds, ingested = ingest_process(root, f"one-shot-{i}", args.master)
            assert ingested == total, (ingested, total)
            ours.append(seconds)
            seconds, consumed = hand_written_process(bootstrap, str(tmp / f"hand-written-{i}"), args.partitions, total,
                                                     args.chunk)
            assert consumed == total, (consumed, total)
            theirs.append(seconds)
    ours_s, theirs_s = statistics.median(ours), statistics.median(theirs)
    print(f"one-shot, new processes: spark-submit jobs/ingest.py {ours_s:.1f} s ({total / ours_s:,.0f} records/s; "
          f"runs {', '.join(f'{s:.1f}' for s in ours)}); hand-written {theirs_s:.1f} s "
          f"({total / theirs_s:,.0f} records/s; runs {', '.join(f'{s:.1f}' for s in theirs)}): "
          f"ratio {theirs_s / ours_s:.2f}", flush=True)
    return {"one_shot_seconds": round(ours_s, 2), "hand_written_process_seconds": round(theirs_s, 2),
            "ratio_one_shot": round(theirs_s / ours_s, 2)}


def spark_kafka_source(root: Path, tmp: Path, args, total: int) -> dict:
    """Spark's Kafka source into delta-spark, reading from Apache Kafka and from the topiclake
    broker, against spark-submit jobs/ingest.py; runs interleaved, medians compared."""
    peers = fetch_peers()
    jars = ",".join(str(j) for j in sorted(Path(peers["SPARK_KAFKA_JARS"]).glob("*.jar")))
    script = tmp / "spark_kafka_ingest.py"
    script.write_text(SPARK_KAFKA_INGEST)
    ours, from_kafka, from_topiclake = [], [], []
    with apache_kafka(tmp / "kafka") as (kafka, _log_dir, _pid), running_broker(root) as (broker, _data, _pid2):
        t = time.perf_counter()
        assert fill_kafka(kafka, total, args.partitions, args.codec) == total
        print(f"filled Apache Kafka {peers['KAFKA_VERSION']} with the same {total} records in "
              f"{time.perf_counter() - t:.1f} s", flush=True)
        for i in range(args.repeat):  # interleaved: a change in the machine's load hits all three
            seconds, ingested = ingest_process(root, f"spark-kafka-ours-{i}", args.master)
            assert ingested == total, (ingested, total)
            ours.append(seconds)
            for source, bootstrap, runs in (("kafka", kafka, from_kafka), ("topiclake", broker, from_topiclake)):
                table = tmp / f"spark-kafka-source-from-{source}-{i}"
                runs.append(spark_kafka_process(bootstrap, table, args.master, script, jars))
                assert delta_rows(table) == total, (source, delta_rows(table), total)
    ours_s, kafka_s, topiclake_s = (statistics.median(runs) for runs in (ours, from_kafka, from_topiclake))
    print(f"one-shot, new processes: spark-submit jobs/ingest.py {ours_s:.1f} s; Spark's Kafka source into delta-spark "
          f"(Spark {peers['SPARK_VERSION']}) reading Apache Kafka {peers['KAFKA_VERSION']} {kafka_s:.1f} s (runs "
          f"{', '.join(f'{s:.1f}' for s in from_kafka)}: ratio {kafka_s / ours_s:.2f}), reading the topiclake broker "
          f"{topiclake_s:.1f} s (runs {', '.join(f'{s:.1f}' for s in from_topiclake)}: ratio "
          f"{topiclake_s / ours_s:.2f})", flush=True)
    return {"spark_kafka_ours_seconds": round(ours_s, 2), "kafka_version": peers["KAFKA_VERSION"],
            "spark_kafka_source_from_kafka_seconds": round(kafka_s, 2),
            "spark_kafka_source_from_topiclake_seconds": round(topiclake_s, 2),
            "ratio_spark_kafka_source_from_kafka": round(kafka_s / ours_s, 2),
            "ratio_spark_kafka_source_from_topiclake": round(topiclake_s / ours_s, 2)}


def fill_kafka(bootstrap: str, records: int, partitions: int, codec: str) -> int:
    """The records write_topic writes, produced into Apache Kafka: the same batches to the same
    partitions (batch i to partition i mod partitions), keys, values and timestamps."""
    from confluent_kafka import Producer

    from topiclake.segments.batch import iter_batches

    # Kept whatever their age: the records are stamped May 2024, past Kafka's default 7-day retention.
    create_topic(bootstrap, TOPIC, partitions=partitions, **{"retention.ms": "-1"})
    templates = [list(next(iter_batches(template_batch(i, codec, base_timestamp=1_714_521_600_000,
                                                               spread_ms=3_600_000))).records())
                 for i in range(TEMPLATES)]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000,
                         "compression.type": codec, "queue.buffering.max.messages": 1_000_000})
    produced = 0
    for i in range(records // RECORDS_PER_BATCH):
        for r in templates[i % TEMPLATES]:
            while True:
                try:
                    producer.produce(TOPIC, key=r.key, value=r.value, partition=i % partitions, timestamp=r.timestamp)
                    break
                except BufferError:
                    producer.poll(0.01)
            produced += 1
    if producer.flush(120):
        raise SystemExit("could not fill Apache Kafka")
    return produced


def increment(root: Path, tmp: Path, args) -> dict:
    table = "increment"
    ingest_process(root, table, args.master)  # the table holds everything so far
    script = tmp / "bare_session.py"
    script.write_text(BARE_SESSION)
    delta_script = tmp / "bare_delta_session.py"
    delta_script.write_text(BARE_DELTA_SESSION)
    ours, bare, with_delta = [], [], []
    for i in range(args.repeat):
        write_topic(root, INCREMENT, args.partitions, args.codec, seed=1000 + i)
        seconds, ingested = ingest_process(root, table, args.master)
        assert ingested == INCREMENT, (ingested, INCREMENT)
        ours.append(seconds)
        bare.append(bare_session_process(args.master, script))
        with_delta.append(bare_session_process(args.master, delta_script))
    ours_s, bare_s, delta_s = statistics.median(ours), statistics.median(bare), statistics.median(with_delta)
    print(f"increment of {INCREMENT} records, new processes: ingest {ours_s:.2f} s (runs "
          f"{', '.join(f'{s:.2f}' for s in ours)}); a bare SparkSession start and stop {bare_s:.2f} s (runs "
          f"{', '.join(f'{s:.2f}' for s in bare)}): {ours_s / bare_s:.2f}x; the same with Delta's SQL extension "
          f"and catalog {delta_s:.2f} s (runs {', '.join(f'{s:.2f}' for s in with_delta)}): "
          f"{delta_s / bare_s:.2f}x a bare start", flush=True)
    return {"increment_seconds": round(ours_s, 2), "bare_session_seconds": round(bare_s, 2),
            "increment_vs_bare_start": round(ours_s / bare_s, 2), "delta_session_seconds": round(delta_s, 2),
            "delta_session_vs_bare_start": round(delta_s / bare_s, 2)}


def warm(root: Path, tmp: Path, args, total: int) -> dict:
    run = run_warm(root, args.master)
    assert run["records"] == total, (run["records"], total)
    limit_s, limit_rows = parquet_limit(run["tasks"], processes=2)
    assert limit_rows == total, (limit_rows, total)
    with running_broker(root) as (bootstrap, _data, _pid):
        hand_s, consumed = run_hand_written(bootstrap, str(tmp / "hand-written-warm"), args.partitions, total,
                                            args.chunk)
    assert consumed == total, (consumed, total)
    ours, hand, limit = total / run["seconds"], total / hand_s, total / limit_s
    print(f"warm application: first ingest {run['first_run_seconds']:.1f} s, steady state {run['seconds']:.2f} s "
          f"({ours:,.0f} records/s); hand-written in-process {hand_s:.1f} s ({hand:,.0f} records/s): "
          f"ratio {ours / hand:.1f}; Parquet-write limit (2 processes) {limit_s:.2f} s ({limit:,.0f} records/s): "
          f"{ours / limit:.0%} of it", flush=True)
    return {"warm_seconds": round(run["seconds"], 2), "warm_first_run_seconds": round(run["first_run_seconds"], 2),
            "hand_written_seconds": round(hand_s, 2), "ratio_warm": round(ours / hand, 2),
            "parquet_limit_seconds": round(limit_s, 2), "of_parquet_limit": round(ours / limit, 3)}


# ------------------------------------------------------------------------------------- --values avro
# Typed tables: the same number of records, with 100-byte values in Confluent's wire format (an
# Avro record of eight fields) and the schema in `_schemas`, ingested into typed columns; the
# raw-bytes ingest of the raw benchmark's records runs in the same application. Both run twice
# (first and steady state); "ratio" is Avro steady-state records/s / raw steady-state records/s.

AVRO_TOPIC = "bench-avro"
AVRO_SCHEMA = {"type": "record", "name": "Event", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"},
    {"name": "event", "type": {"type": "enum", "name": "Kind", "symbols": ["click", "view", "purchase", "scroll"]}},
    {"name": "amount", "type": "double"},
    {"name": "session", "type": "string"},
    {"name": "user", "type": "string"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "flag", "type": "boolean"},
    {"name": "note", "type": ["null", "string"], "default": None},
]}
AVRO_VALUE_BYTES = 100


def avro_template_batch(seed: int, codec: str, *, base_timestamp: int, spread_ms: int) -> bytes:
    """1000 records, 16-byte keys, values of exactly AVRO_VALUE_BYTES in the wire format (schema id 1)."""
    import io
    import random

    import fastavro

    from topiclake.segments.batch import Record, build_batch

    parsed = fastavro.parse_schema(AVRO_SCHEMA)
    rng = random.Random(seed)
    records = []
    for i in range(RECORDS_PER_BATCH):
        datum = {"id": rng.randrange(10**9), "event": rng.choice(["click", "view", "purchase", "scroll"]),
                 "amount": rng.randrange(10**7) / 100, "session": rng.randbytes(12).hex(),
                 "user": "user-%011d" % rng.randrange(10**11), "at": base_timestamp + rng.randrange(spread_ms),
                 "flag": rng.random() < 0.5, "note": ""}
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, datum)
        datum["note"] = "n" * (AVRO_VALUE_BYTES - 5 - len(out.getvalue()))  # one length byte either way
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, datum)
        value = b"\x00\x00\x00\x00\x01" + out.getvalue()
        assert len(value) == AVRO_VALUE_BYTES, len(value)
        key = b"user-%011d" % rng.randrange(10**11)
        records.append(Record(i, base_timestamp + rng.randrange(spread_ms), key, value))
    return build_batch(records, base_offset=0, compression=codec)


def write_avro_topic(root: Path, records: int, partitions: int, codec: str) -> int:
    """The `_schemas` topic (subject bench-avro-value, id 1) and the Avro topic, through the Log."""
    from topiclake.registry.records import SchemaValue, schema_record
    from topiclake.segments.batch import Record, build_batch

    layout = StorageLayout(root)
    config = LogConfig.from_properties({"segment.bytes": str(SEGMENT_BYTES)})
    key, value = schema_record(SchemaValue(f"{AVRO_TOPIC}-value", 1, 1, json.dumps(AVRO_SCHEMA))).encode()
    schemas = Log.open(layout.log_dir("_schemas", 0), config, topic="_schemas", partition=0)
    schemas.append(bytearray(build_batch([Record(0, 1_714_521_600_000, key, value)], base_offset=0)),
                   assign_offsets=True)
    schemas.close()
    templates = [avro_template_batch(seed, codec, base_timestamp=1_714_521_600_000, spread_ms=3_600_000)
                 for seed in range(TEMPLATES)]
    return append_batches(root, AVRO_TOPIC, templates, records, partitions)


def avro_mode(args) -> None:
    from topiclake.lake.runs.ingest import IngestOptions, ingest
    from topiclake.lake.spark.session import get_session

    with tempfile.TemporaryDirectory(prefix="topiclake-bench-ingest-avro-") as tmp:
        root = Path(tmp) / "data"
        t = time.perf_counter()
        total = write_topic(root, args.records, args.partitions, args.codec)
        assert write_avro_topic(root, args.records, args.partitions, args.codec) == total
        print(f"wrote {total} raw and {total} Avro records as segments in {time.perf_counter() - t:.1f} s")
        spark = get_session("bench-ingest-avro", master=args.master, conf={
            "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false", "spark.driver.memory": "1g"})
        spark.range(4).count()  # the JVM is up: its start-up is not counted
        runs = {}
        for name, topic in (("raw", TOPIC), ("avro", AVRO_TOPIC)):
            for run in ("first", "steady"):
                started = time.perf_counter()
                result = ingest(spark, IngestOptions(topics=(topic,), root=root, table=f"{name}-{run}",
                                                     bootstrap="none"))
                seconds = time.perf_counter() - started
                assert result.records == total, (name, result.records, total)
                runs[(name, run)] = seconds
                print(f"{name} ingest ({args.master}), {run} run: {seconds:.1f} s, {total / seconds:,.0f} records/s")
        typed = spark.read.parquet(str(root / "tables" / "avro-steady")).limit(1).collect()[0].asDict()
        assert typed["value_schema_id"] == 1 and typed["event"] in ("click", "view", "purchase", "scroll"), typed
        raw, avro = total / runs[("raw", "steady")], total / runs[("avro", "steady")]
        print(json.dumps({"bench": "ingest", "values": "avro", "records": total, "value_bytes": AVRO_VALUE_BYTES,
                          "codec": args.codec, "master": args.master,
                          "avro_records_per_s": round(avro), "avro_seconds": round(runs[("avro", "steady")], 2),
                          "raw_records_per_s": round(raw), "raw_seconds": round(runs[("raw", "steady")], 2),
                          "avro_first_run_records_per_s": round(total / runs[("avro", "first")]),
                          "raw_first_run_records_per_s": round(total / runs[("raw", "first")]),
                          "ratio": round(avro / raw, 2), "target": 0.5}))


if __name__ == "__main__":
    main()
