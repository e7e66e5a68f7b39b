"""Apache Kafka's command-line tools against a topiclake broker: each does what it does against
Kafka (kafka-topics, kafka-configs, kafka-consumer-groups, the console producer and consumer,
kafka-get-offsets, kafka-delete-records, kafka-log-dirs, kafka-leader-election,
kafka-transactions, kafka-share-groups, kafka-metadata-quorum and the two perf tools)."""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest

from topiclake.security.credentials import CredentialStore

pytestmark = pytest.mark.slow


def new_topic(kafka_tools, peer_broker, partitions: int = 1, *configs: str) -> str:
    name = f"k-{uuid.uuid4().hex[:8]}"
    config_args = [a for c in configs for a in ("--config", c)]
    assert f"Created topic {name}." in kafka_tools("kafka-topics", "--bootstrap-server", peer_broker.bootstrap, "--create",
                                                   "--topic", name, "--partitions", str(partitions), *config_args)
    return name


def produce(peer_broker, topic: str, values: list[bytes], partition: int = 0) -> None:
    """Keyed records, timestamps 1 ms apart (the last one has the largest)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": peer_broker.bootstrap})
    start_ms = int(time.time() * 1000) - len(values)
    for i, value in enumerate(values):
        producer.produce(topic, value=value, key=b"key-%d" % i, partition=partition, timestamp=start_ms + i)
    assert producer.flush(20) == 0


def table(output: str) -> list[dict[str, str]]:
    """The rows of kafka-consumer-groups' and kafka-share-groups' tables (header line first)."""
    header, *rows = [line.split() for line in output.splitlines() if line.strip()]
    return [dict(zip(header, row)) for row in rows]


def test_kafka_topics_create_describe_alter_delete(kafka_tools, peer_broker):
    b = ("--bootstrap-server", peer_broker.bootstrap)
    topic = new_topic(kafka_tools, peer_broker, 2, "cleanup.policy=compact", "retention.ms=3600000")
    described = kafka_tools("kafka-topics", *b, "--describe", "--topic", topic)
    assert re.search(rf"Topic: {topic}\tTopicId: \S+\tPartitionCount: 2\tReplicationFactor: 1", described)
    assert "cleanup.policy=compact" in described and "retention.ms=3600000" in described
    assert re.findall(r"Partition: (\d)\tLeader: 0\tReplicas: 0\tIsr: 0", described) == ["0", "1"]
    again = kafka_tools.run("kafka-topics", *b, "--create", "--topic", topic, "--partitions", "1", check=False)
    assert again.returncode != 0 and f"Topic '{topic}' already exists" in again.stdout + again.stderr

    kafka_tools("kafka-topics", *b, "--alter", "--topic", topic, "--partitions", "5")
    assert "PartitionCount: 5" in kafka_tools("kafka-topics", *b, "--describe", "--topic", topic)
    fewer = kafka_tools.run("kafka-topics", *b, "--alter", "--topic", topic, "--partitions", "3", check=False)
    assert fewer.returncode != 0 and "InvalidPartitionsException" in fewer.stderr
    assert topic in kafka_tools("kafka-topics", *b, "--list").split()

    kafka_tools("kafka-topics", *b, "--delete", "--topic", topic)
    assert topic not in kafka_tools("kafka-topics", *b, "--list").split()


def test_kafka_configs_topics_brokers_quotas_and_scram_users(kafka_tools, peer_broker):
    b = ("--bootstrap-server", peer_broker.bootstrap)
    topic = new_topic(kafka_tools, peer_broker)
    configs = ("kafka-configs", *b)
    # a topic's dynamic configs
    kafka_tools(*configs, "--alter", "--entity-type", "topics", "--entity-name", topic, "--add-config",
                "retention.ms=1000,max.message.bytes=2048")
    described = kafka_tools(*configs, "--describe", "--entity-type", "topics", "--entity-name", topic)
    assert "retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000" in described
    kafka_tools(*configs, "--alter", "--entity-type", "topics", "--entity-name", topic, "--delete-config",
                "retention.ms")
    described = kafka_tools(*configs, "--describe", "--entity-type", "topics", "--entity-name", topic)
    assert "retention.ms" not in described and "max.message.bytes=2048" in described
    # the cluster-wide broker defaults, and one broker's every config
    kafka_tools(*configs, "--alter", "--entity-type", "brokers", "--entity-default", "--add-config",
                "log.retention.ms=7200000")
    assert "log.retention.ms=7200000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:" in \
        kafka_tools(*configs, "--describe", "--entity-type", "brokers", "--entity-default")
    every = kafka_tools(*configs, "--describe", "--entity-type", "brokers", "--entity-name", "0", "--all")
    assert every.startswith("All configs for broker 0 are:")
    assert f"advertised.listeners=PLAINTEXT://{peer_broker.bootstrap}" in every
    # client quotas: a client id, the default client id, a user's client id
    kafka_tools(*configs, "--alter", "--entity-type", "clients", "--entity-name", "app-1", "--add-config",
                "consumer_byte_rate=1024,producer_byte_rate=2048")
    kafka_tools(*configs, "--alter", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
                "--entity-name", "app-1", "--add-config", "request_percentage=50")
    quotas = kafka_tools(*configs, "--describe", "--entity-type", "clients")
    assert "Quota configs for client-id 'app-1' are consumer_byte_rate=1024.0, producer_byte_rate=2048.0" in quotas
    kafka_tools(*configs, "--alter", "--entity-type", "clients", "--entity-name", "app-1", "--delete-config",
                "consumer_byte_rate")
    assert kafka_tools(*configs, "--describe", "--entity-type", "clients", "--entity-name", "app-1").strip() == \
        "Quota configs for client-id 'app-1' are producer_byte_rate=2048.0"
    assert "Quota configs for user-principal 'alice', client-id 'app-1' are request_percentage=50.0" in \
        kafka_tools(*configs, "--describe", "--entity-type", "users", "--entity-name", "alice", "--entity-type",
                    "clients", "--entity-name", "app-1")
    # SCRAM users: salted credentials the broker then logs in with
    kafka_tools(*configs, "--alter", "--entity-type", "users", "--entity-name", "bob", "--add-config",
                "SCRAM-SHA-256=[iterations=8192,password=bob-secret],SCRAM-SHA-512=[password=bob-secret]")
    assert "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-256=iterations=8192, " \
           "SCRAM-SHA-512=iterations=4096" in kafka_tools(*configs, "--describe", "--entity-type", "users",
                                                          "--entity-name", "bob")
    kafka_tools(*configs, "--alter", "--entity-type", "users", "--entity-name", "bob", "--delete-config",
                "SCRAM-SHA-512")
    store = CredentialStore(peer_broker.data)
    assert store.verify_password("bob", "bob-secret") and store.get("bob", "SCRAM-SHA-512") is None
    assert store.get("bob", "SCRAM-SHA-256").iterations == 8192


def test_console_producer_consumer_and_consumer_groups(kafka_tools, peer_broker):
    b = ("--bootstrap-server", peer_broker.bootstrap)
    topic = new_topic(kafka_tools, peer_broker, 2)
    lines = "".join(f"h{i}:x{i}\tkey-{i}|value-{i}\n" for i in range(10))
    kafka_tools("kafka-console-producer", *b, "--topic", topic, "--reader-property", "parse.key=true",
                "--reader-property", "key.separator=|", "--reader-property", "parse.headers=true", input=lines)
    read = kafka_tools("kafka-console-consumer", *b, "--topic", topic, "--group", "console-g", "--from-beginning",
                       "--max-messages", "10", "--timeout-ms", "30000", "--formatter-property", "print.key=true",
                       "--formatter-property", "print.headers=true", "--formatter-property", "print.partition=true",
                       "--formatter-property", "print.offset=true")
    # Partition:P  Offset:O  headers  key  value (the keys hash to partitions as Kafka's producer does)
    got = [line.split("\t") for line in read.splitlines()]
    assert sorted(tuple(fields[2:]) for fields in got) == sorted((f"h{i}:x{i}", f"key-{i}", f"value-{i}")
                                                                 for i in range(10))
    ends = {0: 0, 1: 0}  # records per partition: the offsets are 0..n-1 on each
    for partition, offset, *_ in got:
        p, o = int(partition.removeprefix("Partition:")), int(offset.removeprefix("Offset:"))
        assert o == ends[p]
        ends[p] += 1

    groups = ("kafka-consumer-groups", *b)
    assert "console-g" in kafka_tools(*groups, "--list").split()
    produce(peer_broker, topic, [b"more-%d" % i for i in range(5)], partition=0)
    rows = {r["PARTITION"]: r for r in table(kafka_tools(*groups, "--describe", "--group", "console-g"))}
    assert rows["0"]["CURRENT-OFFSET"] == str(ends[0]) and rows["0"]["LAG"] == "5"
    assert rows["0"]["LOG-END-OFFSET"] == str(ends[0] + 5)
    assert rows["1"]["LAG"] == "0" and rows["1"]["CONSUMER-ID"] == "-"

    kafka_tools(*groups, "--group", "console-g", "--reset-offsets", "--to-earliest", "--topic", topic, "--execute")
    kafka_tools(*groups, "--group", "console-g", "--reset-offsets", "--to-offset", "2", "--topic", f"{topic}:1",
                "--execute")
    rows = {r["PARTITION"]: r for r in table(kafka_tools(*groups, "--describe", "--group", "console-g"))}
    assert rows["0"]["CURRENT-OFFSET"] == "0" and rows["1"]["CURRENT-OFFSET"] == str(min(2, ends[1]))
    dry = kafka_tools(*groups, "--group", "console-g", "--reset-offsets", "--to-latest", "--topic", topic, "--dry-run")
    assert {r["PARTITION"]: r["NEW-OFFSET"] for r in table(dry)}["0"] == str(ends[0] + 5)
    assert "Empty" in kafka_tools(*groups, "--describe", "--group", "console-g", "--state")

    assert "Deletion of requested consumer groups ('console-g') was successful." in \
        kafka_tools(*groups, "--delete", "--group", "console-g")
    assert "console-g" not in kafka_tools(*groups, "--list").split()


def test_get_offsets_delete_records_log_dirs_and_leader_election(kafka_tools, peer_broker):
    b = ("--bootstrap-server", peer_broker.bootstrap)
    topic = new_topic(kafka_tools, peer_broker, 2)
    produce(peer_broker, topic, [b"v%d" % i for i in range(20)], partition=0)
    produce(peer_broker, topic, [b"w%d" % i for i in range(3)], partition=1)
    assert kafka_tools("kafka-get-offsets", *b, "--topic", topic).split() == [f"{topic}:0:20", f"{topic}:1:3"]
    assert kafka_tools("kafka-get-offsets", *b, "--topic", topic, "--time", "earliest").split() == \
        [f"{topic}:0:0", f"{topic}:1:0"]
    assert kafka_tools("kafka-get-offsets", *b, "--topic-partitions", f"{topic}:0", "--time", "max-timestamp"
                       ).split() == [f"{topic}:0:19"]

    plan = peer_broker.data.parent / "delete-records.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 7}]}))
    deleted = kafka_tools("kafka-delete-records", *b, "--offset-json-file", str(plan))
    assert f"partition: {topic}-0\tlow_watermark: 7" in deleted
    assert kafka_tools("kafka-get-offsets", *b, "--topic", topic, "--time", "-2").split() == \
        [f"{topic}:0:7", f"{topic}:1:0"]

    described = kafka_tools("kafka-log-dirs", *b, "--describe", "--topic-list", topic)
    report = json.loads(next(line for line in described.splitlines() if line.startswith("{")))
    [log_dir] = report["brokers"][0]["logDirs"]
    assert log_dir["error"] is None and log_dir["logDir"] == str(peer_broker.data / "log")
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    on_disk = {f"{topic}-{p}": sum(f.stat().st_size for f in (peer_broker.data / "log" / f"{topic}-{p}").glob("*.log"))
               for p in (0, 1)}
    assert sizes == on_disk and all(size > 0 for size in sizes.values())

    # One replica, already the leader: nothing to elect, as Kafka answers for such a partition.
    for election in ("preferred", "unclean"):
        assert f"Valid replica already elected for partitions {topic}-0" in kafka_tools(
            "kafka-leader-election", *b, "--election-type", election, "--topic", topic, "--partition", "0")
    kafka_tools("kafka-leader-election", *b, "--election-type", "preferred", "--all-topic-partitions")


def test_kafka_transactions_list_and_describe(kafka_tools, peer_broker):
    from confluent_kafka import Producer

    b = ("--bootstrap-server", peer_broker.bootstrap)
    topic = new_topic(kafka_tools, peer_broker)
    done = Producer({"bootstrap.servers": peer_broker.bootstrap, "transactional.id": "tools-done"})
    done.init_transactions(20)
    done.begin_transaction()
    done.produce(topic, b"committed")
    done.commit_transaction(20)
    open_one = Producer({"bootstrap.servers": peer_broker.bootstrap, "transactional.id": "tools-open"})
    open_one.init_transactions(20)
    open_one.begin_transaction()
    open_one.produce(topic, b"pending")
    assert open_one.flush(20) == 0
    try:
        listed = {r["TransactionalId"]: r for r in _tsv(kafka_tools("kafka-transactions", *b, "list"))}
        assert listed["tools-done"]["TransactionState"] == "CompleteCommit"
        assert listed["tools-open"]["TransactionState"] == "Ongoing"
        [described] = _tsv(kafka_tools("kafka-transactions", *b, "describe", "--transactional-id", "tools-open"))
        assert described["TransactionState"] == "Ongoing" and described["TopicPartitions"] == f"{topic}-0"
        assert described["ProducerId"] == listed["tools-open"]["ProducerId"]
        producers = _tsv(kafka_tools("kafka-transactions", *b, "describe-producers", "--topic", topic,
                                     "--partition", "0"))
        starts = {p["ProducerId"]: p["CurrentTransactionStartOffset"] for p in producers}
        # "committed" at 0 and its COMMIT marker at 1, then the open transaction's first record
        assert starts == {listed["tools-done"]["ProducerId"]: "None", listed["tools-open"]["ProducerId"]: "2"}
        assert _tsv(kafka_tools("kafka-transactions", *b, "find-hanging", "--broker-id", "0")) == []
    finally:
        open_one.abort_transaction(20)


def _tsv(output: str) -> list[dict[str, str]]:
    """kafka-transactions prints a tab-separated table with a header line."""
    lines = [line for line in output.splitlines() if line.strip()]
    header = [h.strip() for h in lines[0].split("\t")]
    return [dict(zip(header, (c.strip() for c in line.split("\t")))) for line in lines[1:]]


def test_kafka_share_groups(kafka_tools, peer_broker):
    b = ("--bootstrap-server", peer_broker.bootstrap)
    topic = new_topic(kafka_tools, peer_broker)
    produce(peer_broker, topic, [b"s%d" % i for i in range(10)])
    kafka_tools("kafka-configs", *b, "--alter", "--entity-type", "groups", "--entity-name", "share-g",
                "--add-config", "share.auto.offset.reset=earliest")
    consumed = kafka_tools("kafka-console-share-consumer", *b, "--topic", topic, "--group", "share-g",
                           "--max-messages", "10", "--timeout-ms", "30000")
    assert sorted(consumed.split()) == sorted("s%d" % i for i in range(10))

    share = ("kafka-share-groups", *b)
    assert "share-g" in kafka_tools(*share, "--list").split()
    [row] = table(kafka_tools(*share, "--describe", "--group", "share-g"))
    assert (row["TOPIC"], row["PARTITION"], row["START-OFFSET"], row["LAG"]) == (topic, "0", "10", "0")
    assert "Empty" in kafka_tools(*share, "--describe", "--group", "share-g", "--state")
    kafka_tools(*share, "--reset-offsets", "--group", "share-g", "--topic", topic, "--to-earliest", "--execute")
    [row] = table(kafka_tools(*share, "--describe", "--group", "share-g"))
    assert (row["START-OFFSET"], row["LAG"]) == ("0", "10")
    assert "Deletion of requested share groups ('share-g') was successful." in \
        kafka_tools(*share, "--delete", "--group", "share-g")
    assert "share-g" not in kafka_tools(*share, "--list").split()


def test_kafka_metadata_quorum(kafka_tools, peer_broker):
    status = dict(line.split(":", 1) for line in kafka_tools(
        "kafka-metadata-quorum", "--bootstrap-server", peer_broker.bootstrap, "describe", "--status").splitlines())
    status = {k: v.strip() for k, v in status.items()}
    assert (status["LeaderId"], status["LeaderEpoch"], status["HighWatermark"]) == ("0", "0", "0")
    assert status["MaxFollowerLag"] == "0" and status["CurrentObservers"] == "[]"
    assert json.loads(status["CurrentVoters"]) == [{"id": 0, "endpoints": [f"PLAINTEXT://{peer_broker.bootstrap}"]}]
    replication = _tsv(kafka_tools("kafka-metadata-quorum", "--bootstrap-server", peer_broker.bootstrap, "describe",
                                   "--replication"))
    assert [(r["NodeId"], r["LogEndOffset"], r["Lag"], r["Status"]) for r in replication] == [("0", "0", "0", "Leader")]


def test_producer_and_consumer_perf_tools(kafka_tools, peer_broker):
    b = ("--bootstrap-server", peer_broker.bootstrap)
    topic = new_topic(kafka_tools, peer_broker)
    produced = kafka_tools("kafka-producer-perf-test", "--topic", topic, "--num-records", "20000", "--record-size",
                           "100", "--throughput", "-1", "--command-property", f"bootstrap.servers={peer_broker.bootstrap}",
                           "acks=all", "compression.type=lz4")
    assert re.search(r"^20000 records sent, [\d.]+ records/sec", produced, re.M), produced
    transactional = kafka_tools("kafka-producer-perf-test", "--topic", topic, "--num-records", "5000", "--record-size",
                                "100", "--throughput", "-1", "--transaction-duration-ms", "200", "--command-property",
                                f"bootstrap.servers={peer_broker.bootstrap}")
    assert re.search(r"^5000 records sent", transactional, re.M), transactional

    consumed = kafka_tools("kafka-consumer-perf-test", *b, "--topic", topic, "--num-records", "25000", "--timeout",
                           "60000", "--command-property", "isolation.level=read_committed", "group.protocol=consumer")
    header, values = [line for line in consumed.splitlines() if "," in line][-2:]
    stats = dict(zip((h.strip() for h in header.split(",")), (v.strip() for v in values.split(","))))
    assert int(stats["data.consumed.in.nMsg"]) == 25000, consumed
