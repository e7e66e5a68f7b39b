"""CDC tables end to end: confluent-kafka produces Debezium change events to a real broker (its
built-in registry on), `topiclake ingest --format debezium` (and `ingest(...)`) makes the upsert
table, and the table read back with deltalake and with delta-spark is the rows the events
describe: one per primary key, deletes gone, new `after` fields new columns. JSON with Kafka
Connect's schema wrapper, JSON without it, registry Avro (AvroSerializer, key and value); an
unparseable event goes to `<table>_quarantine` and the run goes on; a rerun adds nothing."""

from __future__ import annotations

import copy
import datetime as dt
import gc
import json
import uuid

import pytest
from confluent_kafka import Producer, SerializingProducer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer

from topiclake.lake.jobs.main import ingest_main
from topiclake.lake.runs.backfill import BackfillOptions, backfill
from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.table.delta import app_id

from . import debezium as dbz
from tests.support.lake import read_table
from tests.lake.debezium import AFTER_COLUMNS

pytestmark = pytest.mark.slow

PARTITIONS = 2
PHONE = {"type": "string", "optional": True, "field": "phone"}  # the column the second run adds


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(30)


@pytest.fixture
def new_topic(registry_broker):
    """A function: a new topic of PARTITIONS partitions and the Events to produce to it (by a given
    producer, else a plain one). The producers are gone before the session's broker stops."""
    proc, _ = registry_broker
    made = []

    def make(prefix: str, producer=None) -> Events:
        topic = f"{prefix}-{uuid.uuid4().hex[:6]}"
        create_topic(proc.bootstrap, topic)
        made.append(Events(producer or Producer({"bootstrap.servers": proc.bootstrap}), topic))
        return made[-1]

    yield make
    made.clear()
    gc.collect()  # a serializing producer sits in a reference cycle: no client left polling a stopped broker


class Events:
    """Debezium events produced to a topic, partitioned by id, and the table they must give."""

    def __init__(self, producer, topic: str):
        self.producer, self.topic = producer, topic
        self.latest: dict[int, dict | None] = {}  # id -> expected row (None: deleted)
        self.ends: dict[int, int] = {}  # partition -> its log end offset

    def send(self, key, value, *, change_id: int, op: str | None, row: dict | None, pos: int | None) -> None:
        placed = []
        self.producer.produce(self.topic, key=key, value=value, partition=change_id % PARTITIONS,
                              on_delivery=lambda err, msg: placed.append((err, msg.partition(), msg.offset())))
        assert self.producer.flush(30) == 0
        (err, partition, offset), = placed
        assert err is None, err
        self.ends[partition] = offset + 1
        if op in (None, "d") or row is None:
            self.latest[change_id] = None
            return
        expected = {**{c: None for c in AFTER_COLUMNS}, "phone": None, **row}
        expected["after_offset"] = expected.pop("offset")
        self.latest[change_id] = {**expected, "cdc_op": op, "cdc_pos": pos, "partition": partition, "offset": offset}

    def rows(self) -> list[dict]:
        return [row for _id, row in sorted(self.latest.items()) if row is not None]


def history_into(events: Events, *, wrapped: bool = True) -> None:
    """dbz.history(): a snapshot (r), an insert, updates, a delete and its tombstone."""
    records, changes = dbz.history(wrapped=wrapped)
    for (key, value), change in zip(records, changes):
        events.send(key, value, change_id=change["id"], op=change["op"], row=change["row"], pos=change["pos"])


def with_phone_schema() -> dict:
    """The envelope's Connect schema once the source table has a `phone` column."""
    schema = copy.deepcopy(dbz.ENVELOPE_SCHEMA)
    for image in schema["fields"][:2]:
        image["fields"].append(PHONE)
    return schema


def table_of(uri, columns) -> list[dict]:
    _table, data = read_table(uri)
    rows = sorted(data.to_pylist(), key=lambda r: r["id"])
    assert len({r["id"] for r in rows}) == len(rows), "one row per primary key"
    return [{c: r[c] for c in columns} for r in rows]


def spark_table_of(spark, uri, columns) -> list[dict]:
    rows = spark.read.format("delta").load(str(uri)).select(*columns).orderBy("id").collect()
    return [{c: bytes(v) if isinstance(v, bytearray) else v for c, v in r.asDict().items()} for r in rows]


def comparable(rows: list[dict], columns) -> list[dict]:
    return [{c: r[c] for c in columns} for r in rows]


