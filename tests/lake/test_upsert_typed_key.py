"""A raw upsert table whose topic's key is typed by the registry keys its rows by the decoded key
columns: the same key under a later key schema (other bytes: another schema id) is the same row."""

from __future__ import annotations

import json
import uuid

from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer

from topiclake.lake.runs.ingest import IngestOptions, ingest

from tests.support.lake import read_table
from tests.lake.upserts import produce_serialized

KEY_V1 = {"type": "record", "name": "AccountKey", "fields": [{"name": "account", "type": "long"}]}
KEY_V2 = {"type": "record", "name": "AccountKey", "fields": [  # a compatible change: a new schema id
    {"name": "account", "type": "long"}, {"name": "region", "type": ["null", "string"], "default": None}]}
VALUE = {"type": "record", "name": "Balance", "fields": [{"name": "balance", "type": "long"}]}


def produce(bootstrap: str, client, topic: str, key_schema: dict, records: list[tuple[dict, dict | None]]) -> None:
    produce_serialized(bootstrap, topic, AvroSerializer(client, json.dumps(key_schema)),
                       AvroSerializer(client, json.dumps(VALUE)), records)


def test_rows_are_keyed_by_the_decoded_key_across_key_schema_versions(spark, registry_broker):
    proc, http = registry_broker
    topic = f"balances-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})]).values():
        future.result(30)
    client = SchemaRegistryClient({"url": http.url})
    produce(proc.bootstrap, client, topic, KEY_V1, [({"account": 1}, {"balance": 10}), ({"account": 2}, {"balance": 20}),
                                                    ({"account": 3}, {"balance": 30})])
    # the same accounts under the second key schema: other key bytes, the same keys
    produce(proc.bootstrap, client, topic, KEY_V2, [({"account": 1, "region": None}, {"balance": 11}),
                                                    ({"account": 3, "region": None}, None)])  # a tombstone

    result = ingest(spark, IngestOptions(topics=(topic,), root=proc.data, bootstrap="none"))  # compact: upsert
    assert result.tables[0].version is not None
    table, data = read_table(proc.data / "tables" / topic)
    config = table.metadata().configuration
    assert config["topiclake.kind"] == "upsert"
    key_columns = json.loads(config["topiclake.keyColumns"])
    assert key_columns != ["key"] and all(c in data.column_names for c in key_columns)
    rows = sorted((r["offset"], r["balance"]) for r in data.to_pylist())
    assert rows == [(1, 20), (3, 11)]  # account 2 as first written, account 1's newer value, account 3 deleted
