"""Many partitions: one producer spreading its records over N partitions, then one consumer
reading all N back, on topiclake against Apache Kafka in the same run (issue 33, points 1 and 5).

Both brokers run side by side on this machine (bench/_kafka.py's both_brokers: one Apache Kafka
KRaft node, one `topiclake broker start` process). For each partition count of --partitions
(default 2,000), each broker gets a topic of that many partitions; then, in rounds alternating
between the brokers (--repeat; each figure is the median):
- produce: --records records of 100 bytes from one confluent-kafka producer, each record to the
  next partition (acks=all, lz4, linger 5 ms: bench/produce.py's settings and loop);
- fetch: one consumer assigned every partition from offset 0 reads what that round produced
  back (bench/fetch.py's consumer; librdkafka's fetch requests name every partition);
- with --java-consumer, the same records read again by Kafka's own Java consumer
  (kafka-consumer-perf-test in a new group: its fetch rate, a fetch session per broker, KIP-227).
Warm-up rounds (--warmups, default 2: each a whole round, produce and fetch) per broker and count
are not measured (Kafka's JIT; the logs opened): with one produce alone as the warm-up, Kafka's
first measured round was an outlier in every run (18 k records/s, 37 s of its CPU, against
198-260 k/s in its later rounds), which lifted the median ratio. After the
rounds of each count, each broker's resident memory (VmRSS; Kafka's is mostly its fixed JVM heap) is
reported. Every count's topic stays open, so the partitions open after count N are the sum of the
counts up to N; topiclake's memory per 1,000 partitions is the RSS growth between two counts over
the partitions the later one added ("topiclake_rss_mb_per_1000_partitions_N", from the count run
before N); it needs two counts: after the first, the growth over the idle broker also holds what
the traffic itself keeps (buffers, the allocator's high water), so that figure is reported apart
as an upper bound ("..._over_idle_N").
The last line is one JSON object: every figure, and for each count N "produce_ratio_N" and
"fetch_ratio_N" (topiclake records/s / Kafka records/s; target >= 1.0 at 2,000), and
"java_fetch_ratio_N" with --java-consumer.

    python bench/partitions.py [--partitions 2000 10000] [--records 1000000] [--repeat 3] [--warmups 2]
                               [--java-consumer]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _broker import cpu_seconds, create_topic
from _kafka import both_brokers, fetch_peers, java_consume, median_of, runqueue_wait_seconds
from fetch import consume
from produce import produce_throughput


def topic_of(partitions: int) -> str:
    return f"bench-partitions-{partitions}"


# Apache Kafka's controller refuses one operation of more than 10,000 records ("excessively large
# batch operation"): a topic of 10,000 partitions is created smaller, then grown.
CREATE_AT_ONCE = 5000


def create_wide_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    create_topic(bootstrap, topic, partitions=min(partitions, CREATE_AT_ONCE))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for grown in range(2 * CREATE_AT_ONCE, partitions + CREATE_AT_ONCE, CREATE_AT_ONCE):
        future = admin.create_partitions([NewPartitions(topic, min(grown, partitions))])[topic]
        future.result(120)
    # Kafka answers CreatePartitions once its controller committed them; its metadata may still
    # name the old count for a moment, and a producer told so refuses the partitions beyond it.
    deadline = time.monotonic() + 60
    while len(admin.list_topics(topic, timeout=10).topics[topic].partitions) < partitions:
        if time.monotonic() > deadline:
            raise SystemExit(f"{bootstrap}: {topic} never showed {partitions} partitions in its metadata")
        time.sleep(0.5)


def rss_mb(pid: int) -> float:
    """The process's resident memory (VmRSS, Linux /proc), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def rss_per_1000_partitions(counts: list[int], idle_mb: float, rss_after_mb: list[float]) -> dict[str, float]:
    """topiclake's RSS per 1,000 open partitions: `rss_after_mb[i]` was read after count `counts[i]`
    ran, with every earlier count's topic still open, so the growth from the count before is what
    the `counts[i]` partitions it added cost (the traffic's own memory is there already). The first
    count's growth over the idle broker holds that traffic memory too: an upper bound, named apart."""
    figures = {f"topiclake_rss_mb_per_1000_partitions_over_idle_{counts[0]}":
               round((rss_after_mb[0] - idle_mb) / counts[0] * 1000, 1)}
    for i in range(1, len(counts)):
        figures[f"topiclake_rss_mb_per_1000_partitions_{counts[i]}"] = \
            round((rss_after_mb[i] - rss_after_mb[i - 1]) / counts[i] * 1000, 1)
    return figures


