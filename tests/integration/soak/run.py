"""The soak, start to end: a broker over a fresh storage root, the clients, the lake process and
the killers for `duration_s`; then everything stops in order (clients flush, the broker stops
cleanly, the lake process runs a last ingest) and the checker judges what is on disk.

Bounded: loopback only, a fixed duration, fixed client rates; the seed decides the kill
moments and the workload's random choices (the timing of a shared machine does the rest), and
is printed so that a failure can be rerun with it.
"""

from __future__ import annotations

import logging
import random
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.table.delta import committed_offsets, load_table
from topiclake.lake.table.location import GROUP_PREFIX
from topiclake.segments.storage import StorageLayout, TopicRegistry

from tests.support.broker_process import BrokerProcess
from tests.support.lake import read_table
from . import check
from .bucket import BucketSoakRoot
from .cluster import BrokerFaults, ClusterShape, SoakCluster, ZooKeeperKiller, failover_s, longest_gaps, summary
from .faults import BrokerKiller, Fault, LakeKiller, LakeProcess
from .ledger import Ledger
from .workload import (CONSUMER_GROUP, GroupMember, IdempotentProducer, OffsetsObserver, TopicSpec,
                       TransactionalProducer, create_topics)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SoakConfig:
    work: Path
    duration_s: float
    seed: int
    rate: float = 200.0  # records/s of each idempotent producer
    txn_rate: float = 50.0  # records/s of the transactional producer
    consumers: int = 2
    broker_kill_gap_s: tuple[float, float] = (10.0, 30.0)
    lake_kill_gap_s: tuple[float, float] = (5.0, 40.0)  # after the lake process is up (cold kills)
    lake_cold_kill_share: float = 0.3  # the other kills land in a warm cycle
    lake_pause_s: float = 2.0
    retention_ms: int = 20_000
    # Small, so that compaction and retention have closed segments within the run; not tiny: every
    # segment is at least one ingest task, and a lagging ingest reads them all at once.
    segment_bytes: int = 256 * 1024
    target_task_bytes: int = 1024 * 1024
    compacted_keys: int = 40
    lake_start_timeout_s: float = 600.0
    cluster: ClusterShape | None = None  # bench/soak.py --cluster: brokers and ZooKeeper of cluster.py
    lake: bool = True  # the lake process (ingest, compaction, retention, and its kills)
    transactions: bool = True  # the transactional producer
    bucket: bool = False  # bench/soak.py --bucket: one broker on an object-store root (a versitygw of its own)


def soak_topics(config: SoakConfig) -> dict[str, TopicSpec]:
    small = {"segment.bytes": str(config.segment_bytes)}
    return {
        "plain": TopicSpec("soak.plain", 3),
        "compacted": TopicSpec("soak.compacted", 2, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.2",
                                                     **small}, keys=config.compacted_keys),
        "retained": TopicSpec("soak.retained", 2, {"retention.ms": str(config.retention_ms), **small}),
        "transactional": TopicSpec("soak.txn", 2),
    }


