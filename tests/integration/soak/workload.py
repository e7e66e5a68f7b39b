"""The soak's clients (confluent-kafka, as a user would run them): idempotent acks=all producers,
a transactional producer that commits and aborts, a consumer group that commits, and an observer
that reads the groups' committed offsets back from the broker. Each is a thread that runs until
its `stop` event is set and writes what it was told into the Ledger."""

from __future__ import annotations

import logging
import random
import threading
import time
import traceback
from dataclasses import dataclass, field

from .ledger import Ledger

log = logging.getLogger(__name__)

PAD = b"." * 80  # ~100-byte values: small segments fill and roll within seconds
CONSUMER_GROUP = "soak-readers"


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)
    keys: int | None = None  # a small key space (compaction has something to remove); None: unique keys


# Under segment.bytes: after an outage a producer's backlog would otherwise go out in batches
# larger than a segment, which the broker refuses for good (RECORD_LIST_TOO_LARGE), as Kafka does.
MAX_BATCH_BYTES = 8192


def client_config(bootstrap: str, **extra) -> dict:
    """Shared by every client: reconnect quickly after a broker kill, librdkafka's log to ours."""
    return {"bootstrap.servers": bootstrap, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
            "logger": logging.getLogger("soak.librdkafka"), **extra}


def create_topics(bootstrap: str, topics: list[TopicSpec]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(client_config(bootstrap))
    futures = admin.create_topics([NewTopic(t.name, t.partitions, 1, config=t.config) for t in topics])
    for future in futures.values():
        future.result(30)


class Paced:
    """Sleeps so that calls to `tick()` run at `rate` per second, without bursting to catch up
    after a stall (a stalled client resumes at the rate, it does not flood)."""

    def __init__(self, rate: float):
        self.interval = 1.0 / rate
        self.next = time.monotonic()

    def tick(self, stop: threading.Event) -> None:
        self.next = max(self.next + self.interval, time.monotonic() - 1.0)
        stop.wait(max(0.0, self.next - time.monotonic()))


class Client(threading.Thread):
    """A client thread: `work()` until `stop` is set; an exception ends it and is kept in `error`
    (the soak reports it: a client that died proves nothing)."""

    def __init__(self, name: str, stop: threading.Event):
        super().__init__(name=name, daemon=True)
        self.stop = stop
        self.error: str | None = None

    def run(self) -> None:
        try:
            self.work()
        except Exception:  # noqa: BLE001
            self.error = traceback.format_exc()
            log.exception("%s died", self.name)

    def work(self) -> None:
        raise NotImplementedError


class IdempotentProducer(Client):
    """enable.idempotence (acks=all, retries without duplicates or reordering) over its topics,
    round robin; every delivery report goes to the ledger."""

    def __init__(self, name: str, bootstrap: str, topics: list[TopicSpec], rate: float, ledger: Ledger,
                 rng: random.Random, stop: threading.Event, flush_timeout_s: float = 120.0):
        super().__init__(name, stop)
        self.bootstrap, self.topics, self.rate, self.ledger, self.rng = bootstrap, topics, rate, ledger, rng
        self.flush_timeout_s = flush_timeout_s
        self.unflushed = 0
        self._fatal = threading.Event()

    def _new_producer(self):
        from confluent_kafka import Producer

        def on_error(err):
            if err.fatal():
                self.ledger.fatal(self.name, err)
                self._fatal.set()

        return Producer(client_config(self.bootstrap, **{
            "enable.idempotence": True, "acks": "all", "linger.ms": 5, "message.timeout.ms": 120000,
            "batch.size": MAX_BATCH_BYTES,
            "error_cb": on_error}))

    def work(self) -> None:
        producer = self._new_producer()
        pace = Paced(self.rate)
        seq = 0
        while not self.stop.is_set():
            if self._fatal.is_set():  # a fatal error ends a producer instance: a user would make a new one
                producer.flush(10)
                producer = self._new_producer()
                self._fatal.clear()
            topic = self.topics[seq % len(self.topics)]
            key = (f"k{self.rng.randrange(topic.keys)}" if topic.keys else f"{self.name}-{seq}").encode()
            produce(producer, self.ledger, topic.name, key, f"{topic.name}/{self.name}/{seq}/".encode() + PAD,
                    self.stop)
            producer.poll(0)
            seq += 1
            pace.tick(self.stop)
        self.unflushed = producer.flush(self.flush_timeout_s)


def produce(producer, ledger: Ledger, topic: str, key: bytes, value: bytes, stop: threading.Event,
            txn: int | None = None, partition: int | None = None) -> None:
    produced_at = ledger.produced(value, txn)
    kwargs = {} if partition is None else {"partition": partition}
    while True:
        try:
            producer.produce(topic, key=key, value=value, **kwargs,
                             on_delivery=lambda err, msg: ledger.delivered(err, msg, produced_at, txn))
            return
        except BufferError:  # the local queue is full while the broker is down: wait, as users do
            if stop.is_set():
                return  # stopping: this one stays unsent (the ledger counts it produced, never acknowledged)
            producer.poll(0.1)


class TransactionalProducer(Client):
    """Transactions of 1-`max_records` records over the topic's partitions, each committed or (by
    the seeded RNG, with probability `abort_ratio`) aborted. A broker kill in the middle is
    handled as Kafka's documentation says: retry what is retriable, abort what requires it,
    start a new producer (init_transactions fences the old one) after a fatal error."""

    def __init__(self, bootstrap: str, topic: TopicSpec, rate: float, ledger: Ledger, rng: random.Random,
                 stop: threading.Event, abort_ratio: float = 0.3, max_records: int = 12):
        super().__init__("txn", stop)
        self.bootstrap, self.topic, self.rate, self.ledger, self.rng = bootstrap, topic, rate, ledger, rng
        self.abort_ratio, self.max_records = abort_ratio, max_records
        self.txn = 0

    def _new_producer(self):
        from confluent_kafka import Producer

        def on_error(err):
            if err.fatal():
                self.ledger.fatal(self.name, err)

        producer = Producer(client_config(self.bootstrap, **{
            "transactional.id": "soak-txn", "linger.ms": 5, "transaction.timeout.ms": 60000,
            "batch.size": MAX_BATCH_BYTES,
            "message.timeout.ms": 60000, "error_cb": on_error}))
        retrying(lambda: producer.init_transactions(30), deadline_s=300)
        return producer

    def work(self) -> None:
        producer = self._new_producer()
        pace = Paced(self.rate)
        while not self.stop.is_set():
            self.txn += 1
            commit = self.rng.random() >= self.abort_ratio
            try:
                producer.begin_transaction()
                for i in range(self.rng.randint(1, self.max_records)):
                    produce(producer, self.ledger, self.topic.name, f"t{self.txn}-{i}".encode(),
                            f"{self.topic.name}/txn{self.txn}/{i}/".encode() + PAD, self.stop, txn=self.txn,
                            partition=i % self.topic.partitions)
                    producer.poll(0)
                    pace.tick(self.stop)
                outcome = end_transaction(producer, commit)
            except Exception as exc:  # noqa: BLE001  (KafkaException: classified below)
                outcome = abort_after(producer, exc)
            self.ledger.transaction_ended(self.txn, outcome)
            if outcome == "unknown":
                producer = self._new_producer()


def _kafka_error(exc: Exception):
    from confluent_kafka import KafkaException

    return exc.args[0] if isinstance(exc, KafkaException) and exc.args else None


def retrying(call, deadline_s: float):
    """Retry a transactional call while its error is retriable (the broker is restarting)."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return call()
        except Exception as exc:  # noqa: BLE001
            err = _kafka_error(exc)
            if err is None or not err.retriable() or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def end_transaction(producer, commit: bool) -> str:
    try:
        if commit:
            retrying(lambda: producer.commit_transaction(30), deadline_s=300)
            return "committed"
        retrying(lambda: producer.abort_transaction(30), deadline_s=300)
        return "aborted"
    except Exception as exc:  # noqa: BLE001
        return abort_after(producer, exc)


def abort_after(producer, exc: Exception) -> str:
    """After a failed transactional call: "aborted" when the transaction could be aborted,
    "unknown" when the producer is done for (a fatal error: the log's markers tell)."""
    err = _kafka_error(exc)
    if err is None:
        raise exc
    if err.fatal() or not err.txn_requires_abort():
        log.warning("transaction ended with %s", err)
        return "unknown"
    try:
        retrying(lambda: producer.abort_transaction(30), deadline_s=300)
        return "aborted"
    except Exception as again:  # noqa: BLE001
        log.warning("abort after %s failed: %s", err, again)
        return "unknown"


class GroupMember(Client):
    """One member of the consumer group (classic protocol, read_committed): consumes its
    assignment and commits what it consumed about every `commit_every_s` seconds."""

    def __init__(self, name: str, bootstrap: str, topics: list[str], ledger: Ledger, stop: threading.Event,
                 commit_every_s: float = 1.0):
        super().__init__(name, stop)
        self.bootstrap, self.topics, self.ledger, self.commit_every_s = bootstrap, topics, ledger, commit_every_s

    def work(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer(client_config(self.bootstrap, **{
            "group.id": CONSUMER_GROUP, "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "isolation.level": "read_committed", "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
            "client.id": self.name}))
        consumer.subscribe(self.topics)
        last_commit = time.monotonic()
        uncommitted = False
        try:
            while not self.stop.is_set():
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    self.ledger.consumed_record(msg)
                    uncommitted = True
                if uncommitted and time.monotonic() - last_commit >= self.commit_every_s:
                    uncommitted = not self._commit(consumer)
                    last_commit = time.monotonic()
            if uncommitted:
                self._commit(consumer)
        finally:
            consumer.close()

    def _commit(self, consumer) -> bool:
        try:
            self.ledger.committed(CONSUMER_GROUP, consumer.commit(asynchronous=False))
            return True
        except Exception:  # noqa: BLE001  (the broker is down or the group rebalancing: next time)
            self.ledger.commit_failed()
            return False


class OffsetsObserver(Client):
    """Reads the groups' committed offsets from the broker (OffsetFetch, as kafka-consumer-groups
    does) every `every_s` seconds; a down broker is simply not observed. kafka-python's admin
    client: confluent-kafka 2.16's aborts the process now and then (an assertion in librdkafka's
    rd_kafka_enq_once_del_source_return) when its broker dies under an admin request."""

    def __init__(self, bootstrap: str, groups: list[str], ledger: Ledger, stop: threading.Event,
                 every_s: float = 1.0):
        super().__init__("observer", stop)
        self.bootstrap, self.groups, self.ledger, self.every_s = bootstrap, groups, ledger, every_s
        self._admin = None

    def observe_once(self) -> None:
        from kafka import KafkaAdminClient

        for group in self.groups:
            at = time.monotonic()
            try:
                if self._admin is None:
                    self._admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=5000,
                                                   reconnect_backoff_max_ms=500)
                offsets = self._admin.list_group_offsets({group: None})[group]
            except Exception:  # noqa: BLE001  (broker down, coordinator loading: not observed this time)
                continue
            self.ledger.observed(at, group, [(tp.topic, tp.partition, meta.offset) for tp, meta in offsets.items()])

    def work(self) -> None:
        try:
            while not self.stop.wait(self.every_s):
                self.observe_once()
            self.observe_once()  # once more after everything stopped
        finally:
            if self._admin is not None:
                self._admin.close()
