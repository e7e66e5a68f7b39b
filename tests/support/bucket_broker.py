"""Broker processes on a bucket root (docs/OBJECT-STORAGE.md), each with a new empty cache
directory, and a producer that records what was acknowledged, for the fault tests."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.support.broker_process import BrokerProcess
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import Manifest, load_newest
from topiclake.store.objects import ObjectStore

SETTINGS = """
[broker]
num_partitions = 2
[groups]
min_session_timeout_ms = 1000
initial_rebalance_delay_ms = 0
offsets_topic_partitions = 1
[security]
authorizer = "acl"
super_users = ["User:ANONYMOUS"]
[storage]
flush_ms = 100
seal_ms = 1500
lease_ms = 2000
delete_grace_ms = 3000
"""


class BucketBrokers:
    def __init__(self, directory: Path, root, *, storage: str = ""):
        """`storage`: more [storage] lines, overriding the fault tests' quick settings."""
        self.directory = Path(directory)
        self.root = root  # an S3Root
        self.config = self.directory / "topiclake.toml"
        lines = SETTINGS.splitlines()
        overridden = {line.split("=")[0].strip() for line in storage.splitlines() if "=" in line}
        kept = [line for line in lines if line.split("=")[0].strip() not in overridden]
        at = kept.index("[storage]") + 1
        self.config.write_text("\n".join(kept[:at] + storage.strip().splitlines() + kept[at:]) + "\n")
        self.started: list[BrokerProcess] = []

    def start(self, name: str, timeout: float = 90.0, args: tuple[str, ...] = (), port: int | None = None) -> BrokerProcess:
        """A broker with the new empty cache directory `<tmp>/<name>-cache` (`args`: more flags;
        `port`: a dead broker's, for clients that keep running across the takeover)."""
        cache = self.directory / f"{name}-cache"
        broker = BrokerProcess(self.directory / name, port, root=str(self.root), config=self.config,
                               log_path=self.directory / f"{name}.log", args=("--cache-dir", str(cache), *args))
        self.started.append(broker)
        return broker.start(timeout)

    def kill_all(self) -> None:
        for broker in self.started:
            if broker.proc is not None and broker.proc.poll() is None:
                broker.proc.kill()  # SIGKILL also ends a SIGSTOPped process
                broker.proc.wait(10)