def test_json_with_the_schema_wrapper_new_columns_deletes_quarantine_and_rerun(spark, registry_broker,
                                                                                new_topic):
    proc, _ = registry_broker
    events = new_topic("dbz-wrapped")
    topic = events.topic
    history_into(events)
    events.send(dbz.json_key(9), b"{not json", change_id=9, op="bad", row=None, pos=None)  # quarantined
    events.latest.pop(9)
    uri = proc.data / "tables" / topic
    options = IngestOptions(topics=(topic,), root=proc.data, bootstrap="none", kind="upsert", value_format="debezium")

    first = ingest(spark, options)
    assert first.tables[0].version is not None
    table, data = read_table(uri)
    config = table.metadata().configuration
    assert (config["topiclake.kind"], config["topiclake.valueFormat"], json.loads(config["topiclake.keyColumns"])) \
        == ("upsert", "debezium", ["id"])
    assert data.column_names[:len(AFTER_COLUMNS)] == AFTER_COLUMNS
    assert {"cdc_op", "cdc_ts_ms", "cdc_source_ts_ms", "cdc_source_table", "cdc_lsn", "cdc_file", "cdc_pos",
            "key_bucket"} <= set(data.column_names) and "value" not in data.column_names
    assert str(data.schema.field("price").type) == "decimal128(10, 2)"
    columns = AFTER_COLUMNS + ["cdc_op", "cdc_pos", "partition", "offset"]
    assert table_of(uri, columns) == comparable(events.rows(), columns)
    assert [r["id"] for r in events.rows()] == [1001, 1002, 1004]  # 1003: deleted, then its tombstone
    assert {r["cdc_source_table"] for r in read_table(uri)[1].to_pylist()} == {"inventory.customers"}
    _q, quarantine = read_table(proc.data / "tables" / f"{topic}_quarantine")
    assert quarantine["value"].to_pylist() == [b"{not json"] and "value is not JSON" in quarantine["error"][0].as_py()

    # The source table gains a column: a new field in after and in the schema; updates and an insert.
    schema = with_phone_schema()
    for i, op, version in ((1, "u", 5), (5, "c", 1), (2, "u", 7)):
        row = {**dbz.customer(i, version=version), "phone": f"+41-{i}"}
        payload = dbz.envelope(op, None, row, 300 + i)
        events.send(dbz.json_key(i), json.dumps({"schema": schema, "payload": payload}).encode(),
                    change_id=1000 + i, op=op, row=row, pos=300 + i)
    events.send(dbz.json_key(4), dbz.json_value("d", dbz.customer(4, 3), None, 400), change_id=1004, op="d",
                row=None, pos=400)
    second = ingest(spark, options)
    columns = AFTER_COLUMNS + ["phone", "cdc_op", "cdc_pos", "partition", "offset"]
    expected = comparable(events.rows(), columns)
    assert [(r["id"], r["phone"]) for r in expected] == [(1001, "+41-1"), (1002, "+41-2"), (1005, "+41-5")]
    assert table_of(uri, columns) == expected
    spark_columns = ["id", "first_name", "email", "price", "birth", "photo", "phone", "cdc_op", "partition", "offset"]
    assert spark_table_of(spark, uri, spark_columns) == comparable(expected, spark_columns)

    # A rerun adds nothing: same version, the group's offsets at the log end, the quarantine once.
    third = ingest(spark, options)
    assert third.tables[0].version is None and third.records == 0
    table, _ = read_table(uri)
    assert table.version() == second.tables[0].version
    group = f"topiclake-ingest-{topic}"
    assert {p: table.transaction_version(app_id(group, topic, p)) for p in range(PARTITIONS)} == events.ends
    assert table_of(uri, columns) == expected
    assert read_table(proc.data / "tables" / f"{topic}_quarantine")[1].num_rows == 1

    # A backfill replays the partitions' events through the merge: no key moves back, none returns.
    for p in range(PARTITIONS):
        backfill(spark, BackfillOptions(root=proc.data, table=topic, topic=topic, partition=p, from_offset=0,
                                        to_offset=events.ends[p]))
    assert table_of(uri, columns) == expected