@dataclass(slots=True)
class SoakReport:
    seed: int
    duration_s: float
    acknowledged: dict[str, int]
    transactions: dict[str, int]
    consumed: int
    commits: int
    faults: list[Fault]
    unavailability_s: list[float]
    lake_steps: dict[str, list[str]]
    verdict: check.Verdict
    problems: list[str] = field(default_factory=list)  # the run itself went wrong (not the data)
    stages: dict[str, float] = field(default_factory=dict)  # seconds per stage of the run
    failovers: dict[str, list[float]] = field(default_factory=dict)  # cluster: fault kind -> seconds
    partition_gaps: dict[str, float] = field(default_factory=dict)  # "topic-p" -> longest gap in acks (s)

    @property
    def passed(self) -> bool:
        return self.verdict.passed and not self.problems

    def kills(self, target: str) -> int:
        return sum(f.target == target for f in self.faults)

    def format(self) -> str:
        v = self.verdict
        lake_kills = [f.phase for f in self.faults if f.target == "lake"]
        lines = [
            f"soak seed {self.seed}: {self.duration_s:.0f} s of faults",
            f"records acknowledged: {sum(self.acknowledged.values())} "
            f"({', '.join(f'{t} {n}' for t, n in sorted(self.acknowledged.items()))})",
            "transactions: " + ", ".join(f"{k} {n}" for k, n in sorted(self.transactions.items())),
            f"consumer group: {self.consumed} records read (re-reads after rebalances included), "
            f"{self.commits} offsets committed",
            "lake steps: " + (", ".join(f"{k} {len(n)}" for k, n in sorted(self.lake_steps.items())) or "none"),
            f"faults injected: {self.kills('broker')} broker kills, {self.kills('lake')} ingest kills"
            + (f" (in phase: {', '.join(f'{p} {lake_kills.count(p)}' for p in sorted(set(lake_kills)))})"
               if lake_kills else ""),
            f"removed by policy: compaction {v.removed_by_compaction}, retention {v.removed_by_retention}; "
            f"table rows {v.table_rows}",
            f"lost {v.lost}, duplicated {v.duplicated}, offsets reused {v.offsets_reused}",
            "stages: " + ", ".join(f"{k} {t:.0f} s" for k, t in self.stages.items()),
        ]
        if self.failovers:
            lines.append(f"cluster faults: {self.kills('broker')} broker kills, {self.kills('pause')} leader pauses, "
                         f"{self.kills('zookeeper')} ZooKeeper node kills")
            lines.extend(f"failover after a {kind} (fault -> every partition the broker led acknowledging again): "
                         f"{summary(times)}" for kind, times in self.failovers.items())
        if self.partition_gaps:
            lines.append("longest unavailability per partition (no acknowledgement): " + ", ".join(
                f"{k} {t:.2f} s" for k, t in sorted(self.partition_gaps.items())))
        if self.unavailability_s:
            lines.append(f"unavailability after a broker kill (kill -> a produce succeeds): longest "
                         f"{max(self.unavailability_s):.2f} s, median {statistics.median(self.unavailability_s):.2f} s")
        for failures in (k for k in self.lake_steps if k.startswith("failed")):
            lines.append(f"{failures}: " + "; ".join(sorted(set(self.lake_steps[failures])))[:600])
        for c in v.checks:
            lines.append(f"{'ok  ' if c.passed else 'FAIL'} {c.name}" + ("" if c.passed else f": {c.count}"))
            lines.extend(f"       {p}" for p in c.problems)
        lines.extend(f"FAIL {p}" for p in self.problems)
        lines.append("soak " + ("passed" if self.passed else "FAILED"))
        return "\n".join(lines)


def _log_to(path: Path) -> logging.Handler:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s"))
    for name in ("soak.librdkafka", "kafka", __package__):  # kafka: kafka-python (the observer)
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return handler


class Stages(dict):
    """Seconds per stage: `lap(name)` closes the stage that ran since the previous lap."""

    def __init__(self):
        super().__init__()
        self._last = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self[name] = now - self._last
        self._last = now


