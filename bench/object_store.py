"""A broker on a bucket root against the same broker on a file root, in one run (issue 29, point 6).

The same `topiclake broker start` code and the same confluent-kafka client and settings go to two
brokers on this machine: one on a directory, one on a bucket of versitygw (the tests' real S3
server, on loopback, over a directory of its own) with the broker's default [storage] settings
(flush_ms 250: a produce is acknowledged once its flush object is written). Rounds alternate
between the two (--repeat; medians). Per round and root:
- throughput: --records records of 100 bytes from one producer to one partition (lz4, linger
  5 ms, 1 MB batches, acks=all: bench/produce.py's settings), after an unmeasured warm-up of a
  fifth as many. "ratio_throughput" = bucket / file, target >= 0.5;
- latency: one idempotent acks=all producer, linger 0, 1,000 records/s for --latency-seconds:
  p50, p99, max from produce() to the delivery report. Target: bucket p99 <= flush_ms + 50 ms.
  Then the same with librdkafka's default producer (not idempotent: "plain_p99_ms"), whose
  requests are not limited in flight where the idempotent one keeps one per partition;
- bulk and PUTs per GB: --bulk-mb MiB of incompressible 1 KiB values (the text values above
  shrink about 20x under lz4: too few bytes to flush by size), MB/s, and the broker's own
  `topiclake_object_store_requests_total{operation="put"}` over that run per GB of record
  batches appended (its BytesIn), both read from its /metrics; and PUTs per second during the
  1k/s run (a function of time, not of bytes).
Then ingest: the throughput topic of each root (every round's records) into a Delta table on the
same root, by `topiclake.lake.runs.ingest` in one Spark application (local[2]; the session has the
bucket's s3a settings), each root ingested once unmeasured and then --repeat times, alternating;
twice: at once ("tail": the bucket's records are still flush objects, one Spark task each), and
--seal-wait seconds later ("sealed": the broker has sealed them into segments, split into tasks by
their index, as the older part of any log is). "ratio_ingest_tail" and "ratio_ingest_sealed" =
bucket records/s / file records/s, target >= 0.7.

Each broker's CPU seconds (and versitygw's) per run are reported: on a small shared machine they
tell what bounds a figure. The last line is one JSON object with every figure and the ratios.

    python bench/object_store.py [--records 300000] [--latency-seconds 10] [--bulk-mb 32] [--repeat 2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from _broker import _free_port, cpu_seconds, create_topic, running_broker  # noqa: E402
from produce import latency, produce_throughput  # noqa: E402

THROUGHPUT_TOPIC = "bench-throughput"
LATENCY_TOPIC = "bench-latency"
WARM_UP_TOPIC = "bench-warm-up"
BULK_TOPIC = "bench-bulk"
FLUSH_MS = 250  # the broker's default [storage] flush_ms, which the p99 target is relative to
TARGETS = {"ratio_throughput": 0.5, "p99_over_flush_ms": 50.0, "ratio_ingest": 0.7}


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def series(samples: dict, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, got), v in samples.items() if n == name and wanted <= set(got))


class Broker:
    """One broker of the comparison: its bootstrap, process, /metrics and (bucket) server."""

    def __init__(self, name: str, bootstrap: str, pid: int, metrics_url: str, server_pid: int | None = None):
        self.name, self.bootstrap, self.pid, self.metrics_url, self.server_pid = name, bootstrap, pid, metrics_url, \
            server_pid

    def cpu(self) -> tuple[float, float]:
        """(broker CPU seconds, S3 server CPU seconds) so far."""
        return cpu_seconds(self.pid), cpu_seconds(self.server_pid) if self.server_pid else 0.0

    def measure(self, args) -> dict:
        before, cpu_before = scrape(self.metrics_url), self.cpu()
        seconds = produce_throughput(self.bootstrap, THROUGHPUT_TOPIC, args.records)
        after, cpu_after = scrape(self.metrics_url), self.cpu()
        bytes_in = series(after, "kafka_server_brokertopicmetrics_bytesin_total", topic=THROUGHPUT_TOPIC) - \
            series(before, "kafka_server_brokertopicmetrics_bytesin_total", topic=THROUGHPUT_TOPIC)
        puts = series(after, "topiclake_object_store_requests_total", operation="put") - \
            series(before, "topiclake_object_store_requests_total", operation="put")
        produces = series(after, "kafka_network_requestmetrics_requests_total", request="Produce") - \
            series(before, "kafka_network_requestmetrics_requests_total", request="Produce")
        produce_s = series(after, "topiclake_network_request_duration_seconds_sum", request="Produce") - \
            series(before, "topiclake_network_request_duration_seconds_sum", request="Produce")
        figures = {"records_per_s": args.records / seconds, "seconds": seconds,
                   "broker_cpu_s": cpu_after[0] - cpu_before[0], "s3_server_cpu_s": cpu_after[1] - cpu_before[1],
                   # what a Produce request waited in the broker, and how many records it carried
                   "produce_requests": produces, "produce_request_mean_ms": produce_s / produces * 1000,
                   "records_per_produce": args.records / produces,
                   "bytes_in": bytes_in, "puts": puts}
        figures.update(self.bulk(args))
        os.sync()  # the throughput run's dirty pages written back: the latency run measures 1k/s alone
        if args.latency_seconds > 0:
            before = scrape(self.metrics_url)
            lat = latency(self.bootstrap, LATENCY_TOPIC, args.latency_seconds)
            after = scrape(self.metrics_url)
            figures.update({k: v for k, v in lat.items() if k != "latency_records"})
            figures["puts_per_s_at_1k"] = (series(after, "topiclake_object_store_requests_total", operation="put") -
                                           series(before, "topiclake_object_store_requests_total",
                                                  operation="put")) / args.latency_seconds
            plain = latency(self.bootstrap, LATENCY_TOPIC, args.latency_seconds, idempotent=False)
            figures.update({f"plain_{k}": v for k, v in plain.items() if k != "latency_records"})
        return figures

    def bulk(self, args) -> dict:
        """--bulk-mb of incompressible 1 KiB values (lz4 cannot shrink them): MB/s, and PUTs per GB
        appended where the flushes are driven by bytes (flush_bytes) more than by the tick."""
        values = [os.urandom(1024) for _ in range(256)]
        count = args.bulk_mb * 1024
        before = scrape(self.metrics_url)
        seconds = produce_values(self.bootstrap, BULK_TOPIC, values, count)
        after = scrape(self.metrics_url)
        bytes_in = series(after, "kafka_server_brokertopicmetrics_bytesin_total", topic=BULK_TOPIC) - \
            series(before, "kafka_server_brokertopicmetrics_bytesin_total", topic=BULK_TOPIC)
        puts = series(after, "topiclake_object_store_requests_total", operation="put") - \
            series(before, "topiclake_object_store_requests_total", operation="put")
        return {"bulk_mb_per_s": bytes_in / 1e6 / seconds, "bulk_bytes_in": bytes_in, "bulk_puts": puts,
                "puts_per_gb": puts / (bytes_in / 1e9) if bytes_in else 0.0}

    def store_latency(self) -> dict:
        """Mean PUT and ranged-GET time over the whole run (the broker's own histogram)."""
        samples = scrape(self.metrics_url)
        out = {}
        for op in ("put", "get", "list", "head"):
            count = series(samples, "topiclake_object_store_request_seconds_count", operation=op)
            if count:
                out[f"store_{op}_requests"] = count
                out[f"store_{op}_mean_ms"] = round(
                    series(samples, "topiclake_object_store_request_seconds_sum", operation=op) / count * 1000, 2)
        return out


def produce_values(bootstrap: str, topic: str, values: list[bytes], count: int) -> float:
    """Seconds one producer (bench/produce.py's throughput settings) takes to have `count` records,
    cycling through `values`, acknowledged."""
    from confluent_kafka import Producer

    from produce import THROUGHPUT_CONFIG

    producer = Producer({"bootstrap.servers": bootstrap, **THROUGHPUT_CONFIG})
    errors = []
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=values[i % len(values)],
                                 on_delivery=(lambda err, _m: errors.append(err) if err else None) if i % 1000 == 0
                                 else None)
                break
            except BufferError:
                producer.poll(0.001)
    remaining = producer.flush(300)
    if remaining or errors:
        raise SystemExit(f"produce failed: {remaining} undelivered, errors {errors[:3]}")
    return time.perf_counter() - start


