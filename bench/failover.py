"""Failover of a cluster on one shared root: kill -9 a broker and time, for each partition it led,
the first acknowledged produce on its new leader (issue 18's targets on loopback: 3 s with 12
partitions, 6 s with 300).

Three `topiclake broker start` processes in cluster mode and a ZooKeeper ensemble (1 node unless
--zookeeper-nodes 3); one topic of N partitions. An idempotent acks=all confluent-kafka producer
sends one record to every partition every --interval-ms. Each round kill -9s one broker (rounds
alternate between a broker that is not the controller and the controller itself, which adds an
election), then, per partition that broker led, measures from the kill to the first
acknowledgement of a record produced after the kill. Beside it a raw client asks a live broker
for the leaders every 20 ms and produces one record to each new leader: the cluster's own
failover, without librdkafka's metadata-refresh backoff (after a leader is lost it asks again
after 100 ms, doubling up to retry.backoff.max.ms, 1 s: up to a second more). The broker is
restarted and the preferred leaders move back before the next round (that time is printed too).

The baseline, from the same run: kill -9 to the dead broker's registration vanishing from
ZooKeeper (its session expiring), the floor no failover can beat; the ratio is the failover
over that floor.

    python bench/failover.py [--partitions 12,300] [--rounds 2] [--session-timeout-ms 2000]

The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from topiclake.broker.cluster.config import ClusterConfig
from topiclake.broker.cluster.ensemble import Ensemble
from topiclake.broker.cluster.zookeeper import ZooKeeperCoordination
from topiclake.client.conn import BrokerConnection
from tests.support.cluster_brokers import ClusterBrokers, cluster_settings
from tests.support.cluster_clients import metadata, raw_produce

TOPIC = "bench-failover"
TARGETS_S = {12: 3.0, 300: 6.0}


class Acks:
    """Every acknowledgement: partition -> [(produced_at, acked_at)], monotonic seconds."""

    def __init__(self):
        self.lock = threading.Lock()
        self.by_partition: dict[int, list[tuple[float, float]]] = {}
        self.errors = 0

    def on_delivery(self, produced_at: float):
        def report(err, msg):
            if err is not None:
                self.errors += 1
                return
            with self.lock:
                self.by_partition.setdefault(msg.partition(), []).append((produced_at, time.monotonic()))
        return report

    def latency_ms(self, since: float, until: float) -> tuple[float, float]:
        """p50 and p99 of produce-to-ack of the records produced within [since, until)."""
        with self.lock:
            waits = sorted(acked - produced for rows in self.by_partition.values() for produced, acked in rows
                           if since <= produced < until)
        if not waits:
            return float("nan"), float("nan")
        return waits[len(waits) // 2] * 1000, waits[min(len(waits) - 1, int(0.99 * len(waits)))] * 1000

    def first_after(self, partition: int, at: float) -> float | None:
        with self.lock:
            return min((acked for produced, acked in self.by_partition.get(partition, ()) if produced >= at),
                       default=None)


def produce_forever(bootstrap: str, partitions: int, interval_s: float, acks: Acks, stop: threading.Event,
                    config: dict | None = None) -> None:
    """`config`: more producer settings (bench/ack_latency.py asks for librdkafka's statistics)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 2, "message.timeout.ms": 60000, "reconnect.backoff.max.ms": 200,
                         "topic.metadata.refresh.interval.ms": 5000, **(config or {})})
    while not stop.is_set():
        started = time.monotonic()
        for p in range(partitions):
            while True:
                try:
                    producer.produce(TOPIC, value=b"x" * 100, partition=p,
                                     on_delivery=acks.on_delivery(time.monotonic()))
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.poll(0)
        while (left := interval_s - (time.monotonic() - started)) > 0:
            producer.poll(min(left, 0.005))
    producer.flush(30)


def leaders(cluster: ClusterBrokers) -> dict[int, int]:
    """partition -> leader id, from the first live broker's Metadata."""
    for broker_id in cluster.live():
        try:
            return {p: v.leader for p, v in metadata(cluster.bootstrap_of(broker_id), TOPIC).partitions.items()}
        except OSError:
            continue
    return {}


