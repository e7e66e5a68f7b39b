"""Benchmark: acknowledgement latency of an idempotent acks=all producer in steady state, a cluster
of three brokers against one broker alone, in the same run.

The load is bench/failover.py's, without the kills: one confluent-kafka producer (idempotent,
acks=all, linger.ms 2) sends one 100-byte record to every partition of one topic every
--interval-ms. After a warm-up it measures, for --seconds, each record's time from produce() to
its delivery report (p50/p90/p99), and reads librdkafka's own statistics per broker: the request
round trip (`rtt`) and the time records wait in the producer's queue before they are sent
(`int_latency`). An idempotent producer keeps at most 5 requests in flight per broker, so when
the round trip is long the wait moves into that queue.

The baseline: the same topic and load against one broker alone (single mode: no fsync per
acknowledgement, no fence check), started from the same checkout in the same run; the ratio is
the cluster's p50 over the single broker's.

    python bench/ack_latency.py [--partitions 300] [--seconds 15] [--interval-ms 50]

The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import failover  # its producer loop and acknowledgement ledger)
from tests.support.cluster_brokers import ClusterBrokers, cluster_settings, write_toml
from tests.support.broker_process import BrokerProcess
from topiclake.broker.cluster.ensemble import Ensemble


def measure(bootstrap: str, partitions: int, args) -> dict:
    """Create the topic, run the producer, and return the latency figures of the measured window."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(failover.TOPIC, partitions, 1)]).values():
        future.result(60)
    time.sleep(3)  # every leader known
    stats: list[dict] = []
    statistics = {"statistics.interval.ms": 5000, "stats_cb": lambda j: stats.append(json.loads(j))}
    acks, stop = failover.Acks(), threading.Event()
    producer = threading.Thread(target=failover.produce_forever,
                                args=(bootstrap, partitions, args.interval_ms / 1000, acks, stop, statistics))
    producer.start()
    try:
        time.sleep(5)  # warm: connections, producer id, metadata
        start = time.monotonic()
        time.sleep(args.seconds)
        end = time.monotonic()
    finally:
        stop.set()
        producer.join(60)
    latencies = sorted(acked - produced for series in acks.by_partition.values() for produced, acked in series
                       if start <= produced < end)
    if not latencies:
        raise SystemExit("no record was acknowledged in the measured window")

    def quantile(q: float) -> float:
        return round(latencies[int(q * (len(latencies) - 1))] * 1000, 1)

    brokers = [b for b in (stats[-1]["brokers"].values() if stats else ()) if b.get("nodeid", -1) >= 0]
    return {"acks": len(latencies), "p50_ms": quantile(0.5), "p90_ms": quantile(0.9), "p99_ms": quantile(0.99),
            "delivery_errors": acks.errors,
            "rtt_p50_ms": round(max(b["rtt"]["p50"] for b in brokers) / 1000, 1) if brokers else None,
            "queue_wait_p50_ms": round(max(b["int_latency"]["p50"] for b in brokers) / 1000, 1) if brokers else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--interval-ms", type=float, default=50.0, help="one record per partition this often")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-ack-latency-"))
    figures = {"partitions": args.partitions, "records_per_s": round(args.partitions * 1000 / args.interval_ms)}

    settings = {"broker": {"num_partitions": 4}}
    single = BrokerProcess(work / "single" / "data", config=write_toml(work / "single.toml", settings),
                           log_path=work / "single.log")
    single.data.mkdir(parents=True)
    single.start()
    try:
        figures["single"] = measure(single.bootstrap, args.partitions, args)
    finally:
        single.stop()
    print(f"one broker:    {figures['single']}", flush=True)

    with Ensemble(work / "zookeeper", 1) as ensemble:
        cluster_config = cluster_settings(ensemble.connect_string, "/bench-ack-latency")
        with ClusterBrokers(work / "cluster", cluster_config, log_level="INFO") as cluster:
            figures["cluster"] = measure(cluster.bootstrap, args.partitions, args)
    print(f"three brokers: {figures['cluster']}", flush=True)
    figures["ratio_p50"] = round(figures["cluster"]["p50_ms"] / figures["single"]["p50_ms"], 2)
    figures["ratio_p99"] = round(figures["cluster"]["p99_ms"] / figures["single"]["p99_ms"], 2)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
