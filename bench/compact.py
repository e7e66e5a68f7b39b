"""Benchmark: Kafka log compaction of a keyed topic with the Spark job (local[2]) against a
single-process pass of the same algorithm (segments.cleaner.clean_log), in one run.

The topic has 2 partitions of segments written through the segment store's `Log`, batches of
500 records (16-byte keys, ~100-byte values) drawn from `--keys` distinct keys (1M in the full
run), so about half of the records are superseded. The baseline cleans a copy of the same data,
partition after partition, and writes its `.cleaned` files (no swap); the Spark job does the
whole thing (plan, key maps, rewrite, swap, checkpoint) on a fresh copy each round; both must
write the same bytes (SHA-256 per output segment). MB/s counts the dirty segment bytes; wall time,
as both use every core they can. `--repeat N` alternates N rounds of each (the machine's load
moves; medians are reported, and the load average at the start and end). CPU seconds are
reported too (the single process's; the job's driver, JVM and Python workers together, with
`--master local[N]`: a standalone cluster's executors are not this process's children and are not
counted): on a shared machine they show what each side costs whatever the others run. Each round also times
the same pure-Python loop in one process and split over two ("ceiling"): how much faster two
processes ran than one on the machine at that moment, the most any local[2] job could gain. The last line is one
JSON object; "ratio" is Spark MB/s over single-process MB/s (of the medians).

`--bucket` also puts the same segments, as closed segments with a manifest, into a bucket of a
versitygw of the run's own (the tests' real S3 server, on loopback) and runs the same job on that
root (runs/bucket_compaction.py: one task per partition reading its objects, the cleaned segments
written as new objects, one manifest commit each); it must write the same bytes too.
"ratio_bucket" is bucket MB/s over the file root's Spark MB/s, in the same session.

    python bench/compact.py                 # ~300 MB, 1M distinct keys
    python bench/compact.py --mb 20 --keys 50000   # quick
    python bench/compact.py --mb 40 --keys 100000 --bucket
    python bench/compact.py --mb 100 --repeat 3
    python bench/compact.py --mb 100 --repeat 3 --master spark://127.0.0.1:7077   # a standalone cluster
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from topiclake.segments import filenames
from topiclake.segments.batch import Record, build_batch
from topiclake.segments.cleaner import clean_log
from topiclake.segments.log import Log
from topiclake.segments.log_summary import SegmentData
from topiclake.segments.storage import StorageLayout, TopicRegistry

RECORDS_PER_BATCH = 500
PARTITIONS = 2
TOPIC = "bench-kv"


def write_topic(root: Path, mb: float, keys: int, seed: int = 1) -> int:
    rng = random.Random(seed)
    layout = StorageLayout(root)
    TopicRegistry(layout).create(TOPIC, PARTITIONS, {"cleanup.policy": "compact", "segment.bytes": str(64 << 20)})
    config = TopicRegistry(layout).get(TOPIC).log_config
    value = b"v" * 90
    per_partition = int(mb * 1e6 / PARTITIONS)
    for p in range(PARTITIONS):
        log = Log.open(layout.log_dir(TOPIC, p), config, topic=TOPIC, partition=p)
        written = 0
        while written < per_partition:
            records = [Record(i, 1_700_000_000_000, b"key-%011d" % rng.randrange(keys),
                              value + b"%09d" % rng.randrange(10**9), ()) for i in range(RECORDS_PER_BATCH)]
            batch = build_batch(records, base_offset=0)
            log.append(batch)
            written += len(batch)
        log.roll()  # everything written becomes cleanable
        log.close()
    return sum(f.stat().st_size for f in (root / "log").rglob("*.log"))


def single_process(root: Path) -> tuple[float, dict[tuple[int, int], str]]:
    """Clean every partition; returns the time and the SHA-256 of each output segment."""
    layout = StorageLayout(root)
    config = TopicRegistry(layout).get(TOPIC).log_config
    started = time.perf_counter()
    written = {}
    for p in range(PARTITIONS):
        d = layout.log_dir(TOPIC, p)
        bases = sorted(int(f.name.split(".")[0]) for f in d.glob("*.log"))
        segments = [SegmentData(b, filenames.log_file(d, b).read_bytes()) for b in bases]
        result = clean_log(segments, first_dirty_offset=0, first_uncleanable_offset=bases[-1], config=config,
                           now_ms=int(time.time() * 1000), topic=TOPIC, partition=p)
        for g in result.groups:
            filenames.segment_file(d, g.base_offset, ".log.cleaned").write_bytes(g.data)
            written[(p, g.base_offset)] = hashlib.sha256(g.data).hexdigest()
    return time.perf_counter() - started, written


def _spin(n: int) -> int:
    total = 0
    for i in range(n):
        total += i
    return total


def parallel_ceiling(pool, n: int = 4_000_000) -> float:
    """How much faster two processes run one CPU-bound loop than one process does, right now."""
    started = time.perf_counter()
    _spin(2 * n)
    one = time.perf_counter() - started
    started = time.perf_counter()
    pool.map(_spin, [n, n], chunksize=1)
    return one / (time.perf_counter() - started)


def descendants_cpu_s() -> float:
    """CPU seconds (user + system) so far of this process's live descendants: Spark's JVM, its
    Python daemon and workers."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        parents[int(entry)] = int(fields[1])
        ticks[int(entry)] = int(fields[11]) + int(fields[12])  # utime, stime
    mine, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - mine
        mine |= frontier
    return sum(ticks[pid] for pid in mine) / os.sysconf("SC_CLK_TCK")