class AckedProducer:
    """An idempotent acks=all producer sending `<tag>-<n>` values from a thread until stopped,
    remembering every value acknowledged and every error it was told of."""

    def __init__(self, bootstrap: str, topic: str, tag: str, **config):
        from confluent_kafka import Producer

        self.topic, self.tag = topic, tag
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 5, "message.timeout.ms": 120_000, **config})
        self.acked: list[tuple[bytes, int, int]] = []  # (value, partition, offset)
        self.failed: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, error, message) -> None:
        if error is None:
            self.acked.append((message.value(), message.partition(), message.offset()))
        else:
            self.failed.append(str(error))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.producer.produce(self.topic, value=f"{self.tag}-{self.sent}".encode(), on_delivery=self._delivered)
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(0.002)

    def start(self) -> "AckedProducer":
        self._thread.start()
        return self

    def wait_acked(self, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < count:
            assert time.monotonic() < deadline, f"only {len(self.acked)} of {count} acknowledged: {self.failed[:3]}"
            time.sleep(0.05)

    def stop(self, flush_s: float = 0.0) -> None:
        self._stop.set()
        self._thread.join(10)
        if flush_s:
            self.producer.flush(flush_s)


def transactions(bootstrap: str, topic: str, rounds: tuple[bool, ...], timestamp: int = 0) -> tuple[list[int], list[int]]:
    """One transaction of 20 records per round (True: committed), at `timestamp` (0: now), to
    partition 0; (committed, aborted) offsets."""
    from confluent_kafka import Producer

    done: dict[bool, list[int]] = {True: [], False: []}
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn", "linger.ms": 5})
    producer.init_transactions(30)
    for n, commit in enumerate(rounds):
        producer.begin_transaction()
        for i in range(20):
            producer.produce(topic, value=b"r%d-%d" % (n, i), partition=0, timestamp=timestamp,
                             on_delivery=lambda err, msg, c=commit: done[c].append(msg.offset()))
        producer.flush(30)
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    return done[True], done[False]


def open_transaction(bootstrap: str, topic: str, transactional_id: str, count: int = 10):
    """(producer, offsets): a transaction of `count` records `<transactional_id>-<n>` to partition
    0, acknowledged and left open for the caller to commit or abort."""
    from confluent_kafka import Producer

    offsets: list[int] = []
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(count):
        producer.produce(topic, value=f"{transactional_id}-{i}".encode(), partition=0,
                         on_delivery=lambda err, msg: offsets.append(-1 if err else msg.offset()))
    producer.flush(30)
    assert len(offsets) == count and min(offsets) >= 0, f"not all acknowledged: {offsets}"
    return producer, offsets


def consume_all(bootstrap: str, topic: str, expected: int, *, group: str = "reader", timeout: float = 60.0,
                commit: bool = False) -> list[tuple[bytes, int, int]]:
    """(value, partition, offset) of records read from the start until `expected` arrived and no
    more came for two seconds (or `timeout`)."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[tuple[bytes, int, int]] = []
    deadline = time.monotonic() + timeout
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                if len(got) >= expected and time.monotonic() - quiet_since > 2:
                    break
                continue
            got.append((message.value(), message.partition(), message.offset()))
            quiet_since = time.monotonic()
        if commit:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def share_consume(bootstrap: str, topic: str, reset: str, expected: int, timeout: float = 60.0) -> list[tuple[bytes, int]]:
    """(value, offset) of the records a new share group with `share.auto.offset.reset = reset`
    delivers (implicit acknowledgement) until `expected` arrived (or `timeout`)."""
    import uuid

    from confluent_kafka import ShareConsumer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    group = f"sg-{uuid.uuid4().hex[:8]}"
    config = ConfigResource(ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", reset, incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the result: its futures die with it
    for future in admin.incremental_alter_configs([config]).values():
        future.result(10)
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "implicit"})
    consumer.subscribe([topic])
    got: list[tuple[bytes, int]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            got += [(m.value(), m.offset()) for m in consumer.poll(timeout=0.3) if m.error() is None]
    finally:
        consumer.close()
    return got


def committed(bootstrap: str, topic: str, group: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def wait_sealed(store: ObjectStore, keys: PartitionKeys, end: int, timeout_s: float = 60) -> Manifest:
    """The newest manifest once its closed segments reach `end`."""
    deadline = time.monotonic() + timeout_s
    while (manifest := load_newest(store, keys)).end_offset < end:
        assert time.monotonic() < deadline, f"{keys.prefix} sealed only up to {manifest.end_offset}, not {end}"
        time.sleep(0.2)
    return manifest


def cached_logs(cache: Path, topic: str, partition: int) -> dict[int, int]:
    """base offset -> size of the partition's `.log` files in the broker's cache."""
    return {int(path.name.split(".")[0]): path.stat().st_size
            for path in (cache / "log" / f"{topic}-{partition}").glob("*.log")}


def create_topic(bootstrap: str, topic: str, **config: str) -> None:
    """A topic of one partition (`config`: its configs)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the result: its futures die with it
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(30)


T0 = int(time.time() * 1000) - 3_600_000  # the plain records' timestamps: T0 + their number
VALUE = b"x" * 1000


def plain(n: int) -> bytes:
    return b"p%05d" % n + VALUE


def produce_plain(bootstrap: str, topic: str, first: int, count: int) -> dict[bytes, int]:
    """`count` records `plain(n)` (n from `first`, timestamp T0 + n), acknowledged; value -> offset."""
    from confluent_kafka import Producer

    # Batches well under the topic's segment.bytes (a batch larger than a segment is refused).
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.num.messages": 20})
    acked: dict[bytes, int] = {}
    for n in range(first, first + count):
        producer.produce(topic, value=plain(n), partition=0, timestamp=T0 + n,
                         on_delivery=lambda err, msg: acked.__setitem__(msg.value(), msg.offset()) if not err else None)
        producer.poll(0)
    assert producer.flush(60) == 0 and len(acked) == count
    return acked