def run_soak(config: SoakConfig, *, spark=None, say=print) -> SoakReport:
    """The soak; `spark`: a session for the final ingest (else the lake process runs it)."""
    stages = Stages()
    work = config.work
    work.mkdir(parents=True, exist_ok=True)
    handler = _log_to(work / "soak.log")
    say(f"soak seed {config.seed}, {config.duration_s:.0f} s, work dir {work}")
    rng = random.Random(config.seed)
    topics = soak_topics(config)
    if not config.transactions:
        del topics["transactional"]
    ledger = Ledger(work / "ledger.jsonl")
    s3 = None
    if config.bucket:
        s3 = BucketSoakRoot(work)
        broker = s3.start_broker()
        say(f"bucket root {s3.url} on versitygw {s3.server.endpoint}, cache {broker.data}")
    elif config.cluster is not None:
        broker = SoakCluster(work, config.cluster)
        say(f"cluster: {config.cluster.brokers} brokers ({broker.bootstrap}), ZooKeeper "
            f"{broker.ensemble.connect_string}")
    else:
        broker = BrokerProcess(work / "data", log_path=work / "broker.log").start()
    lake = None
    problems: list[str] = []
    try:
        create_topics(broker.bootstrap, list(topics.values()))
        ingest_groups = [GROUP_PREFIX + t.name for t in topics.values()] if config.lake else []
        stop_clients, stop_faults = threading.Event(), threading.Event()
        killers = []
        if config.lake:
            lake = LakeProcess(work, ["--root", str(broker.data), "--topics",
                                      ",".join(t.name for t in topics.values()),
                                      "--protect-groups", ",".join(ingest_groups + [CONSUMER_GROUP]),
                                      "--bootstrap", broker.bootstrap, "--pause-s", str(config.lake_pause_s),
                                      "--target-task-bytes", str(config.target_task_bytes)])
            lake.start()
            if not lake.ready.wait(config.lake_start_timeout_s):  # the fault clock starts with Spark up
                problems.append(f"the lake process was not up within {config.lake_start_timeout_s:.0f} s")
            killers.append(LakeKiller(lake, random.Random(rng.random()), stop_faults, config.lake_kill_gap_s,
                                      config.lake_cold_kill_share))
        producers = [
            IdempotentProducer("idem-a", broker.bootstrap, [topics["plain"], topics["retained"]], config.rate, ledger,
                               random.Random(rng.random()), stop_clients),
            IdempotentProducer("idem-b", broker.bootstrap, [topics["compacted"], topics["plain"]], config.rate, ledger,
                               random.Random(rng.random()), stop_clients),
        ]
        if config.transactions:
            producers.append(TransactionalProducer(broker.bootstrap, topics["transactional"], config.txn_rate, ledger,
                                                   random.Random(rng.random()), stop_clients))
        stop_members = threading.Event()
        members = [GroupMember(f"member-{i}", broker.bootstrap, [t.name for t in topics.values()], ledger, stop_members)
                   for i in range(config.consumers)]
        stop_observer = threading.Event()
        observer = OffsetsObserver(broker.bootstrap, [CONSUMER_GROUP] + ingest_groups, ledger, stop_observer)
        if config.cluster is not None:
            killers += [BrokerFaults(broker, [t.name for t in topics.values()], random.Random(rng.random()),
                                     stop_faults, config.broker_kill_gap_s),
                        ZooKeeperKiller(broker, random.Random(rng.random()), stop_faults,
                                        config.cluster.zookeeper_kill_gap_s)]
        else:
            killers.append(BrokerKiller(broker, random.Random(rng.random()), stop_faults, config.broker_kill_gap_s))
        clients = [*producers, *members, observer]
        stages.lap("start")
        faults_from = time.monotonic()
        for thread in [*clients, *killers]:
            thread.start()
        stop_faults.wait(config.duration_s)
        stop_faults.set()
        for killer in killers:
            killer.join()
        faults_until = time.monotonic()
        stages.lap("faults")
        say(f"faults stopped after {stages['faults']:.0f} s; draining")
        if config.cluster is not None:
            broker.ensure_up()
        elif broker.proc.poll() is not None:  # the last restart failed: the drain needs a broker
            broker.start(timeout=60)
        stop_clients.set()
        for thread in producers:
            thread.join()
        stop_members.set()
        for thread in members:
            thread.join()
        stop_observer.set()
        observer.join()
        problems += [t.error for t in [*clients, *killers] if t.error]
        problems += [f"{p.name}: {p.unflushed} records never delivered" for p in producers
                     if getattr(p, "unflushed", 0)]
        rc = broker.stop(60)
        if rc != 0:
            problems.append(f"the broker's clean stop exited {rc}")
        stages.lap("drain")
        if lake is None:
            pass
        elif spark is None:
            say("broker stopped; final ingest")
            if lake.finish(timeout_s=600) is None:
                problems.append(f"the final ingest did not finish: {lake.lines[-3:]}")
        else:  # a warm session of the caller's (the test suite's shared one)
            lake.stop()
            ingest(spark, IngestOptions(topics=tuple(t.name for t in topics.values()), root=broker.data,
                                        bootstrap="none", target_task_bytes=config.target_task_bytes))
        stages.lap("final ingest")
        faults = sorted((f for k in killers for f in k.faults), key=lambda f: f.at)
        problems += [f"{f.target} restart failed: {f.restart_error}" for f in faults if f.restart_error]
        if s3 is not None:
            verdict = judge_logs(s3.read_logs(topics), s3.configs(topics), ledger, topics)
        else:
            verdict = judge(broker.data, topics, ledger, tables=config.lake)
        stages.lap("check")
    finally:
        ledger.close()
        if lake is not None:
            lake.stop()
        broker.kill()
        if s3 is not None:
            s3.server.stop()
        for name in ("soak.librdkafka", "kafka", __package__):
            logging.getLogger(name).removeHandler(handler)
    by_topic: dict[str, int] = {}
    for ack in ledger.acks:
        by_topic[ack.topic] = by_topic.get(ack.topic, 0) + 1
    outcomes = list(ledger.txn_outcomes.values())
    failovers, gaps = {}, {}
    if config.cluster is not None:
        for kind in ("broker", "pause"):
            times = [failover_s(f, ledger) for f in faults if f.target == kind]
            problems += [f"a {kind} fault's partitions never acknowledged again" for t in times if t is None]
            failovers[{"broker": "kill -9", "pause": "SIGSTOP"}[kind]] = [t for t in times if t is not None]
        gaps = {f"{t}-{p}": gap for (t, p), gap in longest_gaps(ledger, faults_from, faults_until).items()}
    return SoakReport(
        seed=config.seed, duration_s=config.duration_s, acknowledged=by_topic,
        transactions={k: outcomes.count(k) for k in ("committed", "aborted", "unknown")},
        consumed=ledger.consumed_count, commits=len(ledger.commits), faults=faults,
        unavailability_s=unavailability(faults, ledger) if config.cluster is None else [],
        lake_steps=lake.outcomes() if lake else {}, verdict=verdict,
        problems=problems, stages=dict(stages), failovers=failovers, partition_gaps=gaps)


