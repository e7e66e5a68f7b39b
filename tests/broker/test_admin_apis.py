"""The admin APIs of one broker, through real admin clients (kafka-python's KafkaAdminClient,
confluent-kafka's AdminClient): DeleteRecords, log dirs, elections, reassignments, producers,
transactions, DescribeTopicPartitions, the metadata quorum; client quotas (no client exposes them:
raw requests)."""

from __future__ import annotations

import time

import confluent_kafka as ck
import kafka.errors as kerrors
import pytest
from confluent_kafka.admin import AdminClient, OffsetSpec
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kio.schema.describe_client_quotas.v1 import request as quotas_describe
from kio.schema.elect_leaders.v2 import request as elect_req
from kio.schema.errors import ErrorCode

from tests.support.in_process_broker import InProcessBroker
from tests.support.wire import batch, fetch
from tests.support.quota_wire import alter_quotas, produce_throttled, fetch_throttled


@pytest.fixture
def kafka_admin(broker):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    yield client
    client.close()


def produce_values(broker, topic: str, count: int, partition: int = 0, **config) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, **config)
    for i in range(count):
        producer.send(topic, b"v%d" % i, partition=partition)
    producer.flush()
    producer.close()


def earliest(bootstrap: str, topic: str, partition: int = 0) -> int:
    tp = ck.TopicPartition(topic, partition)
    client = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the future resolves
    return client.list_offsets({tp: OffsetSpec.earliest()})[tp].result(10).offset


def test_delete_records_moves_the_log_start_offset_durably(tmp_path):
    broker = InProcessBroker(tmp_path / "data").start()
    try:
        broker.create_topic("purge", 2)
        produce_values(broker, "purge", 5)
        confluent = AdminClient({"bootstrap.servers": broker.bootstrap})
        futures = confluent.delete_records([ck.TopicPartition("purge", 0, 3)])
        assert [f.result(10).low_watermark for f in futures.values()] == [3]
        assert earliest(broker.bootstrap, "purge") == 3
        with broker.client() as c:
            assert fetch(c, "purge", 1).error_code == ErrorCode.offset_out_of_range
            assert fetch(c, "purge", 3).error_code == ErrorCode.none
        kafka_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            # -1 means "up to the high watermark"; a start offset never moves back.
            assert kafka_admin.delete_records({TopicPartition("purge", 0): -1})[TopicPartition("purge", 0)][
                "low_watermark"] == 5
            assert kafka_admin.delete_records({TopicPartition("purge", 0): 2})[TopicPartition("purge", 0)][
                "low_watermark"] == 5
            with pytest.raises(kerrors.OffsetOutOfRangeError):
                kafka_admin.delete_records({TopicPartition("purge", 1): 1})  # beyond its high watermark (0)
            with pytest.raises(kerrors.UnknownTopicOrPartitionError):
                kafka_admin.delete_records({TopicPartition("purge", 7): 0}, partition_leader_id=0)
        finally:
            kafka_admin.close()
    finally:
        broker.stop()
    # The start offset is checkpointed: a restarted broker keeps it.
    broker = InProcessBroker(tmp_path / "data").start()
    try:
        assert earliest(broker.bootstrap, "purge") == 5
    finally:
        broker.stop()


def test_delete_records_refused_on_a_compacted_topic(broker, kafka_admin):
    broker.create_topic("table", **{"cleanup.policy": "compact"})
    produce_values(broker, "table", 2)
    with pytest.raises(kerrors.PolicyViolationError):
        kafka_admin.delete_records({TopicPartition("table", 0): 1})


def test_log_dirs_one_dir_per_storage_root(broker, kafka_admin):
    broker.create_topic("sized", 2)
    produce_values(broker, "sized", 3, partition=1)
    [entry] = kafka_admin.describe_log_dirs()
    [log_dir] = entry["log_dirs"]
    assert entry["broker"] == 0 and log_dir["error_code"] == 0
    assert log_dir["log_dir"] == str(broker.context.layout.logs_dir.resolve())
    sizes = {(t["name"], p["partition_index"]): p["partition_size"] for t in log_dir["topics"]
             for p in t["partitions"]}
    on_disk = sum(f.stat().st_size for f in broker.context.layout.log_dir("sized", 1).glob("*.log"))
    assert sizes[("sized", 0)] == 0 and sizes[("sized", 1)] == on_disk > 0
    assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
    [only] = kafka_admin.describe_log_dirs({"sized": [1]})[0]["log_dirs"][0]["topics"]
    assert [p["partition_index"] for p in only["partitions"]] == [1]

    moved = kafka_admin.alter_replica_log_dirs({("sized", 0, 0): log_dir["log_dir"], ("sized", 1, 0): "/elsewhere",
                                          ("sized", 9, 0): log_dir["log_dir"]})
    assert {tpr.partition: err for tpr, err in moved.items()} == {
        0: kerrors.NoError, 1: kerrors.LogDirNotFoundError, 9: kerrors.UnknownTopicOrPartitionError}