def probe(cluster: ClusterBrokers, victim: int, partitions: list[int], stop: threading.Event) -> dict[int, float]:
    """The cluster's own failover, without a client's retry backoff: from now, ask a live broker
    for each partition's leader every 20 ms and send a one-record produce (acks=all) to it once
    it is not the victim; partition -> monotonic time of its first acknowledgement."""
    firsts: dict[int, float] = {}
    clients: dict[int, BrokerConnection] = {}
    try:
        while len(firsts) < len(partitions) and not stop.is_set():
            current = leaders(cluster)
            for p in partitions:
                leader = current.get(p, -1)
                if p in firsts or leader in (victim, -1):
                    continue
                try:
                    if leader not in clients:
                        clients[leader] = BrokerConnection(cluster.bootstrap_of(leader), timeout=10)
                    if raw_produce(clients[leader], TOPIC, p, b"probe").error_code == 0:
                        firsts[p] = time.monotonic()
                except OSError:
                    clients.pop(leader, None)
            time.sleep(0.02)
    finally:
        for client in clients.values():
            client.close()
    return firsts


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit(f"{what} did not happen within {timeout:.0f} s")


def balanced(cluster: ClusterBrokers, partitions: int) -> dict[int, int] | None:
    """The leaders once every partition has a live one and each broker leads its preferred share."""
    try:
        current = leaders(cluster)
    except Exception:  # noqa: BLE001  (a broker still starting)
        return None
    live = set(cluster.live())
    if len(current) < partitions or any(leader not in live for leader in current.values()):
        return None
    counts = [list(current.values()).count(b) for b in live]
    return current if max(counts) - min(counts) <= max(1, partitions // 20) else None


def registration_gone(zk: ZooKeeperCoordination, broker_id: int) -> bool:
    try:
        return broker_id not in zk.live_brokers()
    except Exception:  # noqa: BLE001
        return False


def one_run(partitions: int, args, work: Path) -> dict:
    with Ensemble(work / "zookeeper", args.zookeeper_nodes) as ensemble:
        chroot = f"/bench-failover-{partitions}"
        settings = cluster_settings(ensemble.connect_string, chroot, session_timeout_ms=args.session_timeout_ms,
                                    preferred_leader_delay_ms=1000)
        watcher = ZooKeeperCoordination(ClusterConfig(zookeeper=ensemble.connect_string, chroot=chroot), 0)
        watcher.start()
        with ClusterBrokers(work / f"cluster-{partitions}", settings, log_level="INFO") as cluster:
            from confluent_kafka.admin import AdminClient, NewTopic

            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            for future in admin.create_topics([NewTopic(TOPIC, partitions, 1)]).values():
                future.result(30)
            wait_for(lambda: balanced(cluster, partitions), 60, "every partition led")
            acks, stop = Acks(), threading.Event()
            producer = threading.Thread(target=produce_forever,
                                        args=(cluster.bootstrap, partitions, args.interval_ms / 1000, acks, stop))
            producer.start()
            rounds = []
            try:
                time.sleep(3)  # warm: connections, producer id, metadata
                for r in range(args.rounds):
                    current = leaders(cluster)
                    controller = watcher.controller()[0]  # the elected one (as Metadata names it)
                    others = [b for b in cluster.live() if b != controller]
                    victim = controller if r % 2 else max(others, key=lambda b: list(current.values()).count(b))
                    led = [p for p, leader in current.items() if leader == victim]
                    before_p50, before_p99 = acks.latency_ms(time.monotonic() - 2.5, time.monotonic() - 0.5)
                    probed: dict[int, float] = {}
                    # the loop joins it before moving on
                    prober = threading.Thread(
                        target=lambda: probed.update(probe(cluster, victim, led, stop)))  # noqa: B023
                    killed_at = cluster.kill(victim)
                    prober.start()
                    # called before the loop moves on
                    gone = wait_for(lambda: registration_gone(watcher, victim) and time.monotonic(), 30,  # noqa: B023
                                    "the registration expiring") - killed_at
                    # called before the loop moves on
                    firsts = wait_for(lambda: (lambda f: f if None not in f else None)(
                        [acks.first_after(p, killed_at) for p in led]),  # noqa: B023
                        60, "every partition acknowledging again")
                    prober.join(60)
                    times = sorted(t - killed_at for t in firsts)
                    served = max(probed.values()) - killed_at if len(probed) == len(led) else float("nan")
                    cluster.restart(victim)
                    back_at = time.monotonic()
                    wait_for(lambda: balanced(cluster, partitions), 60, "the preferred leaders moving back")
                    rounds.append({"victim": victim, "controller": victim == controller, "partitions": len(led),
                                   "session_expiry_s": round(gone, 3), "served_s": round(served, 3),
                                   "first_s": round(times[0], 3),
                                   "median_s": round(statistics.median(times), 3), "all_s": round(times[-1], 3),
                                   "moved_back_s": round(time.monotonic() - back_at, 3),
                                   "ack_p50_ms_before": round(before_p50, 1),
                                   "ack_p99_ms_before": round(before_p99, 1)})
                    print(f"  {partitions} partitions, round {r + 1}: killed broker {victim}"
                          f"{' (the controller)' if victim == controller else ''} leading {len(led)}: session expired "
                          f"{gone:.2f} s; every partition served (raw produce) {served:.2f} s; the producer's "
                          f"first ack {times[0]:.2f} s, median {statistics.median(times):.2f} s, "
                          f"all {times[-1]:.2f} s (acks before the kill: p50 {before_p50:.0f} ms, p99 "
                          f"{before_p99:.0f} ms); back home {rounds[-1]['moved_back_s']:.1f} s after restart",
                          flush=True)
                    time.sleep(2)
            finally:
                stop.set()
                producer.join(60)
                watcher.close()
            return {"partitions": partitions, "rounds": rounds, "delivery_errors": acks.errors}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", default="12,300", help="comma-separated partition counts")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--session-timeout-ms", type=int, default=ClusterConfig(zookeeper="x:1").session_timeout_ms)
    parser.add_argument("--interval-ms", type=float, default=50.0, help="one record per partition this often")
    parser.add_argument("--zookeeper-nodes", type=int, default=1, choices=(1, 3))
    parser.add_argument("--work", type=Path, default=None, help="keep the brokers' files and logs here")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="topiclake-failover-") as tmp:
        work = args.work or Path(tmp)
        for count in (int(n) for n in args.partitions.split(",")):
            results.append(one_run(count, args, work))
    summary = {"bench": "failover", "session_timeout_ms": args.session_timeout_ms,
               "zookeeper_nodes": args.zookeeper_nodes}
    for result in results:
        n, rounds = result["partitions"], result["rounds"]
        worst = max(r["all_s"] for r in rounds)
        served = max(r["served_s"] for r in rounds)
        summary[f"p{n}_served_max_s"] = served
        floor = statistics.median(r["session_expiry_s"] for r in rounds)
        summary[f"p{n}_all_max_s"] = worst
        summary[f"p{n}_median_s"] = statistics.median(r["median_s"] for r in rounds)
        summary[f"p{n}_session_expiry_s"] = floor
        summary[f"p{n}_ratio_to_expiry"] = round(worst / floor, 2)
        summary[f"p{n}_target_s"] = TARGETS_S.get(n)
        summary[f"p{n}_delivery_errors"] = result["delivery_errors"]
        print(f"{n} partitions: every partition of the killed broker served by its new leader within {served:.2f} s "
              f"(a raw produce every 20 ms), acknowledging the producer again within {worst:.2f} s (target "
              f"{TARGETS_S.get(n, '-')} s); its session expired after {floor:.2f} s (ratio {worst / floor:.2f})")
    summary["rounds"] = {r["partitions"]: r["rounds"] for r in results}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