def test_json_without_the_wrapper_by_the_command_infers_the_types(spark, registry_broker, new_topic,
                                                                    capsys):
    proc, _ = registry_broker
    events = new_topic("dbz-plain")
    topic = events.topic
    nothing = ingest(spark, IngestOptions(topics=(topic,), root=proc.data, bootstrap="none", value_format="debezium"))
    assert nothing.tables == [] and not (proc.data / "tables" / topic).exists()  # no event: no key to plan from
    history_into(events, wrapped=False)
    # --format debezium alone: a CDC table is an upsert table
    assert ingest_main(["--topic", topic, "--format", "debezium", "--data", str(proc.data), "--bootstrap", "none"]) == 0
    assert "upsert:" in capsys.readouterr().out
    uri = proc.data / "tables" / topic
    table, data = read_table(uri)
    assert table.metadata().configuration["topiclake.kind"] == "upsert"
    types = {f.name: str(f.type) for f in data.schema}
    assert (types["id"], types["weight"], types["created"], types["price"], types["first_name"]) == (
        "int64", "double", "int64", "string", "string")
    got = {r["id"]: r for r in data.to_pylist()}
    assert sorted(got) == [1001, 1002, 1004]
    for want in events.rows():
        sent = dbz.connect_json({k: v for k, v in want.items() if k in dbz.customer(0)})
        row = got[want["id"]]
        assert (row["first_name"], row["weight"], row["created"], row["price"], row["cdc_op"], row["offset"]) == (
            sent["first_name"], sent["weight"], sent["created"], sent["price"], want["cdc_op"], want["offset"])


def test_registry_avro_key_and_value(spark, registry_broker, new_topic):
    proc, http = registry_broker
    client = SchemaRegistryClient({"url": http.url})
    producer = SerializingProducer({
        "bootstrap.servers": proc.bootstrap,
        "key.serializer": AvroSerializer(client, json.dumps(dbz.AVRO_KEY)),
        "value.serializer": AvroSerializer(client, json.dumps(dbz.AVRO_ENVELOPE)),
    })
    events = new_topic("dbz-avro", producer)
    topic = events.topic
    datums, changes = dbz.avro_history()
    for (key, value), change in zip(datums, changes):
        events.send(key, value, change_id=change["id"], op=change["op"], row=change["row"], pos=change["pos"])
    del producer  # new_topic's teardown lets it go

    uri = proc.data / "tables" / topic
    result = ingest(spark, IngestOptions(topics=(topic,), root=proc.data, bootstrap="none", value_format="debezium"))
    assert result.tables[0].version is not None
    table, data = read_table(uri)
    assert json.loads(table.metadata().configuration["topiclake.keyColumns"]) == ["id"]
    assert str(data.schema.field("created").type) == "timestamp[us, tz=UTC]"
    assert not {"after", "before", "value_schema_id", "key_decoded"} & set(data.column_names)
    columns = AFTER_COLUMNS + ["cdc_op", "cdc_pos", "partition", "offset"]
    assert table_of(uri, columns) == comparable(events.rows(), columns)
    spark_columns = ["id", "first_name", "price", "birth", "cdc_op", "offset"]
    assert spark_table_of(spark, uri, spark_columns) == comparable(events.rows(), spark_columns)
    assert isinstance(events.rows()[0]["birth"], dt.date)
    backfill(spark, BackfillOptions(root=proc.data, table=topic, topic=topic, partition=0, from_offset=0,
                                    to_offset=events.ends[0]))  # Avro events decoded by the typed path again
    assert table_of(uri, columns) == comparable(events.rows(), columns)


def test_the_debezium_format_implies_an_upsert_table_from_the_flag_or_the_settings(root):
    from topiclake.lake.errors import UsageError
    from topiclake.lake.keyed.table_kind import TableSettings, resolve
    from topiclake.segments.storage import StorageLayout, TopicRegistry

    registry = TopicRegistry(StorageLayout(root))
    registry.create("dbz", 1, {})  # cleanup.policy delete: append, but for the format
    layout = registry.get  # what resolve reads a topic's cleanup.policy with
    by_flag = resolve(layout, "dbz", ["dbz"], None, value_format="debezium")
    by_settings = resolve(layout, "dbz", ["dbz"], None, settings=TableSettings(format="debezium"))
    assert by_flag == by_settings and by_flag.change.format == "debezium"
    assert resolve(layout, "dbz", ["dbz"], None) is None
    with pytest.raises(UsageError, match="format debezium needs an upsert table"):
        resolve(layout, "dbz", ["dbz"], None, kind="append", value_format="debezium")