def unavailability(faults: list[Fault], ledger: Ledger) -> list[float]:
    """Per broker kill: from the kill until the first acknowledgement of a record produced after it."""
    out = []
    for f in faults:
        if f.target != "broker":
            continue
        first = min((a.acked_at for a in ledger.acks if a.produced_at >= f.at), default=None)
        if first is not None:
            out.append(first - f.at)
    return out


def judge(root: Path, topics: dict[str, TopicSpec], ledger: Ledger, *, tables: bool = True) -> check.Verdict:
    layout = StorageLayout(root)
    registry = TopicRegistry(layout)
    configs = {t.name: registry.get(t.name).log_config for t in topics.values()}
    logs = {(t.name, p): check.read_partition_log(layout, t.name, p)
            for t in topics.values() for p in range(t.partitions)}
    return judge_logs(logs, configs, ledger, topics,
                      tables=read_tables(layout, topics) if tables else None)


def judge_logs(logs: dict[tuple[str, int], check.PartitionLog], configs: dict, ledger: Ledger,
               topics: dict[str, TopicSpec], *, tables: dict[str, check.TableRows] | None = None) -> check.Verdict:
    verdict = check.Verdict()
    check.check_log(verdict, logs, configs, ledger)
    if tables is not None:
        check.check_tables(verdict, logs, configs, tables, ledger)
    check.check_consumed(verdict, logs, configs, ledger)
    check.check_group_offsets(verdict, ledger.commits, ledger.observations)
    check.check_clients(verdict, ledger, {topics["transactional"].name} if "transactional" in topics else set())
    return verdict


def read_tables(layout: StorageLayout, topics: dict[str, TopicSpec]) -> dict[str, check.TableRows]:
    tables = {}
    for t in topics.values():
        uri = str(layout.table_dir(t.name))
        group = GROUP_PREFIX + t.name
        table = load_table(uri)
        offsets = committed_offsets(table, group, [(t.name, p) for p in range(t.partitions)])
        rows = []
        if table is not None:
            data = read_table(uri)[1]
            rows = list(zip(data["partition"].to_pylist(), data["offset"].to_pylist(), data["key"].to_pylist(),
                            data["value"].to_pylist()))
        tables[t.name] = check.TableRows(rows, {p: offsets[(t.name, p)] for p in range(t.partitions)})
    return tables
