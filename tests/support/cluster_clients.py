"""What the cluster tests send: real clients producing and consuming throughout faults, and raw
requests to one chosen broker (Metadata, Produce, Fetch, FindCoordinator...) over the test
BrokerConnection, so that a test knows exactly which broker answered what.

The ledger keeps what every client was told: each acknowledged record's (partition, offset), and
each record the consumer group delivered. Values carry their producer and a sequence number per
partition, so order per partition can be checked from the values alone."""

from __future__ import annotations

import datetime
import threading
import time
import traceback
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_req
from kio.schema.list_offsets.v7 import request as offsets_req
from kio.schema.metadata.v12 import request as md_req
from kio.schema.produce.v9 import request as produce_req

from topiclake.client.conn import BrokerConnection
from topiclake.segments.batch import Record, build_batch

RAW_TIMEOUT = datetime.timedelta(seconds=5)


# ================================================================ raw requests to one broker
@dataclass(frozen=True)
class PartitionView:
    leader: int
    epoch: int
    replicas: tuple[int, ...]


@dataclass(frozen=True)
class ClusterView:
    brokers: frozenset[int]
    controller: int
    partitions: dict[int, PartitionView]
    error: ErrorCode = ErrorCode.none


def metadata(bootstrap: str, topic: str, timeout: float = 5.0) -> ClusterView:
    """Metadata for one topic, from exactly the broker at `bootstrap`."""
    with BrokerConnection(bootstrap, timeout=timeout) as client:
        response = client.request(md_req.MetadataRequest(
            topics=(md_req.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=topic),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    [answer] = response.topics
    return ClusterView(frozenset(b.node_id for b in response.brokers), response.controller_id,
                       {p.partition_index: PartitionView(p.leader_id, p.leader_epoch, tuple(p.replica_nodes))
                        for p in answer.partitions}, answer.error_code)


def raw_batch(*values: bytes) -> bytes:
    """A plain (non-idempotent) batch of `values`."""
    return build_batch([Record(i, int(time.time() * 1000), None, v, ()) for i, v in enumerate(values)],
                       base_offset=0)


def produce_request(topic: str, partition: int, batch: bytes) -> produce_req.ProduceRequest:
    return produce_req.ProduceRequest(transactional_id=None, acks=-1, timeout=RAW_TIMEOUT, topic_data=(
        produce_req.TopicProduceData(name=topic, partition_data=(
            produce_req.PartitionProduceData(index=partition, records=batch),)),))


def raw_produce(client: BrokerConnection, topic: str, partition: int, *values: bytes):
    """acks=all; the partition's response (error_code, base_offset)."""
    return client.request(produce_request(topic, partition, raw_batch(*values))).responses[0] \
        .partition_responses[0]


def raw_fetch(client: BrokerConnection, topic: str, partition: int, offset: int, *, epoch: int = -1):
    request = fetch_req.FetchRequest(max_wait=datetime.timedelta(0), min_bytes=1, isolation_level=0, topics=(
        fetch_req.FetchTopic(topic=topic, partitions=(fetch_req.FetchPartition(
            partition=partition, current_leader_epoch=epoch, fetch_offset=offset, partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=())
    return client.request(request).responses[0].partitions[0]


def raw_list_offsets(client: BrokerConnection, topic: str, partition: int, *, epoch: int = -1):
    request = offsets_req.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
        offsets_req.ListOffsetsTopic(name=topic, partitions=(
            offsets_req.ListOffsetsPartition(partition_index=partition, current_leader_epoch=epoch, timestamp=-1),)),))
    return client.request(request).topics[0].partitions[0]


# ====================================================================== the ledger
UNKNOWN_OFFSET = -1


@dataclass
class Ledger:
    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)  # value -> (partition, offset)
    offsets: dict[tuple[int, int], list[bytes]] = field(default_factory=lambda: defaultdict(list))
    consumed: list[tuple[int, int, bytes]] = field(default_factory=list)  # in delivery order
    delivery_errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ack(self, value: bytes, partition: int, offset: int | None) -> None:
        """`offset` None (or negative): acknowledged with its offset unknown. librdkafka does that
        when a later record's acknowledgement implies an earlier one whose response it never got
        (a request timed out in flight): `UNKNOWN_OFFSET` then."""
        offset = UNKNOWN_OFFSET if offset is None or offset < 0 else offset
        with self.lock:
            self.acked[value] = (partition, offset)
            if offset != UNKNOWN_OFFSET:
                self.offsets[(partition, offset)].append(value)

    def failed(self, what: str) -> None:
        with self.lock:
            self.delivery_errors.append(what)

    def acked_since(self, partition: int, at_count: int) -> int:
        with self.lock:
            return sum(1 for p, _o in list(self.acked.values())[at_count:] if p == partition)

    def record(self, rows: list[tuple[int, int, bytes]]) -> None:
        with self.lock:
            self.consumed.extend(rows)


class Worker(threading.Thread):
    def __init__(self, name: str, stop: threading.Event):
        super().__init__(name=name, daemon=True)
        self.stop = stop
        self.error: str | None = None

    def run(self) -> None:
        try:
            self.work()
        except Exception:  # noqa: BLE001  (kept and asserted on by the test)
            self.error = traceback.format_exc()

    def work(self) -> None:
        raise NotImplementedError


class Paced:
    def __init__(self, rate: float):
        self.interval, self.next = 1.0 / rate, time.monotonic()

    def wait(self, stop: threading.Event) -> None:
        self.next = max(self.next + self.interval, time.monotonic() - 1.0)
        stop.wait(max(0.0, self.next - time.monotonic()))


def value_of(name: str, partition: int, seq: int) -> bytes:
    return f"{name}/{partition}/{seq:07d}".encode()


def parse_value(value: bytes) -> tuple[str, int, int]:
    name, partition, seq = value.decode().split("/")
    return name, int(partition), int(seq)


class ConfluentProducer(Worker):
    """confluent-kafka, enable.idempotence (acks=all), round robin over the partitions."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, ledger: Ledger, stop: threading.Event,
                 rate: float = 100.0, name: str = "confluent", **config):
        """`config`: more librdkafka settings (over the defaults below)."""
        super().__init__(name, stop)
        self.bootstrap, self.topic, self.partitions, self.ledger, self.rate = bootstrap, topic, partitions, ledger, rate
        self.config = config
        self.unflushed = 0

    def work(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                             "linger.ms": 5, "message.timeout.ms": 90000, "request.timeout.ms": 5000,
                             "reconnect.backoff.max.ms": 300, "error_cb": lambda e: None,
                             "logger": _QuietLogger(), **self.config})

        def report(err, msg):
            if err is None:
                self.ledger.ack(msg.value(), msg.partition(), msg.offset())
            else:
                self.ledger.failed(f"{self.name}: {err}")

        pace, seq = Paced(self.rate), 0
        while not self.stop.is_set():
            partition = seq % self.partitions
            producer.produce(self.topic, value=value_of(self.name, partition, seq // self.partitions),
                             partition=partition, on_delivery=report)
            producer.poll(0)
            seq += 1
            pace.wait(self.stop)
        self.unflushed = producer.flush(90)


class KafkaPythonProducer(Worker):
    """kafka-python, enable_idempotence (acks=all), round robin over the partitions."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, ledger: Ledger, stop: threading.Event,
                 rate: float = 100.0, name: str = "kafka-python"):
        super().__init__(name, stop)
        self.bootstrap, self.topic, self.partitions, self.ledger, self.rate = bootstrap, topic, partitions, ledger, rate
        self.unflushed = 0

    def work(self) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap.split(","), enable_idempotence=True, acks="all",
                                 linger_ms=5, request_timeout_ms=5000, delivery_timeout_ms=90000,
                                 retry_backoff_ms=100, reconnect_backoff_max_ms=300, metadata_max_age_ms=5000)
        pace, seq, futures = Paced(self.rate), 0, []
        while not self.stop.is_set():
            partition = seq % self.partitions
            value = value_of(self.name, partition, seq // self.partitions)
            future = producer.send(self.topic, value=value, partition=partition)
            future.add_callback(lambda md, value=value: self.ledger.ack(value, md.partition, md.offset))
            future.add_errback(lambda exc: self.ledger.failed(f"{self.name}: {exc!r}"))
            futures.append(future)
            seq += 1
            pace.wait(self.stop)
        producer.flush(90)
        self.unflushed = sum(1 for f in futures if not f.is_done)
        producer.close(10)


class GroupReader(Worker):
    """A consumer-group member that commits each batch it polled (synchronously, retried while the
    coordinator moves) BEFORE recording it as consumed: a committed offset that got lost, or a
    record moved to another offset, shows up as a record consumed twice."""

    def __init__(self, bootstrap: str, topic: str, group: str, ledger: Ledger, stop: threading.Event):
        super().__init__(f"reader-{group}", stop)
        self.bootstrap, self.topic, self.group, self.ledger = bootstrap, topic, group, ledger

    def work(self) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False,
                             "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                             "reconnect.backoff.max.ms": 300, "logger": _QuietLogger()})
        consumer.subscribe([self.topic])
        try:
            while not self.stop.is_set():
                messages = [m for m in consumer.consume(500, 0.2) if m.error() is None]
                if not messages:
                    continue
                ends: dict[int, int] = {}
                for m in messages:
                    ends[m.partition()] = max(ends.get(m.partition(), -1), m.offset() + 1)
                offsets = [TopicPartition(self.topic, p, end) for p, end in sorted(ends.items())]
                deadline = time.monotonic() + 60
                while True:
                    try:
                        consumer.commit(offsets=offsets, asynchronous=False)
                        break
                    except KafkaException as exc:
                        if time.monotonic() > deadline:
                            raise
                        if not {tp.partition for tp in offsets} <= {tp.partition for tp in consumer.assignment()}:
                            messages = []  # revoked: they come again from the committed offset
                            break
                        del exc
                        time.sleep(0.2)
                self.ledger.record([(m.partition(), m.offset(), m.value()) for m in messages])
        finally:
            consumer.close()


class _QuietLogger:
    """librdkafka's log lines (connection refused while a broker is down) kept out of the output."""

    def log(self, *args, **kwargs) -> None:
        pass

    def __getattr__(self, name):
        return self.log


# ========================================================== a topic and groups to inspect
def topic_with_groups(bootstrap: str, topic: str, records_in: dict[int, int],
                      committed: dict[str, dict[int, int]], replication_factor: int = 1) -> None:
    """Create `topic` with one partition per key of `records_in`, write that many records to
    each partition, and commit `committed[group][partition]` for each group (no member)."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    creator = AdminClient({"bootstrap.servers": bootstrap})  # kept: its futures need it alive
    creator.create_topics([NewTopic(topic, len(records_in), replication_factor)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition, count in records_in.items():
        for i in range(count):
            producer.produce(topic, value=f"{partition}/{i}".encode(), partition=partition)
    assert producer.flush(30) == 0
    for group, offsets in committed.items():
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
        consumer.close()