@contextlib.contextmanager
def both_brokers(tmp: Path):
    """Yields ({"file": Broker, "bucket": Broker}, file root Path, bucket S3Root)."""
    from tests.support.s3 import VersityGW
    from topiclake.store.root import parse_root

    with contextlib.ExitStack() as stack:
        gateway = VersityGW(tmp / "versitygw").start()
        stack.callback(gateway.stop)
        os.environ.update(gateway.env())  # the broker processes and this one (ingest) reach it so
        bucket_url = f"s3://{gateway.create_bucket('bench')}/root"
        brokers = {}
        roots = (("file", None, tmp / "file" / "data"), ("bucket", bucket_url, tmp / "bucket" / "cache"))
        for name, root, data in roots:
            data.parent.mkdir(parents=True)
            port = _free_port()
            extra = ("--metrics-listen", f"127.0.0.1:{port}") + (("--cache-dir", str(data)) if root else ())
            bootstrap, _data, pid = stack.enter_context(running_broker(data, *extra, root=root))
            brokers[name] = Broker(name, bootstrap, pid, f"http://127.0.0.1:{port}/metrics",
                                   gateway.process.pid if root else None)
        yield brokers, tmp / "file" / "data", parse_root(bucket_url)


def ingest_phases(roots: dict, repeat: int, seal_wait_s: float, profile: bool = False) -> dict[str, dict]:
    """{phase: {root name: [(seconds, records, tasks) of each measured ingest]}}, in one Spark
    application. Phase "tail": at once after the produce, the bucket's records still in flush
    objects (one task each); phase "sealed": `seal_wait_s` later, sealed into segments (tasks split
    by the segment's index) as the older part of any log is. `profile`: the bucket's measured
    ingests under cProfile (the driver's side: planning, waiting on the tasks, the commit)."""
    import cProfile
    import pstats

    from topiclake.lake.spark.session import get_session

    spark = get_session("bench-object-store", master="local[2]", root=roots["bucket"],
                        conf={"spark.ui.showConsoleProgress": "false"})
    profiler = cProfile.Profile() if profile else None
    phases = {}
    try:
        phases["tail"] = ingest_rounds(spark, roots, repeat, "tail", profiler, warm_up=True)
        if seal_wait_s > 0:
            print(f"waiting {seal_wait_s:.0f} s for the bucket broker to seal its tail (seal_ms)", flush=True)
            time.sleep(seal_wait_s)
            phases["sealed"] = ingest_rounds(spark, roots, repeat, "sealed", profiler)
    finally:
        spark.stop()
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(20)
    return phases