def swapped_digests(root: Path, segments) -> dict[tuple[int, int], str]:
    """SHA-256 of the segments the Spark job swapped in, for the byte-for-byte comparison."""
    layout = StorageLayout(root)
    return {(p, base): hashlib.sha256(filenames.log_file(layout.log_dir(TOPIC, p), base).read_bytes()).hexdigest()
            for p, base in segments}


def upload_topic(root: Path, store) -> None:
    """The closed segments of `root`'s partitions (not the empty active one) as a bucket's closed
    segment objects and manifest version 0, as a leader's seals leave them."""
    from topiclake.objectlog.keys import PartitionKeys
    from topiclake.objectlog.manifest import EMPTY, commit
    from topiclake.objectlog.seal import write_segment
    from topiclake.segments.batch import iter_batches

    layout = StorageLayout(root)
    meta = TopicRegistry(layout).get(TOPIC)
    store.put(f"topics/{TOPIC}.json", meta.to_json())
    for p in range(PARTITIONS):
        keys = PartitionKeys(TOPIC, p)
        d = layout.log_dir(TOPIC, p)
        entries = []
        for base in sorted(int(f.name.split(".")[0]) for f in d.glob("*.log")):
            data = filenames.log_file(d, base).read_bytes()
            if data:
                headers = [batch.header for batch in iter_batches(data)]
                entries.append(write_segment(store, data, headers, meta.log_config,
                                             lambda suffix, base=base, keys=keys: keys.segment(base, suffix),
                                             time.monotonic() + 120))
        commit(store, keys, EMPTY, EMPTY.successor(leader_epoch=0, segments=tuple(entries)))


def bucket_digests(store) -> dict[tuple[int, int], str]:
    from topiclake.objectlog.keys import PartitionKeys
    from topiclake.objectlog.manifest import load_newest

    return {(p, e.base_offset): hashlib.sha256(store.get(e.key)).hexdigest()
            for p in range(PARTITIONS) for e in load_newest(store, PartitionKeys(TOPIC, p)).segments}


def spark_session(master: str = "local[2]"):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from topiclake.lake.spark.session import get_session

    spark = get_session("bench-compact", master=master, conf={"spark.ui.enabled": "false",
                                                                  "spark.ui.showConsoleProgress": "false",
                                                                  "spark.driver.memory": "2g"})
    spark.range(1).count()  # session warm-up is not compaction time
    # Nor is starting the Python workers and importing topiclake in them (the single process has
    # its imports done too); timed apart, as a fresh spark-submit pays it once.
    started = time.perf_counter()
    spark.sparkContext.parallelize(range(2), 2).map(lambda x: __import__("topiclake.segments.cleaner") and x).count()
    print(f"python workers started in {time.perf_counter() - started:.1f} s (not counted)", flush=True)
    return spark


def spark_job(spark, root) -> tuple[float, object]:
    from topiclake.lake.runs.compaction import CompactOptions, compact

    started = time.perf_counter()
    result = compact(spark, CompactOptions(root=root, topics=(TOPIC,), force=True))
    return time.perf_counter() - started, result


