"""A ZooKeeper outage under load, for the test and the benchmark (bench/zookeeper_outage.py):
every node of the ensemble stopped for `outage_s` while an idempotent producer runs, then
started again on its ports; then every acknowledged record is read back at its offset.

What the brokers do meanwhile is docs/CLUSTER.md's rule for a SUSPENDED session: they keep
acknowledging (the storage fence, not ZooKeeper, guards each acknowledgement)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from topiclake.broker.cluster.ensemble import Ensemble

from tests.support.cluster_brokers import ClusterBrokers
from tests.support.cluster_clients import ConfluentProducer, Ledger
from tests.support.waits import wait_for

KAZOO_LOGGER = "kazoo.client.broker-"


@dataclass
class TimedLedger(Ledger):
    """A Ledger that also keeps when each acknowledgement arrived (monotonic seconds)."""

    times: list[float] = field(default_factory=list)

    def ack(self, value: bytes, partition: int, offset: int) -> None:
        super().ack(value, partition, offset)
        self.times.append(time.monotonic())


@dataclass(frozen=True)
class Outage:
    acked_before: int
    acked_during: int  # acknowledgements that arrived while no ZooKeeper node ran
    acked_after: int
    lost: int  # acknowledged records not read back at their offset
    offsets_reused: int
    longest_gap_s: float  # the longest time without any acknowledgement, from the outage on
    kazoo_lines: dict[int, int]  # broker id -> kazoo's log lines while ZooKeeper was away
    log_lines: dict[int, int]  # broker id -> every log line meanwhile
    delivery_errors: int


def read_back(bootstrap: str, topic: str, partitions: int) -> dict[tuple[int, int], bytes]:
    """(partition, offset) -> value of every record, read from the start of each partition."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "read-back", "enable.auto.commit": False})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found: dict[tuple[int, int], bytes] = {}
    last = {p: -1 for p in range(partitions)}  # the highest offset read (a takeover may leave a gap)
    deadline = time.monotonic() + 60
    while any(last[p] < ends[p] - 1 for p in last) and time.monotonic() < deadline:
        for m in consumer.consume(1000, 0.5):
            if m.error() is None:
                found[(m.partition(), m.offset())] = m.value()
                last[m.partition()] = max(last[m.partition()], m.offset())
    consumer.close()
    return found


def zookeeper_outage(ensemble: Ensemble, brokers: ClusterBrokers, topic: str, partitions: int,
                     outage_s: float, *, rate: float = 200.0, settle_s: float = 5.0) -> Outage:
    ledger, stop = TimedLedger(), threading.Event()
    producer = ConfluentProducer(brokers.bootstrap, topic, partitions, ledger, stop, rate=rate)
    producer.start()
    try:
        wait_for(lambda: len(ledger.acked) >= 100, 30, what="the first acknowledgements")
        marks = {b: len(brokers.brokers[b].log_path.read_bytes()) for b in brokers.brokers}
        for node_id in sorted(ensemble.nodes):
            ensemble.stop_node(node_id)
        down_at = time.monotonic()
        time.sleep(outage_s)
        up_at = time.monotonic()
        for node_id in sorted(ensemble.nodes):
            ensemble.start_node(node_id)
        ensemble.wait_serving()
        time.sleep(settle_s)
    finally:
        stop.set()
        producer.join(120)
    texts = {b: brokers.brokers[b].log_path.read_bytes()[mark:].decode(errors="replace") for b, mark in marks.items()}
    times = list(ledger.times)
    stamps = [down_at] + [t for t in times if t >= down_at] + [time.monotonic()]
    stored = read_back(brokers.bootstrap, topic, partitions)
    return Outage(
        acked_before=sum(t < down_at for t in times), acked_during=sum(down_at <= t < up_at for t in times),
        acked_after=sum(t >= up_at for t in times),
        lost=sum(stored.get(where) != value if where[1] >= 0 else value not in stored.values()
                 for value, where in ledger.acked.items()),
        offsets_reused=sum(len(v) > 1 for v in ledger.offsets.values()),
        longest_gap_s=max(b - a for a, b in zip(stamps, stamps[1:])),
        kazoo_lines={b: sum(KAZOO_LOGGER in line for line in text.splitlines()) for b, text in texts.items()},
        log_lines={b: len(text.splitlines()) for b, text in texts.items()},
        delivery_errors=len(ledger.delivery_errors) + (producer.error is not None) + producer.unflushed)