def ingest_rounds(spark, roots: dict, repeat: int, phase: str, profiler, warm_up: bool = False) -> dict[str, list]:
    from topiclake.lake.runs.ingest import IngestOptions, ingest

    runs: dict[str, list[tuple[float, int, int]]] = {name: [] for name in roots}
    for i in range(0 if warm_up else 1, repeat + 1):  # round 0 unmeasured: classes, s3a, caches
        for name, root in roots.items():
            profiled = profiler is not None and i > 0 and name == "bucket"
            started = time.perf_counter()
            if profiled:
                profiler.enable()
            result = ingest(spark, IngestOptions(topics=(THROUGHPUT_TOPIC,), root=root, table=f"{phase}-{i}",
                                                 group=f"bench-{phase}-{i}", bootstrap="none"))
            if profiled:
                profiler.disable()
            seconds = time.perf_counter() - started
            tasks = sum(len(p.plan.tasks) for t in result.tables for p in t.partitions)
            print(f"ingest ({phase}) {'warm-up' if i == 0 else f'round {i}'}, {name}: {result.records:,} records, "
                  f"{tasks} tasks, {seconds:.2f} s ({result.records / seconds:,.0f} records/s)", flush=True)
            if i:
                runs[name].append((seconds, result.records, tasks))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=300_000, help="records per throughput run (100 bytes each)")
    parser.add_argument("--latency-seconds", type=float, default=10.0, help="seconds of the 1k records/s run")
    parser.add_argument("--repeat", type=int, default=2, help="rounds, alternating the roots (medians count)")
    parser.add_argument("--bulk-mb", type=int, default=32, help="MiB of incompressible 1 KiB values per round "
                                                                 "(MB/s and PUTs per GB)")
    parser.add_argument("--profile-ingest", action="store_true", help="cProfile the bucket's measured ingests "
                                                                      "(the driver's side) and print the top")
    parser.add_argument("--seal-wait", type=float, default=70.0, help="seconds to wait before the sealed ingest "
                                                                       "(the broker's seal_ms is 60 s; 0: skip it)")
    parser.add_argument("--no-ingest", action="store_true", help="skip the ingest comparison (no Spark)")
    args = parser.parse_args()

    rounds: dict[str, list[dict]] = {"file": [], "bucket": []}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="topiclake-bench-object-store-") as tmp:
        with both_brokers(Path(tmp)) as (brokers, file_root, bucket_root):
            for broker in brokers.values():
                for topic in (THROUGHPUT_TOPIC, LATENCY_TOPIC, WARM_UP_TOPIC, BULK_TOPIC):
                    create_topic(broker.bootstrap, topic)
                produce_throughput(broker.bootstrap, WARM_UP_TOPIC, max(args.records // 5, 1000))
            for i in range(args.repeat):
                for name, broker in brokers.items():
                    rounds[name].append(broker.measure(args))
                    figures = ", ".join(f"{k} {v:,.2f}" for k, v in rounds[name][-1].items())
                    print(f"round {i + 1}, {name} root: " + figures,
                          flush=True)
            store = brokers["bucket"].store_latency()
            # the brokers idle meanwhile (as an ingest runs beside a broker); versitygw serves the bucket
            phases = {} if args.no_ingest else ingest_phases({"file": file_root, "bucket": bucket_root}, args.repeat,
                                                              args.seal_wait, args.profile_ingest)
    load_after = os.getloadavg()

    medians = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in rounds.items()}
    file, bucket = medians["file"], medians["bucket"]
    result = {"bench": "object_store", "records": args.records, "value_bytes": 100, "rounds": args.repeat,
              "bulk_mb": args.bulk_mb,
              "flush_ms": FLUSH_MS, "load_before": [round(x, 2) for x in load_before],
              "load_after": [round(x, 2) for x in load_after],
              **{f"file_{k}": round(v, 3) for k, v in file.items() if "puts" not in k},
              **{f"bucket_{k}": round(v, 3) for k, v in bucket.items()}, **store,
              "ratio_throughput": round(bucket["records_per_s"] / file["records_per_s"], 3)}
    # docs/OBJECT-STORAGE.md's cost model: one PUT per partition with new data per flush tick
    result["model_puts_per_gb"] = round((1000 / FLUSH_MS) / (bucket["bulk_mb_per_s"] / 1000))
    if "p99_ms" in bucket:
        result["bucket_p99_over_flush_ms"] = round(bucket["p99_ms"] - FLUSH_MS, 1)
    for phase, per_root in phases.items():
        for name, runs in per_root.items():
            result[f"{name}_ingest_{phase}_records"] = runs[0][1]
            result[f"{name}_ingest_{phase}_tasks"] = runs[0][2]
            result[f"{name}_ingest_{phase}_records_per_s"] = round(statistics.median(n / s for s, n, _t in runs))
        result[f"ratio_ingest_{phase}"] = round(result[f"bucket_ingest_{phase}_records_per_s"] /
                                                result[f"file_ingest_{phase}_records_per_s"], 3)
    result["targets"] = TARGETS
    result["missed"] = [key for key, ok in (
        ("ratio_throughput", result["ratio_throughput"] >= TARGETS["ratio_throughput"]),
        ("p99", result.get("bucket_p99_over_flush_ms", 0) <= TARGETS["p99_over_flush_ms"]),
        *((f"ratio_ingest_{phase}", result[f"ratio_ingest_{phase}"] >= TARGETS["ratio_ingest"]) for phase in phases))
        if not ok]

    print(f"\nmedians of {args.repeat} rounds, {args.records:,} records of 100 bytes, load {load_before[0]:.1f} -> "
          f"{load_after[0]:.1f}:")
    print(f"  produce, 1 producer, acks=all, lz4: file {file['records_per_s']:,.0f} records/s, bucket "
          f"{bucket['records_per_s']:,.0f} (ratio {result['ratio_throughput']}, target >= 0.5)")
    print(f"    a Produce request in the broker: file {file['produce_request_mean_ms']:.1f} ms mean, bucket "
          f"{bucket['produce_request_mean_ms']:.1f} ms ({bucket['records_per_produce']:,.0f} records each); broker "
          f"CPU {bucket['broker_cpu_s']:.2f} s and versitygw's {bucket['s3_server_cpu_s']:.2f} s of the bucket run's "
          f"{bucket['seconds']:.2f} s; a PUT {store.get('store_put_mean_ms', 0):.1f} ms mean")
    print(f"  1 KiB incompressible values: file {file['bulk_mb_per_s']:.1f} MB/s, bucket {bucket['bulk_mb_per_s']:.1f}"
          f" MB/s; {bucket['puts_per_gb']:,.0f} PUTs per GB appended (the cost model of docs/OBJECT-STORAGE.md "
          f"at that rate, one partition: {result['model_puts_per_gb']:,})")
    if "p99_ms" in bucket:
        print(f"  at 1k records/s acks=all p50/p99: file {file['p50_ms']:.1f}/{file['p99_ms']:.1f} ms, bucket "
              f"{bucket['p50_ms']:.1f}/{bucket['p99_ms']:.1f} ms (target p99 <= {FLUSH_MS + 50} ms); "
              f"{bucket['puts_per_s_at_1k']:.1f} PUTs per second (idempotent: one request in flight)")
        print(f"    librdkafka's default producer (not idempotent, requests unlimited in flight) p50/p99: file "
              f"{file['plain_p50_ms']:.1f}/{file['plain_p99_ms']:.1f} ms, bucket "
              f"{bucket['plain_p50_ms']:.1f}/{bucket['plain_p99_ms']:.1f} ms")
    for phase in phases:
        print(f"  ingest into Delta, {result[f'file_ingest_{phase}_records']:,} records, one Spark application, "
              f"bucket {'fresh: its flush objects' if phase == 'tail' else 'sealed into segments'}: file "
              f"{result[f'file_ingest_{phase}_records_per_s']:,} records/s ({result[f'file_ingest_{phase}_tasks']} "
              f"tasks), bucket {result[f'bucket_ingest_{phase}_records_per_s']:,} "
              f"({result[f'bucket_ingest_{phase}_tasks']} tasks): "
              f"ratio {result[f'ratio_ingest_{phase}']} (target >= 0.7)")
    print(f"  missed targets: {', '.join(result['missed']) or 'none'}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