def _remove_cleaned(root: Path) -> None:
    for f in (root / "log").rglob("*.log.cleaned"):
        f.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=300, help="topic size in MB (default 300)")
    parser.add_argument("--keys", type=int, default=1_000_000, help="distinct keys (default 1M)")
    parser.add_argument("--repeat", type=int, default=1, help="alternating rounds of each (default 1)")
    parser.add_argument("--bucket", action="store_true", help="also the same job on a bucket root (versitygw)")
    parser.add_argument("--master", default="local[2]",
                        help="the job's Spark master (default local[2]; e.g. spark://HOST:PORT, a standalone cluster)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-compact-"))
    gateway = None
    load_start = os.getloadavg()[0]
    try:
        t = time.perf_counter()
        size = write_topic(work / "a", args.mb, args.keys)
        print(f"wrote {size / 1e6:.1f} MB in {PARTITIONS} partitions ({args.keys:,} keys) in "
              f"{time.perf_counter() - t:.1f} s", flush=True)
        if args.bucket:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
            from tests.support.s3 import VersityGW
            from topiclake.store.objects import ObjectStore
            from topiclake.store.root import parse_root

            gateway = VersityGW(work / "versitygw").start()
            bucket_root = parse_root(f"s3://{gateway.create_bucket('bench')}/root", env=gateway.env())
            t = time.perf_counter()
            upload_topic(work / "a", ObjectStore(bucket_root))
            print(f"put the segments in the bucket in {time.perf_counter() - t:.1f} s", flush=True)
        spark = spark_session(args.master)
        pool = multiprocessing.get_context("spawn").Pool(2)
        pool.map(_spin, [1, 1], chunksize=1)  # started before anything is timed
        base_times, spark_times, base_cpu, spark_cpu, ceilings = [], [], [], [], []
        for round_ in range(args.repeat):
            ceilings.append(parallel_ceiling(pool))
            print(f"round {round_}: two processes ran {ceilings[-1]:.2f}x one (the ceiling)", flush=True)
            cpu = time.process_time()
            base_s, base_digests = single_process(work / "a")
            base_cpu.append(time.process_time() - cpu)
            base_out = sum(f.stat().st_size for f in (work / "a" / "log").rglob("*.log.cleaned"))
            _remove_cleaned(work / "a")
            base_times.append(base_s)
            print(f"round {round_}: single process (clean_log): {base_s:.2f} s, {size / 1e6 / base_s:.2f} MB/s, "
                  f"{base_out / 1e6:.1f} MB out, {base_cpu[-1]:.2f} CPU s", flush=True)
            shutil.rmtree(work / "b", ignore_errors=True)
            shutil.copytree(work / "a", work / "b")  # the job swaps in place: a fresh copy each round
            # The copy's dirty pages go to disk first (untimed): else the job's first fsync waits for
            # them (an ext4 journal commit writes out the delayed allocations of other files too),
            # which a log written long before its compaction never has pending.
            os.sync()
            cpu = time.process_time() + descendants_cpu_s()
            spark_s, result = spark_job(spark, work / "b")
            spark_cpu.append(time.process_time() + descendants_cpu_s() - cpu)
            assert not result.errors, result.errors
            spark_times.append(spark_s)
            print(f"round {round_}: spark {args.master} (compact job): {spark_s:.2f} s, "
                  f"{size / 1e6 / spark_s:.2f} MB/s, {result.bytes_after / 1e6:.1f} MB out, "
                  f"{spark_cpu[-1]:.2f} CPU s", flush=True)
            assert result.bytes_after == base_out, (result.bytes_after, base_out)  # the same algorithm
            assert swapped_digests(work / "b", base_digests) == base_digests, "the outputs differ"  # byte for byte
        base_s, spark_s = statistics.median(base_times), statistics.median(spark_times)
        figures = {"benchmark": "compact", "master": args.master, "mb": round(size / 1e6, 1), "keys": args.keys,
                   "partitions": PARTITIONS, "rounds": args.repeat,
                   "single_process_mb_per_s": round(size / 1e6 / base_s, 2),
                   "spark_mb_per_s": round(size / 1e6 / spark_s, 2), "ratio": round(base_s / spark_s, 2),
                   "ratios": [round(b / s, 2) for b, s in zip(base_times, spark_times)],
                   "single_process_cpu_s": round(statistics.median(base_cpu), 2),
                   "spark_cpu_s": round(statistics.median(spark_cpu), 2),
                   "ceilings": [round(c, 2) for c in ceilings]}
        if gateway is not None:
            bucket_s, bucket_result = spark_job(spark, bucket_root)
            assert not bucket_result.errors, bucket_result.errors
            print(f"spark {args.master} (compact job, bucket root): {bucket_s:.1f} s, "
                  f"{size / 1e6 / bucket_s:.2f} MB/s, {bucket_result.bytes_after / 1e6:.1f} MB out", flush=True)
            assert bucket_digests(ObjectStore(bucket_root)) == base_digests, "the bucket's outputs differ"
            figures.update(bucket_mb_per_s=round(size / 1e6 / bucket_s, 2), ratio_bucket=round(spark_s / bucket_s, 2))
        figures.update(load_start=round(load_start, 1), load_end=round(os.getloadavg()[0], 1))
        print(json.dumps(figures))
        pool.close()
    finally:
        if gateway is not None:
            gateway.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
