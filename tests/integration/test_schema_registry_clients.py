"""confluent-kafka's own serializers against our registry and broker: AvroSerializer,
ProtobufSerializer and JSONSerializer register their schemas, produce in Confluent's wire format,
and the deserializers read the records back through the registry. The lake's replay of the
`_schemas` segment files then sees the same registry."""

from __future__ import annotations

import datetime
import importlib.util
import json
import subprocess
import sys
import uuid

import pytest
from confluent_kafka import DeserializingConsumer, SerializingProducer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

from topiclake.registry.log_replay import load_state

PROTO = """
syntax = "proto3";
package topiclake.test;
import "google/protobuf/timestamp.proto";
message Order {
  string id = 1;
  int64 cents = 2;
  repeated string tags = 3;
  google.protobuf.Timestamp at = 4;
  oneof payment { string card = 5; string iban = 6; }
}
"""


def _round_trip(proc, topic: str, serializer, deserializer, values: list) -> list:
    producer = SerializingProducer({"bootstrap.servers": proc.bootstrap, "value.serializer": serializer})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0
    del producer  # no client left polling the broker after the session's broker stops
    consumer = DeserializingConsumer({"bootstrap.servers": proc.bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                                      "auto.offset.reset": "earliest", "value.deserializer": deserializer})
    consumer.subscribe([topic])
    got = []
    try:
        for _ in range(300):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            if len(got) == len(values):
                break
    finally:
        consumer.close()
    return got


@pytest.fixture
def client(registry_broker):
    proc, http = registry_broker
    return SchemaRegistryClient({"url": http.url})


def test_avro_serializer(registry_broker, client):
    proc, _ = registry_broker
    topic = f"avro-{uuid.uuid4().hex[:8]}"
    schema = json.dumps({"type": "record", "name": "Reading", "namespace": "t", "fields": [
        {"name": "sensor", "type": "string"}, {"name": "value", "type": ["null", "double"], "default": None},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}}]})
    values = [{"sensor": f"s{i}", "value": i / 4 if i % 2 else None, "day": datetime.date(2024, 1, 1 + i)}
              for i in range(5)]
    got = _round_trip(proc, topic, AvroSerializer(client, schema), AvroDeserializer(client), values)
    assert got == values
    registered = client.get_latest_version(f"{topic}-value")
    assert registered.version == 1 and json.loads(registered.schema.schema_str)["name"] == "Reading"


def test_json_serializer(registry_broker, client):
    proc, _ = registry_broker
    topic = f"json-{uuid.uuid4().hex[:8]}"
    schema = json.dumps({"type": "object", "title": "Item", "properties": {
        "name": {"type": "string"}, "qty": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["name"]})
    values = [{"name": f"n{i}", "qty": i, "tags": ["a"] * i} for i in range(4)]
    got = _round_trip(proc, topic, JSONSerializer(schema, client), JSONDeserializer(schema), values)
    assert got == values
    assert client.get_latest_version(f"{topic}-value").schema.schema_type == "JSON"


def test_protobuf_serializer_with_a_well_known_import(registry_broker, client, tmp_path):
    proc, _ = registry_broker
    (tmp_path / "order.proto").write_text(PROTO)
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"--proto_path={tmp_path}",
                    f"--python_out={tmp_path}", "order.proto"], check=True, cwd=tmp_path)
    spec = importlib.util.spec_from_file_location("order_pb2", tmp_path / "order_pb2.py")
    order_pb2 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(order_pb2)
    topic = f"proto-{uuid.uuid4().hex[:8]}"
    values = []
    for i in range(3):
        order = order_pb2.Order(id=f"o{i}", cents=100 * i, tags=["x", "y"][: i + 1], card=f"c{i}")
        order.at.FromSeconds(1_700_000_000 + i)
        values.append(order)
    serializer = ProtobufSerializer(order_pb2.Order, client, {"use.deprecated.format": False})
    deserializer = ProtobufDeserializer(order_pb2.Order, {"use.deprecated.format": False})
    got = _round_trip(proc, topic, serializer, deserializer, values)
    assert got == values
    registered = client.get_latest_version(f"{topic}-value")
    assert registered.schema.schema_type == "PROTOBUF"
    # An incompatible change of the same message is refused by the registry (409), not produced.
    changed = Schema(PROTO.replace("int64 cents", "string cents"), "PROTOBUF")
    assert client.test_compatibility(f"{topic}-value", changed) is False


def test_the_lake_replays_the_same_registry_from_segment_files(registry_broker, client):
    proc, http = registry_broker
    subject = f"replay-{uuid.uuid4().hex[:8]}"
    schema_id = http.ok("POST", f"/subjects/{subject}/versions", {"schema": '"string"'})["id"]
    state = load_state(proc.data)  # the files, as a Spark job sees them; no broker involved
    assert [v.id for v in state.versions(subject)] == [schema_id]
    assert set(state.subject_names()) == set(client.get_subjects())
    assert state.max_id >= schema_id
