"""Produce into topiclake against the same into Apache Kafka: throughput with 1 and 4 producers,
and delivery latency at 1,000 records/s with acks=all.

The same confluent-kafka producer and settings go to each broker in turn, on this machine: one
Apache Kafka node (KRaft, broker and controller in one JVM, from the jars bin/fetch-peers
fetches; bench/_kafka.py) and one `topiclake broker start` process, both running, the rounds
alternating between them (--repeat rounds; each figure is the median). Both keep their log in the
page cache (Kafka's default flush policy, topiclake's too: no fsync per append). Each broker's
CPU seconds and run-queue wait (runnable, no CPU free) during a run are reported: on a small
shared machine they tell what bounds a figure.
- throughput (after a warm-up of a fifth as many records, unmeasured: Kafka's JIT compiles, both
  brokers' caches fill): --records records of 100 bytes (lz4, linger 5 ms, 1 MB batches,
  acks=all) from one producer to one partition, then the same number split over 4 producer
  processes, each to its own partition of a 4-partition topic;
- latency: one idempotent producer, linger 0, acks=all, 1,000 records/s for --latency-seconds:
  p50, p99 and max from produce() to the delivery report.
The last line is one JSON object: every figure, and the ratios topiclake / Kafka ("ratio_1" and
"ratio_4": throughput, target >= 1.0; "p99_ratio": topiclake p99 / Kafka p99, target <= 1.0).

    python bench/produce.py [--records 2000000] [--latency-seconds 5]

--cluster measures topiclake alone against three topiclake brokers in cluster mode on the same
root and machine (one ZooKeeper node), instead of against Kafka: the same figures for a single
broker (its default: acknowledged from the page cache), a single broker fsyncing every append
(flush.messages=1: what a cluster leader does before it acknowledges, plus its fence check), and
the cluster (the 4-partition topic spread over its three brokers). On 2 cores three brokers
cannot scale; the ratios show what the cluster costs, and that it does not collapse.

--metrics measures what the Prometheus endpoint costs: two topiclake brokers, one with
`--metrics-listen` and scraped every --scrape-interval seconds (a thread GETs /metrics and parses
it, as Prometheus would, only more often), one without; the same throughput runs alternate
between them (--repeat rounds, medians), plus a run of 20-record batches (many small requests:
where a per-request cost shows). "metrics_ratio_1"/"_4"/"_small": records/s with
metrics over without (target >= 0.97: at most 3% lost); "metrics_cpu_ratio_small": the broker's
CPU seconds for the small-batch run, with over without.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _broker import cpu_seconds, create_topic, mock_cluster, running_broker, running_cluster
from _kafka import both_brokers, fetch_peers, median_of, runqueue_wait_seconds

VALUE_SIZE = 100
PRODUCERS = 4
THROUGHPUT_CONFIG = {"compression.type": "lz4", "linger.ms": 5, "batch.size": 1_000_000, "message.max.bytes": 2_000_000,
                     "acks": "all", "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576}
# --metrics: many small requests, 20 records each (a fixed count: with no linger the batch size
# would follow the broker's speed, and the request count with it).
SMALL_BATCHES = {**THROUGHPUT_CONFIG, "batch.num.messages": 20}


def produce_throughput(bootstrap: str, topic: str, records: int, partition: int = 0,
                       config: dict = THROUGHPUT_CONFIG, spread: int = 1) -> float:
    """Seconds one producer takes to have `records` records acknowledged. `spread` > 1: each
    record to the next of the `spread` partitions from `partition` on (bench/partitions.py)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **config})
    value = os.urandom(VALUE_SIZE // 2).hex().encode()  # 100 bytes, compressible like text
    errors = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value, key=None, partition=partition + i % spread,
                                 on_delivery=on_delivery if i % 1000 == 0 else None)
                break
            except BufferError:
                producer.poll(0.001)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - start
    if remaining or errors:
        raise SystemExit(f"produce failed: {remaining} undelivered, errors {errors[:3]}")
    return elapsed


