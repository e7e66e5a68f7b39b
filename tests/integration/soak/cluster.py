"""The soak on a cluster (`bench/soak.py --cluster`): three brokers on one root, a ZooKeeper
ensemble of three, and the faults a cluster adds to the broker kills: SIGSTOP of a leader for a
while (shorter or longer than the session timeout: a stall, or a fenced leader waking up), kill
-9 of a ZooKeeper node. Broker faults strike the leader of a random partition, one at a time, and
record which partitions that broker led, so each fault's failover can be measured (from the fault
to the first acknowledgement, on each of those partitions, of a record produced after it)."""

from __future__ import annotations

import logging
import random
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from topiclake.broker.cluster.ensemble import Ensemble

from tests.support.cluster_brokers import ClusterBrokers, cluster_settings
from tests.support.cluster_clients import metadata
from .faults import Fault, Killer
from .ledger import Ledger

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterShape:
    brokers: int = 3
    zookeeper_nodes: int = 3
    session_timeout_ms: int = 2000  # the [cluster] default
    pause_share: float = 0.4  # broker faults that are a SIGSTOP rather than a kill -9
    pause_s: tuple[float, float] = (1.0, 6.0)  # around the session timeout: stalls and fenced leaders
    zookeeper_kill_gap_s: tuple[float, float] = (30.0, 90.0)
    zookeeper_down_s: tuple[float, float] = (2.0, 10.0)


class SoakCluster:
    """What the soak's clients, lake process and killers see of the brokers: `bootstrap`, `data`
    (the shared root), `stop()` (clean, returns the worst exit status), `kill()`."""

    def __init__(self, work: Path, shape: ClusterShape):
        self.shape = shape
        self.ensemble = Ensemble(work / "zookeeper", shape.zookeeper_nodes).start()
        try:
            settings = cluster_settings(self.ensemble.connect_string, "/soak", internal_partitions=10,
                                        session_timeout_ms=shape.session_timeout_ms, preferred_leader_delay_ms=5000)
            self.brokers = ClusterBrokers(work, settings, shape.brokers, root=work / "data").start()
        except BaseException:
            self.ensemble.stop()
            raise
        self.data = self.brokers.root
        self.bootstrap = self.brokers.bootstrap

    def ensure_up(self) -> None:
        """Every broker and ZooKeeper node running (before the drain)."""
        for node_id, node in self.ensemble.nodes.items():
            if not node.running():
                self.ensemble.restart(node_id)
        for broker_id in list(self.brokers.paused):
            self.brokers.resume(broker_id)
        for broker_id, broker in self.brokers.brokers.items():
            if broker.proc.poll() is not None:
                self.brokers.restart(broker_id)

    def stop(self, timeout: float = 60.0) -> int:
        codes = [b.stop(timeout) for b in self.brokers.brokers.values()]
        return max(codes, key=abs)

    def kill(self) -> None:
        for broker_id in list(self.brokers.paused):
            self.brokers.resume(broker_id)
        for broker in self.brokers.brokers.values():
            broker.kill()
        self.ensemble.stop()

    def leaders(self, topics: list[str]) -> dict[tuple[str, int], int]:
        """(topic, partition) -> leader, from the first live broker that answers."""
        for broker_id in self.brokers.live():
            try:
                out = {}
                for topic in topics:
                    view = metadata(self.brokers.bootstrap_of(broker_id), topic)
                    out.update({(topic, p): v.leader for p, v in view.partitions.items()})
                return out
            except OSError:
                continue
        return {}


class BrokerFaults(Killer):
    """At random moments: the leader of a random partition is killed -9 (and restarted at once,
    as a supervisor would) or paused with SIGSTOP for `pause_s` (then SIGCONT)."""

    def __init__(self, cluster: SoakCluster, topics: list[str], rng: random.Random, stop: threading.Event,
                 gap_s: tuple[float, float]):
        super().__init__("broker-faults", rng, stop, gap_s)
        self.cluster, self.topics = cluster, topics

    def strike(self) -> Fault:
        leaders = self.cluster.leaders(self.topics)
        live = self.cluster.brokers.live()
        candidates = sorted({b for b in leaders.values() if b in live}) or live
        victim = self.rng.choice(candidates)
        led = tuple(sorted(k for k, leader in leaders.items() if leader == victim))
        brokers = self.cluster.brokers
        if self.rng.random() < self.cluster.shape.pause_share:
            paused_s = self.rng.uniform(*self.cluster.shape.pause_s)
            at = brokers.pause(victim)
            self.stop.wait(paused_s)
            brokers.resume(victim)
            return Fault("pause", at, phase=f"broker {victim} for {paused_s:.1f} s", restart_s=paused_s,
                         partitions=led)
        at = brokers.kill(victim)
        error = None
        for _attempt in range(3):
            try:
                brokers.restart(victim)
                error = None
                break
            except RuntimeError as exc:
                error = " ".join(str(exc).split())[-500:]
                log.error("broker %d restart failed: %s", victim, error)
        return Fault("broker", at, phase=f"broker {victim}", restart_s=time.monotonic() - at, restart_error=error,
                     partitions=led)


class ZooKeeperKiller(Killer):
    """kill -9 a random ZooKeeper node, restart it after `down_s`."""

    def __init__(self, cluster: SoakCluster, rng: random.Random, stop: threading.Event, gap_s: tuple[float, float]):
        super().__init__("zookeeper-killer", rng, stop, gap_s)
        self.cluster = cluster

    def strike(self) -> Fault:
        ensemble = self.cluster.ensemble
        node_id = self.rng.choice(sorted(ensemble.nodes))
        leader = ensemble.leader_id() == node_id
        at = time.monotonic()
        ensemble.kill(node_id)
        self.stop.wait(self.rng.uniform(*self.cluster.shape.zookeeper_down_s))
        error = None
        try:
            ensemble.restart(node_id)
        except Exception as exc:  # noqa: BLE001  (reported: a node that does not come back is a finding)
            error = f"{type(exc).__name__}: {exc}"[:500]
        return Fault("zookeeper", at, phase=f"node {node_id}{' (leader)' if leader else ''}",
                     restart_s=time.monotonic() - at, restart_error=error)


# ====================================================================== figures
def failover_s(fault: Fault, ledger: Ledger) -> float | None:
    """From the fault to the moment every partition the broker led acknowledged a record produced
    after the fault (None if one of them never did)."""
    firsts = []
    for topic, partition in fault.partitions:
        first = min((a.acked_at for a in ledger.acks
                     if a.topic == topic and a.partition == partition and a.produced_at >= fault.at), default=None)
        if first is None:
            return None
        firsts.append(first - fault.at)
    return max(firsts) if firsts else None


def longest_gaps(ledger: Ledger, since: float, until: float) -> dict[tuple[str, int], float]:
    """Per partition: the longest time without an acknowledgement within [since, until]."""
    times: dict[tuple[str, int], list[float]] = {}
    for a in ledger.acks:
        times.setdefault((a.topic, a.partition), []).append(a.acked_at)
    out = {}
    for key, acked in times.items():
        points = [since] + sorted(t for t in acked if since <= t <= until) + [until]
        out[key] = max(b - a for a, b in zip(points, points[1:]))
    return out


def summary(values: list[float]) -> str:
    if not values:
        return "none"
    return f"median {statistics.median(values):.2f} s, max {max(values):.2f} s ({len(values)})"
