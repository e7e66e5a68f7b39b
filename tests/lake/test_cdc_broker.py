"""CDC end to end up to the changes: confluent-kafka produces Debezium events to a real broker (its
built-in registry on), as JSON with Kafka Connect's schema wrapper and as registry Avro
(AvroSerializer, key and value); the segment files are planned and decoded as ingest's executors
do (plan_partition, read_task, the table columns, typed.rows for Avro), the driver plans the CDC
columns (cdc_plan), and `extract` gives back the changes that were produced."""

from __future__ import annotations

import gc
import json
import uuid

import pyarrow as pa
import pytest
from confluent_kafka import Producer, SerializingProducer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer

from topiclake.lake.keyed.cdc_plan import plan_cdc, samples_of
from topiclake.lake.keyed.extract import extract
from topiclake.lake.log.decode import read_task
from topiclake.lake.log.offsets import EARLIEST, LATEST, OffsetSpec
from topiclake.lake.log.plan import plan_partition
from topiclake.lake.log.source import list_partition
from topiclake.lake.runs.tasks import TaskWriter
from topiclake.lake.typed.plan import load_registry, plan_typed
from topiclake.lake.typed.rows import decode_rows
from topiclake.segments.storage import StorageLayout

from . import debezium as dbz
from tests.lake.debezium import assert_changes

pytestmark = pytest.mark.slow


def produced_offsets(producer, topic: str, records: list[tuple]) -> list[int]:
    offsets = []

    def delivered(err, msg):
        assert err is None, err
        offsets.append(msg.offset())

    for key, value in records:
        producer.produce(topic, key=key, value=value, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0
    return sorted(offsets)


def task_rows(root, topic: str) -> tuple[pa.Table, list]:
    """The topic's records as ingest's executors see them: planned, decoded from the segment files,
    with the table columns."""
    plan = plan_partition(list_partition(StorageLayout(root), topic, 0), table_uri=f"/tables/{topic}",
                          committed=None, starting=OffsetSpec(EARLIEST), ending=OffsetSpec(LATEST))
    writer = TaskWriter(run_id="cdc-test", ingested_at_us=0, partition_by={})
    tables = []
    for task in plan.tasks:
        records, _ = read_task(task.as_dict())
        tables.append(writer._table_columns(task.as_dict(), records))  # as run_task does, before any writing
    return pa.concat_tables(tables), [plan]


def test_json_events_with_the_schema_wrapper_become_their_changes(registry_broker):
    proc, _ = registry_broker
    topic = f"dbz-json-{uuid.uuid4().hex[:6]}"
    records, expected = dbz.history()
    records.insert(2, (dbz.json_key(9), b"{not json"))  # quarantined, and the run goes on
    producer = Producer({"bootstrap.servers": proc.bootstrap})
    assert produced_offsets(producer, topic, records) == list(range(len(records)))
    del producer  # no client left polling the broker after the session's broker stops

    rows, plans = task_rows(proc.data, topic)
    spec = plan_cdc([topic], samples=samples_of(plans))  # the driver's plan, from the first and newest task
    changes = extract(spec, rows)
    assert_changes(changes, expected, offsets=[0, 1] + list(range(3, len(records))))
    assert changes.quarantine.column("offset").to_pylist() == [2]
    assert changes.quarantine.column("value").to_pylist() == [b"{not json"]
    assert set(changes.rows.column("topic").to_pylist()) == {topic}


def test_registry_avro_events_become_their_changes(registry_broker):
    proc, http = registry_broker
    topic = f"dbz-avro-{uuid.uuid4().hex[:6]}"
    client = SchemaRegistryClient({"url": http.url})
    producer = SerializingProducer({
        "bootstrap.servers": proc.bootstrap,
        "key.serializer": AvroSerializer(client, json.dumps(dbz.AVRO_KEY)),
        "value.serializer": AvroSerializer(client, json.dumps(dbz.AVRO_ENVELOPE)),
    })
    datums, expected = dbz.avro_history()
    assert produced_offsets(producer, topic, datums) == list(range(len(datums)))
    del producer
    gc.collect()  # the serializing producer sits in a reference cycle: no client left polling a stopped broker

    rows, _ = task_rows(proc.data, topic)
    typed = plan_typed(load_registry(proc.data), [topic])  # _schemas replayed from the storage root
    spec = plan_cdc([topic], typed=typed)
    decoded, typed_quarantine = decode_rows(typed, rows, topic)
    assert typed_quarantine.num_rows == 0
    changes = extract(spec, decoded)
    assert_changes(changes, expected)
    assert changes.quarantine.num_rows == 0
    assert changes.rows.column("created").type == pa.timestamp("us", tz="UTC")
