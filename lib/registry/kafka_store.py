"""`_schemas` on a broker reached over the Kafka protocol (confluent-kafka), for a registry that
runs outside the broker process (`topiclake registry start`): it never writes the storage root
itself; the broker that owns the topic appends what it produces.

Appends are idempotent produces with acks=all; reads assign the one partition and consume
(read_committed) up to the high watermark. A produce cannot be made conditional on the log's
end, so the registry reads its own records back and checks replay accepted them (see
service.SchemaRegistry._write); still, run one writing registry per cluster (others with
--read-only), as Confluent runs one leader.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from concurrent.futures import ThreadPoolExecutor

from .config import SCHEMAS_TOPIC
from .errors import store_error, store_timeout
from .log_records import StoredRecord

log = logging.getLogger(__name__)

_TIMEOUT_S = 30.0
_POLL_S = 0.2


class KafkaSchemaStore:
    def __init__(self, bootstrap: str, topic: str = SCHEMAS_TOPIC, client_config: dict | None = None):
        self.bootstrap = bootstrap
        self.topic = topic
        # librdkafka settings of a secured listener (security.protocol, sasl.*, ssl.*)
        self._client = {"bootstrap.servers": bootstrap, **(client_config or {})}
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="schemas-kafka")
        self._producer = None
        self._consumer = None

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def open(self) -> None:
        await self._run(self._open)

    def _open(self) -> None:
        from confluent_kafka import Consumer, KafkaException, Producer
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(self._client)
        futures = admin.create_topics([NewTopic(self.topic, 1, config={"cleanup.policy": "compact"})],
                                      operation_timeout=_TIMEOUT_S)
        try:
            futures[self.topic].result(_TIMEOUT_S)
            log.info("created %s on %s", self.topic, self.bootstrap)
        except KafkaException as exc:
            if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                raise store_error(f"cannot create {self.topic} on {self.bootstrap}: {exc}") from None
        self._producer = Producer({**self._client, "enable.idempotence": True, "acks": "all", "linger.ms": 0})
        self._consumer = Consumer({**self._client, "group.id": f"topiclake-registry-{uuid.uuid4()}",
                                   "enable.auto.commit": False, "isolation.level": "read_committed",
                                   "auto.offset.reset": "earliest"})

    async def close(self) -> None:
        await self._run(self._close)
        self._thread.shutdown(wait=True)

    def _close(self) -> None:
        if self._producer is not None:
            self._producer.flush(_TIMEOUT_S)
        if self._consumer is not None:
            self._consumer.close()

    async def end_offset(self) -> int:
        return await self._run(self._end_offset)

    def _end_offset(self) -> int:
        import time

        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        deadline = time.monotonic() + _TIMEOUT_S
        while True:
            try:
                _low, high = self._consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=_TIMEOUT_S,
                                                                  cached=False)
                return high
            except KafkaException as exc:
                # A topic just created (by this registry or another) has no leader for a moment.
                settling = exc.args[0].code() in (KafkaError._UNKNOWN_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                                                  KafkaError.NOT_LEADER_FOR_PARTITION)
                if not settling or time.monotonic() > deadline:
                    raise store_timeout(f"reading the end of {self.topic} from {self.bootstrap}: {exc}") from None
                time.sleep(_POLL_S)
                try:  # librdkafka answers from its metadata cache: ask the cluster about the topic again
                    self._consumer.list_topics(self.topic, timeout=_POLL_S * 5)
                except KafkaException:
                    pass

    async def read(self, from_offset: int) -> tuple[list[StoredRecord], int]:
        return await self._run(self._read, from_offset)

    def _read(self, from_offset: int) -> tuple[list[StoredRecord], int]:
        import time

        from confluent_kafka import TopicPartition

        end = self._end_offset()
        if end <= from_offset:
            return [], from_offset
        self._consumer.assign([TopicPartition(self.topic, 0, from_offset)])
        out: list[StoredRecord] = []
        position = from_offset
        deadline = time.monotonic() + _TIMEOUT_S
        while position < end:
            if time.monotonic() > deadline:
                raise store_timeout(f"{self.topic}: read up to {position} of {end} within {_TIMEOUT_S:.0f} s")
            msg = self._consumer.poll(_POLL_S)
            if msg is None:
                # compaction gaps and transaction markers advance the position without a message
                position = max(position, self._consumer.position([TopicPartition(self.topic, 0)])[0].offset)
                continue
            if msg.error() is not None:
                raise store_error(f"reading {self.topic}: {msg.error()}")
            out.append((msg.offset(), msg.key(), msg.value()))
            position = msg.offset() + 1
        self._consumer.unassign()
        return out, position

    async def append(self, records: list[tuple[bytes, bytes | None]], *, expected_end: int) -> int:
        return await self._run(self._append, records)

    def _append(self, records: list[tuple[bytes, bytes | None]]) -> int:
        offsets: list[int] = []
        failures: list = []

        def delivered(err, msg):
            if err is not None:
                failures.append(err)
            else:
                offsets.append(msg.offset())

        for key, value in records:
            self._producer.produce(self.topic, key=key, value=value, partition=0, on_delivery=delivered)
        remaining = self._producer.flush(_TIMEOUT_S)
        if failures or remaining:
            raise store_error(f"appending to {self.topic}: {failures[:1] or f'{remaining} undelivered'}")
        return min(offsets)