def _one_of_many(bootstrap: str, topic: str, records: int, partition: int, start, results) -> None:
    from confluent_kafka import Producer

    Producer({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)  # connected before the clock starts
    start.wait()
    results.put(produce_throughput(bootstrap, topic, records, partition))


def produce_parallel(bootstrap: str, topic: str, records: int, producers: int) -> float:
    """Seconds from the start until all `producers` processes (records / producers each, one
    partition each) have their records acknowledged."""
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(producers + 1), context.Queue()
    workers = [context.Process(target=_one_of_many, args=(bootstrap, topic, records // producers, p, start, results))
               for p in range(producers)]
    for w in workers:
        w.start()
    start.wait()
    began = time.perf_counter()
    for _ in workers:
        results.get(timeout=300)
    elapsed = time.perf_counter() - began
    for w in workers:
        w.join(30)
        if w.exitcode != 0:
            raise SystemExit(f"a producer process failed (exit {w.exitcode})")
    return elapsed


def latency(bootstrap: str, topic: str, seconds: float, rate: int = 1000, idempotent: bool = True) -> dict:
    """p50/p99/max of `rate` records/s, acks=all, linger 0. `idempotent` False: librdkafka's default
    producer, whose requests are not limited in flight (an idempotent one keeps one per partition)."""
    from confluent_kafka import Producer

    # one record per request: no Nagle delay
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "enable.idempotence": idempotent, "socket.nagle.disable": True})
    latencies = []

    def on_delivery(err, msg):
        if err is None:
            latencies.append(time.perf_counter() - float(msg.value()[:20]))

    value_pad = b"x" * (VALUE_SIZE - 20)
    producer.produce(topic, value=f"{time.perf_counter():<20.6f}".encode() + value_pad, on_delivery=on_delivery)
    producer.flush(10)  # warm-up: connection, metadata, producer id
    latencies.clear()
    start = time.perf_counter()
    n = int(seconds * rate)
    for i in range(n):
        target = start + i / rate
        while (now := time.perf_counter()) < target:
            producer.poll(max(0.0, min(target - now, 0.0005)))
        producer.produce(topic, value=f"{time.perf_counter():<20.6f}".encode() + value_pad, on_delivery=on_delivery)
        producer.poll(0)
    producer.flush(30)
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000  # noqa: E731
    return {"latency_records": len(latencies), "p50_ms": round(pick(0.50), 3), "p99_ms": round(pick(0.99), 3),
            "max_ms": round(latencies[-1] * 1000, 3)}


def prepare(bootstrap: str, records: int, **topic_config: str) -> None:
    """The topics, and a fifth of the records unmeasured: the JVM's JIT (and both brokers' caches)
    warm up, so Kafka is measured in its steady state, not its first seconds."""
    for topic, partitions in (("bench-produce", 1), ("bench-produce-4", PRODUCERS), ("bench-latency", 1),
                              ("bench-warm-up", 1)):
        create_topic(bootstrap, topic, partitions=partitions, **topic_config)
    produce_throughput(bootstrap, "bench-warm-up", max(records // 5, 1000))


def measure(bootstrap: str, pid: int | list[int], args) -> dict:
    """One round of every figure against one broker or cluster (its process ids: their CPU and
    run-queue time)."""
    wait = (lambda: sum(map(runqueue_wait_seconds, pid))) if isinstance(pid, list) else \
        (lambda: runqueue_wait_seconds(pid))
    cpu_before, wait_before = cpu_seconds(pid), wait()
    one = produce_throughput(bootstrap, "bench-produce", args.records)
    cpu_one, wait_one = cpu_seconds(pid) - cpu_before, wait() - wait_before
    cpu_before, wait_before = cpu_seconds(pid), wait()
    four = produce_parallel(bootstrap, "bench-produce-4", args.records, PRODUCERS)
    cpu_four, wait_four = cpu_seconds(pid) - cpu_before, wait() - wait_before
    # The throughput runs leave hundreds of MB of dirty pages: written back first, so the latency
    # run measures 1k/s on its own, not the kernel's writeback of the bursts before.
    os.sync()
    lat = latency(bootstrap, "bench-latency", args.latency_seconds) if args.latency_seconds > 0 else {}
    return {"records_per_s_1": args.records / one, "records_per_s_4": args.records / four,
            # the broker's CPU seconds, and its seconds runnable but waiting for a CPU, per run
            "broker_cpu_s_1": cpu_one, "broker_runqueue_wait_s_1": wait_one,
            "broker_cpu_s_4": cpu_four, "broker_runqueue_wait_s_4": wait_four,
            **{k: v for k, v in lat.items() if k != "latency_records"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=3, help="rounds, alternating the brokers (medians count)")
    parser.add_argument("--cluster", action="store_true", help="one topiclake broker against three (see above)")
    parser.add_argument("--metrics", action="store_true", help="a broker with /metrics against one without")
    parser.add_argument("--scrape-interval", type=float, default=1.0, help="--metrics: seconds between scrapes")
    args = parser.parse_args()
    if args.cluster:
        return one_against_three(args)
    if args.metrics:
        return metrics_on_and_off(args)

    kafka_version = fetch_peers("kafka")["KAFKA_VERSION"]
    rounds: dict[str, list[dict]] = {"kafka": [], "topiclake": []}
    client_limits = []  # the same client loop against a no-op broker, each round: the client's own limit
    with both_brokers() as brokers, mock_cluster() as mock:
        for bootstrap, _data, _pid in brokers.values():
            prepare(bootstrap, args.records)
        for i in range(args.repeat):
            for name, (bootstrap, _data, pid) in brokers.items():
                rounds[name].append(measure(bootstrap, pid, args))
                print(f"round {i + 1}, {name}: " + ", ".join(f"{k} {v:,.2f}" for k, v in rounds[name][-1].items()),
                      flush=True)
            client_limits.append(args.records / produce_throughput(mock, "bench-produce", args.records))
            print(f"round {i + 1}, the client against a no-op broker: {client_limits[-1]:,.0f} records/s", flush=True)
    client_limit = statistics.median(client_limits)
    ours, kafka = median_of(rounds["topiclake"]), median_of(rounds["kafka"])
    result = {
        "bench": "produce", "records": args.records, "value_bytes": VALUE_SIZE, "kafka_version": kafka_version,
        "rounds": args.repeat, **{f"topiclake_{k}": round(v, 3) for k, v in ours.items()},
        **{f"kafka_{k}": round(v, 3) for k, v in kafka.items()},
        "client_limit_records_per_s": round(client_limit),  # vs librdkafka's mock broker
        "ratio_1": round(ours["records_per_s_1"] / kafka["records_per_s_1"], 3),
        "ratio_4": round(ours["records_per_s_4"] / kafka["records_per_s_4"], 3),
        "p99_ratio": round(ours["p99_ms"] / kafka["p99_ms"], 3) if "p99_ms" in ours else None,
        "target_ratio": 1.0, "target_p99_ratio": 1.0,
    }
    print(f"medians of {args.repeat} rounds: 1 producer: topiclake {ours['records_per_s_1']:,.0f} records/s, Apache "
          f"Kafka {kafka_version} {kafka['records_per_s_1']:,.0f} (ratio {result['ratio_1']}); 4 producers: "
          f"{ours['records_per_s_4']:,.0f} vs {kafka['records_per_s_4']:,.0f} (ratio {result['ratio_4']}); at 1k/s "
          f"acks=all p50/p99: topiclake {ours.get('p50_ms')}/{ours.get('p99_ms')} ms, Kafka {kafka.get('p50_ms')}/"
          f"{kafka.get('p99_ms')} ms; the same client against a no-op (mock) broker: "
          f"{result['client_limit_records_per_s']:,} records/s")
    print(json.dumps(result))



def _scrape_every(url: str, interval_s: float, stop, results) -> None:
    """A Prometheus stand-in in its own process (in the producer's it would compete for its GIL):
    GET and parse /metrics every `interval_s`."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    took = []
    while not stop.wait(interval_s):
        began = time.perf_counter()
        with urllib.request.urlopen(url, timeout=10) as answer:
            list(text_string_to_metric_families(answer.read().decode()))
        took.append(time.perf_counter() - began)
    results.put(took)


def metrics_on_and_off(args) -> None:
    from _broker import _free_port

    metrics_port = _free_port()
    context = multiprocessing.get_context("spawn")
    stop, scrapes = context.Event(), context.Queue()
    rounds: dict[str, list[dict]] = {"metrics_on": [], "metrics_off": []}
    with running_broker(None, "--metrics-listen", f"127.0.0.1:{metrics_port}") as on, running_broker() as off:
        brokers = {"metrics_on": on, "metrics_off": off}
        for bootstrap, _data, _pid in brokers.values():
            prepare(bootstrap, args.records)
        scraper = context.Process(target=_scrape_every, args=(f"http://127.0.0.1:{metrics_port}/metrics",
                                                              args.scrape_interval, stop, scrapes), daemon=True)
        scraper.start()
        try:
            for i in range(args.repeat):
                order = list(brokers.items()) if i % 2 == 0 else list(reversed(brokers.items()))
                for name, (bootstrap, _data, pid) in order:
                    figures = measure(bootstrap, pid, args)
                    # Many small requests (20 records each): the per-request cost shows here.
                    cpu_before = cpu_seconds(pid)
                    small = produce_throughput(bootstrap, "bench-produce", args.records // 2, config=SMALL_BATCHES)
                    figures.update(records_per_s_small=args.records // 2 / small,
                                   broker_cpu_s_small=cpu_seconds(pid) - cpu_before)
                    rounds[name].append(figures)
                    print(f"round {i + 1}, {name}: " + ", ".join(f"{k} {v:,.2f}" for k, v in rounds[name][-1].items()),
                          flush=True)
        finally:
            stop.set()
            took = scrapes.get(timeout=30)
            scraper.join(15)
    on_, off_ = median_of(rounds["metrics_on"]), median_of(rounds["metrics_off"])
    scrape_ms = sorted(t * 1000 for t in took)
    result = {"bench": "produce-metrics", "records": args.records, "value_bytes": VALUE_SIZE, "rounds": args.repeat,
              **{f"on_{k}": round(v, 3) for k, v in on_.items()}, **{f"off_{k}": round(v, 3) for k, v in off_.items()},
              "scrapes": len(took), "scrape_interval_s": args.scrape_interval,
              "scrape_ms_median": round(statistics.median(scrape_ms), 2) if scrape_ms else None,
              **{f"metrics_ratio_{run}": round(on_[f"records_per_s_{run}"] / off_[f"records_per_s_{run}"], 3)
                 for run in ("1", "4", "small")},
              "metrics_cpu_ratio_small": round(on_["broker_cpu_s_small"] / off_["broker_cpu_s_small"], 3),
              "target_ratio": 0.97}
    print(f"medians of {args.repeat} rounds: 1 producer: metrics on {on_['records_per_s_1']:,.0f} records/s, off "
          f"{off_['records_per_s_1']:,.0f} (ratio {result['metrics_ratio_1']}); 4 producers: "
          f"{on_['records_per_s_4']:,.0f} vs {off_['records_per_s_4']:,.0f} (ratio {result['metrics_ratio_4']}); "
          f"20-record batches: {on_['records_per_s_small']:,.0f} vs {off_['records_per_s_small']:,.0f} (ratio "
          f"{result['metrics_ratio_small']}; broker CPU {on_['broker_cpu_s_small']:.2f} s vs "
          f"{off_['broker_cpu_s_small']:.2f} s); {len(took)} scrapes, median {result['scrape_ms_median']} ms")
    print(json.dumps(result))


def one_against_three(args) -> None:
    runs = (("single", running_broker, {}), ("single_fsync", running_broker, {"flush.messages": "1"}),
            ("cluster", running_cluster, {}))
    results = {}
    for name, start, topic_config in runs:
        with start() as (bootstrap, _data, pids):
            prepare(bootstrap, args.records, **topic_config)
            results[name] = measure(bootstrap, pids, args)
        print(f"{name}: {json.dumps(results[name])}", flush=True)
    single, fsync, cluster = results["single"], results["single_fsync"], results["cluster"]

    def ratio(a: dict, b: dict, key: str) -> float | None:
        return round(a[key] / b[key], 3) if a.get(key) and b.get(key) else None

    result = {"bench": "produce-cluster", "records": args.records, "value_bytes": VALUE_SIZE, "brokers": 3,
              **{f"{name}_{k}": v for name, figures in results.items() for k, v in figures.items()},
              "cluster_ratio_1": ratio(cluster, single, "records_per_s_1"),
              "cluster_ratio_4": ratio(cluster, single, "records_per_s_4"),
              "cluster_vs_fsync_ratio_1": ratio(cluster, fsync, "records_per_s_1"),
              "cluster_vs_fsync_ratio_4": ratio(cluster, fsync, "records_per_s_4"),
              "cluster_p99_ratio": ratio(cluster, single, "p99_ms"),
              "cluster_vs_fsync_p99_ratio": ratio(cluster, fsync, "p99_ms")}
    print(f"1 producer: one broker {single['records_per_s_1']:,} records/s, one fsyncing every append "
          f"{fsync['records_per_s_1']:,}, three in cluster mode {cluster['records_per_s_1']:,} (ratio "
          f"{result['cluster_ratio_1']}, {result['cluster_vs_fsync_ratio_1']} against the fsyncing one); 4 producers: "
          f"{single['records_per_s_4']:,} / {fsync['records_per_s_4']:,} / {cluster['records_per_s_4']:,} (ratio "
          f"{result['cluster_ratio_4']}, {result['cluster_vs_fsync_ratio_4']}); at 1k/s acks=all p50/p99: "
          f"{single.get('p50_ms')}/{single.get('p99_ms')} ms, {fsync.get('p50_ms')}/{fsync.get('p99_ms')} ms, "
          f"{cluster.get('p50_ms')}/{cluster.get('p99_ms')} ms")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
