"""A raw upsert table whose values are registry Avro (the key plain bytes), on a real broker with
its registry: a backfill decodes the values with the registry as the ingest does, and a new
value-schema version's field becomes a column of the table."""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import StringSerializer

from topiclake.lake.runs.backfill import BackfillOptions, backfill
from topiclake.lake.runs.ingest import IngestOptions, ingest

from tests.support.lake import read_table
from tests.lake.upserts import produce_serialized

V1 = {"type": "record", "name": "Order", "fields": [{"name": "amount", "type": "long"}]}
V1_INT = {"type": "record", "name": "Order", "fields": [{"name": "amount", "type": "int"}]}
V2 = {"type": "record", "name": "Order", "fields": [  # compatible with V1_INT: a wider type, a new optional field
    {"name": "amount", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": None}]}


def compacted_topic(bootstrap: str) -> str:
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})]).values():
        future.result(30)
    return topic


def produce(bootstrap: str, registry_url: str, topic: str, schema: dict, records: list[tuple[str, dict]]) -> None:
    produce_serialized(bootstrap, topic, StringSerializer(),
                       AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(schema)), records)


def test_a_backfill_decodes_registry_values_and_brings_a_deleted_row_back(spark, registry_broker):
    proc, http = registry_broker
    topic = compacted_topic(proc.bootstrap)
    produce(proc.bootstrap, http.url, topic, V1, [("a", {"amount": 5}), ("b", {"amount": 7})])
    ingest(spark, IngestOptions(topics=(topic,), root=proc.data, bootstrap="none"))
    uri = proc.data / "tables" / topic
    table, _ = read_table(uri)
    assert table.metadata().configuration["topiclake.kind"] == "upsert"
    table.delete("amount = 7")  # another writer loses a row; the backfill brings it back
    assert read_table(uri)[1]["amount"].to_pylist() == [5]

    result = backfill(spark, BackfillOptions(root=proc.data, table=topic, topic=topic, partition=0,
                                             from_offset=0, to_offset=2))
    assert result.version is not None and result.records == 2
    rows = sorted((r["key"], r["amount"], r["offset"]) for r in read_table(uri)[1].to_pylist())
    assert rows == [(b"a", 5, 0), (b"b", 7, 1)]


def test_key_bucket_is_a_built_in_column_for_typed_plan():
    from topiclake.lake.keyed.table_kind import KEY_BUCKET
    from topiclake.lake.typed.plan import _BUILTIN

    assert KEY_BUCKET in _BUILTIN  # else an upsert table's schema makes key_bucket a typed column too


def test_a_new_value_schema_version_adds_and_widens_columns_of_the_upsert_table(spark, registry_broker):
    proc, http = registry_broker
    topic = compacted_topic(proc.bootstrap)
    produce(proc.bootstrap, http.url, topic, V1_INT, [("a", {"amount": 5}), ("b", {"amount": 6})])
    ingest(spark, IngestOptions(topics=(topic,), root=proc.data, bootstrap="none"))
    uri = proc.data / "tables" / topic
    assert read_table(uri)[0].schema().to_arrow().field("amount").type == pa.int32()
    produce(proc.bootstrap, http.url, topic, V2, [("a", {"amount": 8, "note": "hello"})])
    ingest(spark, IngestOptions(topics=(topic,), root=proc.data, bootstrap="none"))

    table, data = read_table(uri)
    names = [f.name for f in pa.schema(table.schema().to_arrow())]
    assert "note" in names and names.count("key_bucket") == 1
    assert pa.schema(table.schema().to_arrow()).field("amount").type == pa.int64()
    assert sorted((r["key"], r["amount"], r["note"]) for r in data.to_pylist()) == [(b"a", 8, "hello"),
                                                                                   (b"b", 6, None)]
    frame = spark.read.format("delta").load(str(uri))
    assert "note" in frame.columns and frame.columns.count("key_bucket") == 1
    assert sorted((r["amount"], r["note"]) for r in frame.collect()) == [(6, None), (8, "hello")]
