"""Upsert-ingest runs over compacted topics, the tables they leave, and keyed records produced
through Schema Registry serializers."""

from __future__ import annotations

import gc

from confluent_kafka import SerializingProducer

from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.segments.storage import StorageLayout, TopicRegistry

from tests.support.lake import read_table


def run(spark, root, *topics, **kwargs):
    return ingest(spark, IngestOptions(topics=tuple(topics), root=root, **kwargs))


def compacted(topic_writer, root, topic, partitions=1):
    writer = topic_writer(topic, partitions)
    TopicRegistry(StorageLayout(root)).alter_config(topic, {"cleanup.policy": "compact"})
    return writer


def table_rows(uri) -> dict[bytes, bytes]:
    _table, data = read_table(uri)
    keys = data["key"].to_pylist()
    assert len(keys) == len(set(keys)), "one row per key"
    return dict(zip(keys, data["value"].to_pylist()))


def produce_serialized(bootstrap: str, topic: str, key_serializer, value_serializer, records: list[tuple]) -> None:
    """Produce (key, value) pairs to partition 0 through the serializers (None: a tombstone)."""
    producer = SerializingProducer({"bootstrap.servers": bootstrap, "key.serializer": key_serializer,
                                    "value.serializer": value_serializer})
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(30) == 0
    del producer
    gc.collect()  # a serializing producer sits in a reference cycle
