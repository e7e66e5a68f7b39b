"""The schema registry served by the broker process (`[registry] listen`): the REST API on the
broker's own event loop, its `_schemas` topic read and appended through the partition layer.

An append answers once Log.append returned, as a Produce with acks=all does here (one replica:
written is committed). It goes through the I/O thread like every other append, which also makes
the end-offset check atomic: the registry planned its records from the state at that offset, so
if anything else (a client producing to `_schemas`) appended meanwhile, the append is refused and
the registry replays and plans again.
"""

from __future__ import annotations

import logging

from topiclake.registry.basic_auth import basic_auth
from topiclake.registry.config import RegistryConfig
from topiclake.registry.errors import StoreConflict
from topiclake.registry.http import serve
from topiclake.registry.kafka_store import KafkaSchemaStore
from topiclake.registry.log_records import StoredRecord, committed_records
from topiclake.registry.service import SchemaRegistry
from topiclake.segments.batch import Record, build_batch, iter_batches, read_header
from topiclake.segments.errors import TopicAlreadyExistsError, UnknownTopicError


log = logging.getLogger(__name__)

_READ_CHUNK = 4 * 1024 * 1024
_TOPIC_CONFIG = {"cleanup.policy": "compact"}  # as Confluent creates it: one partition, compacted


class BrokerSchemaStore:
    def __init__(self, partitions, topic: str):
        self.partitions = partitions  # PartitionManager
        self.topic = topic
        self.part = None

    async def open(self) -> None:
        try:
            self.partitions.topic(self.topic, fresh=True)
        except UnknownTopicError:
            try:
                await self.partitions.run_io(self.partitions.create_topic, self.topic, 1, dict(_TOPIC_CONFIG))
                log.info("created %s (1 partition, compacted) for the schema registry", self.topic)
            except TopicAlreadyExistsError:
                pass
        self.part = await self.partitions.get(self.topic, 0)

    async def end_offset(self) -> int:
        return self.part.log_end_offset

    async def read(self, from_offset: int) -> tuple[list[StoredRecord], int]:
        return await self.partitions.run_read(_read, self.part, from_offset, self.part.last_stable_offset)

    async def append(self, records: list[tuple[bytes, bytes | None]], *, expected_end: int) -> int:
        batch = build_batch([Record(i, self.partitions.clock(), k, v) for i, (k, v) in enumerate(records)],
                            base_offset=0)
        first = await self.partitions.run_io(_append, self.part, batch, expected_end)
        self.part.notify()
        return first


def _read(part, from_offset: int, end: int) -> tuple[list[StoredRecord], int]:
    """Reader thread: the committed records from `from_offset` up to `end` (the LSO when read)."""
    log_ = part.log
    offset = max(from_offset, log_.log_start_offset)
    batches = []
    while offset < end:
        data = log_.read(offset, _READ_CHUNK, max_offset=end).to_bytes()
        if not data:
            break
        for batch in iter_batches(data, source=f"{part.topic}-{part.index}", allow_partial_tail=True):
            if batch.header.last_offset >= offset:
                batches.append(batch)
            offset = batch.header.next_offset
    return committed_records(batches, from_offset, max(offset, from_offset))


def _append(part, batch: bytes, expected_end: int) -> int:
    """I/O thread: append only if nothing was appended since the registry's replay."""
    if part.log.log_end_offset != expected_end:
        raise StoreConflict(f"{part.topic} ends at {part.log.log_end_offset}, not {expected_end}")
    return part.append_batch(batch, read_header(batch)).first_offset


class BrokerRegistry:
    """The registry's lifecycle inside the broker: load `_schemas`, then serve the REST API."""

    def __init__(self, partitions, config: RegistryConfig, verify_password=None, *, bootstrap: str | None = None):
        """`bootstrap`: reach `_schemas` over the Kafka protocol there (cluster mode: its leader
        may be another broker) instead of through this broker's partitions."""
        self.config = config
        self.verify_password = verify_password  # HTTP basic auth against these users (None: open)
        self.store = (BrokerSchemaStore(partitions, config.topic) if bootstrap is None
                      else KafkaSchemaStore(bootstrap, config.topic))
        self.registry = SchemaRegistry(self.store)
        self.runner = None
        self.port: int | None = None

    async def start(self) -> None:
        await self.store.open()
        await self.registry.load()
        host, port = self.config.address
        authenticate = basic_auth(self.verify_password) if self.verify_password is not None else None
        self.runner, self.port = await serve(self.registry, host, port, authenticate=authenticate)
        log.info("schema registry listening on http://%s:%d (topic %s%s)", host, self.port, self.config.topic,
                 ", HTTP basic auth" if authenticate else "")

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
        close = getattr(self.store, "close", None)
        if close is not None:
            await close()
