"""A seal uploads a whole segment; it runs beside the flush tick, so produces to any partition are
still answered within a few ticks while it runs (issue 29: a seal in the tick stalled them all),
and a clean stop lets a running seal finish before the partitions close."""

from __future__ import annotations

import datetime
import os
import re
import threading
import time

from tests.support.topics import create_topic
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import load_newest
from topiclake.store.objects import ObjectStore

TOPIC = "sealing-beside"
SEGMENT_BYTES = 192 * 1024 * 1024  # a roll once the bulk is in: the seal of ~200 MB (seconds) follows
VALUE = os.urandom(100 * 1024)
BULK_RECORDS = SEGMENT_BYTES // len(VALUE) + 40
SEALED = re.compile(r"^(\S+ \S+) INFO \S+: log/" + TOPIC + r"-0/?: sealed below offset \d+ in ([\d.]+) s$", re.M)


def _probe(bootstrap: str, stop: threading.Event, probes: list[tuple[float, float]]) -> None:
    """One record at a time to partition 1, each waited for: (wall time sent, seconds to its ack)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    while not stop.is_set():
        sent, started = time.time(), time.monotonic()
        producer.produce(TOPIC, b"probe", partition=1)
        assert producer.flush(30) == 0, "a probe was not acknowledged within 30 s"
        probes.append((sent, time.monotonic() - started))


def _produce_bulk(bootstrap: str) -> None:
    """About 200 MB to partition 0, acknowledged: its segment rolls, which asks for the seal."""
    from confluent_kafka import Producer

    create_topic(bootstrap, 2, TOPIC, segment_bytes=str(SEGMENT_BYTES))
    bulk = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "batch.size": 1_000_000})
    for _ in range(BULK_RECORDS):
        bulk.produce(TOPIC, VALUE, partition=0)
        bulk.poll(0)
    assert bulk.flush(120) == 0


def test_produces_are_answered_while_a_large_seal_runs(rolling_brokers):
    broker = rolling_brokers.start("sealer")
    _produce_bulk(broker.bootstrap)
    stop, probes = threading.Event(), []
    prober = threading.Thread(target=_probe, args=(broker.bootstrap, stop, probes), daemon=True)
    prober.start()
    deadline = time.monotonic() + 120
    while not (sealed := SEALED.search(broker.log_path.read_text(errors="replace"))):
        assert time.monotonic() < deadline and prober.is_alive(), "partition 0 was not sealed"
        time.sleep(0.1)
    stop.set()
    prober.join(60)
    ended = datetime.datetime.strptime(sealed.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    seal_s = float(sealed.group(2))
    during = [latency for sent, latency in probes if ended - seal_s <= sent <= ended - 0.3]
    assert seal_s >= 1.0, f"the seal took {seal_s} s: too quick to show anything"
    assert len(during) >= 3, (seal_s, probes)
    # A seal in the tick made every produce wait for it (seal_s); beside it, a few 100 ms ticks.
    assert max(during) < 1.0, f"produces waited {max(during):.2f} s during a {seal_s} s seal: {during}"


def test_a_clean_stop_lets_a_running_seal_finish(rolling_brokers):
    """SIGTERM while the bulk's seal (seconds) runs: the broker exits 0 with the seal committed."""
    broker = rolling_brokers.start("stopper")
    _produce_bulk(broker.bootstrap)
    time.sleep(0.5)  # the seal is due at the next 100 ms tick
    assert broker.stop(timeout=60) == 0, broker.log()
    text = broker.log_path.read_text(errors="replace")
    sealed, closed = SEALED.search(text), re.search(r"closed \d+ of \d+ logs", text)
    assert sealed and closed, broker.log()
    assert sealed.start() < closed.start(), "the logs closed under a running seal"  # it uses them (adopt)
    assert load_newest(ObjectStore(rolling_brokers.root), PartitionKeys(TOPIC, 0)).end_offset == BULK_RECORDS