def test_elections_and_reassignments_name_the_one_replica(broker, kafka_admin):
    broker.create_topic("placed", 2)
    response = kafka_admin.elect_leaders(0, {"placed": [0, 1], "missing": [0]}, raise_errors=False)
    codes = {(r.topic, p.partition_id): p.error_code for r in response.replica_election_results
             for p in r.partition_result}
    assert codes == {("placed", 0): ErrorCode.election_not_needed, ("placed", 1): ErrorCode.election_not_needed,
                     ("missing", 0): ErrorCode.unknown_topic_or_partition}
    with broker.client() as c:  # all partitions (null): only partitions an election ran for are listed
        every = c.request(elect_req.ElectLeadersRequest(election_type=0, topic_partitions=None))
    assert (every.error_code, every.replica_election_results) == (ErrorCode.none, ())
    confluent = AdminClient({"bootstrap.servers": broker.bootstrap})
    result = confluent.elect_leaders(ck.ElectionType.PREFERRED, [ck.TopicPartition("placed", 0)]).result(10)
    assert result[ck.TopicPartition("placed", 0)].code() == ck.KafkaError.ELECTION_NOT_NEEDED

    results = kafka_admin.alter_partition_reassignments({TopicPartition("placed", 0): [0],
                                                   TopicPartition("placed", 1): [0, 1],
                                                   TopicPartition("missing", 0): [0]})
    assert results == {TopicPartition("placed", 0): None,
                       TopicPartition("placed", 1): kerrors.InvalidReplicationAssignmentError,
                       TopicPartition("missing", 0): kerrors.UnknownTopicOrPartitionError}
    cancel = kafka_admin.alter_partition_reassignments({TopicPartition("placed", 0): None})
    assert cancel == {TopicPartition("placed", 0): kerrors.NoReassignmentInProgressError}
    assert kafka_admin.list_partition_reassignments() == {}


def test_describe_producers_and_transactions(broker, kafka_admin):
    broker.create_topic("tx", 2)
    produce_values(broker, "tx", 4, enable_idempotence=True)
    [state] = kafka_admin.describe_producers([TopicPartition("tx", 0)]).values()
    [idempotent] = state.active_producers
    assert (idempotent.producer_epoch, idempotent.last_sequence, idempotent.current_transaction_start_offset) == \
        (0, 3, -1)

    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "app-1"})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce("tx", value=b"open", partition=1)
    p.flush(10)
    [listed] = kafka_admin.list_transactions()[0]
    assert (listed.transactional_id, listed.state) == ("app-1", "Ongoing")
    described = kafka_admin.describe_transactions(["app-1"])["app-1"]
    assert (described.state, described.producer_id, described.topic_partitions) == (
        "Ongoing", listed.producer_id, {TopicPartition("tx", 1)})
    assert described.transaction_timeout_ms == 60_000 and described.transaction_start_time_ms > 0
    [in_txn] = kafka_admin.describe_producers([TopicPartition("tx", 1)])[TopicPartition("tx", 1)].active_producers
    assert (in_txn.producer_id, in_txn.current_transaction_start_offset) == (listed.producer_id, 0)
    assert [h.transactional_id for h in kafka_admin.find_hanging_transactions()] == []
    assert kafka_admin.list_transactions(state_filters=["CompleteCommit"])[0] == []
    p.commit_transaction(10)
    assert [t.state for t in kafka_admin.list_transactions(transactional_id_pattern="app-.*")[0]] == ["CompleteCommit"]
    assert kafka_admin.list_transactions(transactional_id_pattern="app")[0] == [], "the pattern matches whole ids"
    with pytest.raises(kerrors.TransactionalIdNotFoundError):
        kafka_admin.describe_transactions(["nobody"])


def test_describe_topic_partitions_pages_by_cursor(broker, kafka_admin):
    broker.create_topic("a", 3)
    broker.create_topic("b", 1)
    first = kafka_admin.describe_topic_partitions(["b", "a"], response_partition_limit=2)
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in first["topics"]] == [("a", [0, 1])]
    assert first["next_cursor"] == {"topic_name": "a", "partition_index": 2}
    second = kafka_admin.describe_topic_partitions(["a", "b"], response_partition_limit=2, cursor=first["next_cursor"])
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in second["topics"]] == [
        ("a", [2]), ("b", [0])]
    assert second["next_cursor"] is None
    partition = second["topics"][1]["partitions"][0]
    assert (partition["leader_id"], partition["replica_nodes"], partition["isr_nodes"]) == (0, [0], [0])
    missing = kafka_admin.describe_topic_partitions(["nope"])["topics"][0]
    assert missing["error_code"] == ErrorCode.unknown_topic_or_partition