def measure(bootstrap: str, pid: int, partitions: int, records: int, java_consumer: bool) -> dict:
    """One round against one broker: produce `records` over the topic's partitions, then read as
    many back from offset 0 of every partition (the topic holds the warm-up's records too)."""
    topic = topic_of(partitions)
    cpu_before, wait_before = cpu_seconds(pid), runqueue_wait_seconds(pid)
    produced = produce_throughput(bootstrap, topic, records, spread=partitions)
    cpu_produce, wait_produce = cpu_seconds(pid) - cpu_before, runqueue_wait_seconds(pid) - wait_before
    cpu_before = cpu_seconds(pid)
    elapsed, _with_startup, _nbytes = consume(bootstrap, records, topic, partitions)
    cpu_fetch = cpu_seconds(pid) - cpu_before
    figures = {"produce_records_per_s": records / produced, "fetch_records_per_s": records / elapsed,
               "broker_cpu_s_produce": cpu_produce, "broker_runqueue_wait_s_produce": wait_produce,
               "broker_cpu_s_fetch": cpu_fetch}
    if java_consumer:
        cpu_before = cpu_seconds(pid)
        figures["java_fetch_records_per_s"] = java_consume(bootstrap, topic, records)
        figures["broker_cpu_s_java_fetch"] = cpu_seconds(pid) - cpu_before
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[2000])
    parser.add_argument("--records", type=int, default=1_000_000, help="records produced per round")
    parser.add_argument("--repeat", type=int, default=3, help="rounds, alternating the brokers (medians count)")
    parser.add_argument("--warmups", type=int, default=2, help="unmeasured whole rounds per broker first")
    parser.add_argument("--java-consumer", action="store_true",
                        help="read each round again with Kafka's Java consumer (fetch sessions, KIP-227)")
    args = parser.parse_args()
    kafka_version = fetch_peers("kafka")["KAFKA_VERSION"]
    result: dict = {"bench": "partitions", "records": args.records, "rounds": args.repeat, "warmups": args.warmups,
                    "kafka_version": kafka_version, "load_before": round(os.getloadavg()[0], 1)}
    with both_brokers() as brokers:
        rss_idle = {name: rss_mb(pid) for name, (_b, _d, pid) in brokers.items()}
        for partitions in args.partitions:
            rounds: dict[str, list[dict]] = {"kafka": [], "topiclake": []}
            for name, (bootstrap, _data, pid) in brokers.items():
                create_wide_topic(bootstrap, topic_of(partitions), partitions)
                for i in range(args.warmups):
                    warm = measure(bootstrap, pid, partitions, args.records, args.java_consumer)
                    print(f"{partitions} partitions, warm-up {i + 1}, {name}: "
                          + ", ".join(f"{k} {v:,.2f}" for k, v in warm.items()), flush=True)
            for i in range(args.repeat):
                order = list(brokers.items()) if i % 2 == 0 else list(reversed(brokers.items()))
                for name, (bootstrap, _data, pid) in order:
                    rounds[name].append(measure(bootstrap, pid, partitions, args.records, args.java_consumer))
                    print(f"{partitions} partitions, round {i + 1}, {name}: "
                          + ", ".join(f"{k} {v:,.2f}" for k, v in rounds[name][-1].items()), flush=True)
            ours, kafka = median_of(rounds["topiclake"]), median_of(rounds["kafka"])
            result.update({f"topiclake_{k}_{partitions}": round(v, 3) for k, v in ours.items()})
            result.update({f"kafka_{k}_{partitions}": round(v, 3) for k, v in kafka.items()})
            result[f"produce_ratio_{partitions}"] = round(ours["produce_records_per_s"]
                                                          / kafka["produce_records_per_s"], 3)
            result[f"fetch_ratio_{partitions}"] = round(ours["fetch_records_per_s"] / kafka["fetch_records_per_s"], 3)
            if args.java_consumer:
                result[f"java_fetch_ratio_{partitions}"] = round(ours["java_fetch_records_per_s"]
                                                                 / kafka["java_fetch_records_per_s"], 3)
            for name, (_b, _d, pid) in brokers.items():
                result[f"{name}_rss_mb_{partitions}"] = round(rss_mb(pid), 1)
            print(f"{partitions} partitions, medians of {args.repeat} rounds: produce topiclake "
                  f"{ours['produce_records_per_s']:,.0f} records/s, Apache Kafka {kafka_version} "
                  f"{kafka['produce_records_per_s']:,.0f} (ratio {result[f'produce_ratio_{partitions}']}); fetch "
                  f"{ours['fetch_records_per_s']:,.0f} vs {kafka['fetch_records_per_s']:,.0f} (ratio "
                  f"{result[f'fetch_ratio_{partitions}']}); broker RSS {result[f'topiclake_rss_mb_{partitions}']} "
                  f"MB vs {result[f'kafka_rss_mb_{partitions}']} MB", flush=True)
    result.update({f"{name}_rss_mb_idle": round(mb, 1) for name, mb in rss_idle.items()})
    result.update(rss_per_1000_partitions(args.partitions, rss_idle["topiclake"],
                                          [result[f"topiclake_rss_mb_{n}"] for n in args.partitions]))
    result["load_after"] = round(os.getloadavg()[0], 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