def test_metadata_quorum_of_one(broker, kafka_admin):
    quorum = kafka_admin.describe_metadata_quorum()
    [partition] = quorum["topics"][0]["partitions"]
    assert (partition["leader_id"], partition["leader_epoch"]) == (0, 0)
    # A real offset, not -1 ("unknown"): an empty metadata log's (kafka-metadata-quorum prints it)
    assert partition["high_watermark"] == 0 and partition["current_voters"][0]["log_end_offset"] == 0
    assert [v["replica_id"] for v in partition["current_voters"]] == [0] and partition["observers"] == []
    assert [(n["node_id"], n["listeners"][0]["port"]) for n in quorum["nodes"]] == [(0, broker.server.port)]


def describe_quotas(client, *components, strict=False):
    response = client.request(quotas_describe.DescribeClientQuotasRequest(components=tuple(
        quotas_describe.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components), strict=strict))
    if response.error_code != ErrorCode.none:
        return response.error_code
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in response.entries}


def test_client_quotas_are_stored_and_described(tmp_path):
    broker = InProcessBroker(tmp_path / "data").start()
    try:
        with broker.client() as c:
            assert alter_quotas(c, {"user": "alice"}, {"producer_byte_rate": 1024.0,
                                                       "request_percentage": 12.5}) == ErrorCode.none
            assert alter_quotas(c, {"user": "alice", "client_id": "app"}, {"consumer_byte_rate": 2048.0}) == \
                ErrorCode.none
            assert alter_quotas(c, {"client_id": None}, {"producer_byte_rate": 99.0}) == ErrorCode.none  # default
            assert alter_quotas(c, {"ip": "10.0.0.1"}, {"connection_creation_rate": 5.0}) == ErrorCode.none
            assert alter_quotas(c, {"user": "bob"}, {"producer_byte_rate": 1.0}, validate_only=True) == ErrorCode.none
            for entity, ops in (({"user": "x"}, {"producer_byte_rate": 1.5}),  # a whole number is required
                                ({"user": "x"}, {"connection_creation_rate": 1.0}),  # an ip quota
                                ({"ip": "10.0.0.1", "user": "x"}, {"connection_creation_rate": 1.0}),
                                ({"ip": "not-an-ip"}, {"connection_creation_rate": 1.0}),
                                ({"group": "g"}, {"producer_byte_rate": 1.0})):
                assert alter_quotas(c, entity, ops) == ErrorCode.invalid_request, (entity, ops)

            alice = (("user", "alice"),)
            assert describe_quotas(c, ("user", 0, "alice"), strict=True) == {
                alice: {"producer_byte_rate": 1024.0, "request_percentage": 12.5}}
            assert set(describe_quotas(c, ("user", 0, "alice"))) == {alice, (("client-id", "app"), ("user", "alice"))}
            assert describe_quotas(c, ("client-id", 1, None)) == {(("client-id", None),): {"producer_byte_rate": 99.0}}
            assert describe_quotas(c, ("user", 0, "alice"), ("user", 0, "bob")) == ErrorCode.invalid_request
            assert alter_quotas(c, {"user": "alice"}, {"request_percentage": None}) == ErrorCode.none
    finally:
        broker.stop()
    broker = InProcessBroker(tmp_path / "data").start()  # stored in shared storage
    try:
        with broker.client() as c:
            assert describe_quotas(c, ("user", 2, None), strict=True) == {
                (("user", "alice"),): {"producer_byte_rate": 1024.0}}
    finally:
        broker.stop()


def test_byte_rate_quotas_throttle_and_mute(broker):
    """producer_byte_rate / consumer_byte_rate: over quota, throttle_time_ms = (rate - quota) / quota *
    window (at least 10 s of window), and the connection reads nothing more until then; a throttled
    fetch carries no records."""
    broker.create_topic("metered")
    with broker.client() as c:  # its client id is topiclake-cli
        assert alter_quotas(c, {"client_id": "topiclake-cli"}, {"producer_byte_rate": 1000.0,
                                                                "consumer_byte_rate": 1000.0}) == ErrorCode.none
        assert produce_throttled(c, "metered", batch([b"x" * 100])) == (ErrorCode.none, 0)
        code, throttle_ms = produce_throttled(c, "metered", batch([b"y" * 12_000]))  # ~1.2x the quota
        assert code == ErrorCode.none and 1_000 < throttle_ms < 3_000, throttle_ms
        started = time.monotonic()
        fetched, throttle_ms = fetch_throttled(c, "metered")  # read only once the mute has passed
        assert time.monotonic() - started >= 1.0
        assert fetched == 0 and throttle_ms > 0, "12 kB would put it over its consumer quota: no records"
    with broker.client() as other:
        other.client_id = "unmetered"
        assert fetch_throttled(other, "metered")[0] > 12_000
