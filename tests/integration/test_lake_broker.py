"""End to end with a real broker: a real Kafka client (confluent-kafka) produces to several
partitions (keys, headers, one committed and one aborted transaction); ingest; the Delta table,
read back with deltalake and with SQL, holds exactly what was committed, each offset once; the
group's offsets are mirrored into the broker, where `topiclake groups lag` and a standard client
see them; a broker that is down is only a warning."""

from __future__ import annotations

import subprocess
import sys

import pytest

from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.sql.query import run_sql
from topiclake.lake.table.delta import app_id
from topiclake.lake.table.location import discover_tables
from topiclake.segments.storage import StorageLayout

from tests.support.lake import read_table
from tests.support.paths import REPO
from tests.support.broker_process import BrokerProcess

pytestmark = pytest.mark.slow

TOPIC, PARTITIONS = "events", 3
GROUP = f"topiclake-ingest-{TOPIC}"


@pytest.fixture
def lake_broker(tmp_path):
    b = BrokerProcess(tmp_path / "data").start()
    yield b
    if b.proc.poll() is None:
        b.stop()


def produce(bootstrap: str) -> list[tuple]:
    """What was committed: (partition, offset, key, value, headers) of every acknowledged record
    outside an aborted transaction."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        future.result(15)
    acked: list[tuple] = []

    def delivered(headers=()):
        def on_delivery(err, msg):  # delivery reports carry no headers: remember the ones sent
            assert err is None, err
            acked.append((msg.partition(), msg.offset(), msg.key(), msg.value(),
                          [{"key": k, "value": v} for k, v in headers]))
        return on_delivery

    on_delivery = delivered()

    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i in range(30):
        plain.produce(TOPIC, key=f"key-{i}".encode(), value=f"value-{i}".encode(), partition=i % PARTITIONS,
                      headers=[("source", b"e2e"), ("seq", str(i).encode())],
                      on_delivery=delivered([("source", b"e2e"), ("seq", str(i).encode())]))
    plain.produce(TOPIC, key=b"tombstone", value=None, partition=0, on_delivery=on_delivery)
    plain.flush(15)

    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "e2e-txn", "linger.ms": 5})
    txn.init_transactions(15)
    txn.begin_transaction()
    for i in range(6):
        txn.produce(TOPIC, key=f"txn-{i}".encode(), value=f"committed-{i}".encode(), partition=i % 2,
                    on_delivery=on_delivery)
    txn.commit_transaction(15)
    committed = list(acked)

    txn.begin_transaction()
    for i in range(4):
        txn.produce(TOPIC, key=f"aborted-{i}".encode(), value=f"aborted-{i}".encode(), partition=i % 2)
    txn.flush(15)
    txn.abort_transaction(15)

    after: list[tuple] = []
    acked = after  # records after the aborted transaction: the ingest must read past it
    for i in range(3):
        plain.produce(TOPIC, key=f"late-{i}".encode(), value=f"late-{i}".encode(), partition=i,
                      on_delivery=on_delivery)
    plain.flush(15)
    return committed + after


def test_end_to_end_with_a_real_broker(spark, lake_broker, tmp_path):
    root = lake_broker.data
    expected = sorted(produce(lake_broker.bootstrap))
    assert len(expected) == 31 + 6 + 3

    result = ingest(spark, IngestOptions(topics=(TOPIC,), root=root, bootstrap=lake_broker.bootstrap))
    outcome = result.tables[0]
    assert outcome.version == 0 and result.records == len(expected)
    assert outcome.quality.success and outcome.mirror.ok, outcome.mirror.describe()
    assert sum(p.dropped_aborted for p in outcome.partitions) == 4
    assert sum(p.dropped_control for p in outcome.partitions) == 4  # 2 partitions x (commit + abort marker)

    # deltalake itself, not our reader
    table, data = read_table(root / "tables" / TOPIC)
    got = sorted(zip(data["partition"].to_pylist(), data["offset"].to_pylist(), data["key"].to_pylist(),
                     data["value"].to_pylist(), data["headers"].to_pylist()))
    assert got == expected
    assert set(data["topic"].to_pylist()) == {TOPIC}

    # SQL over the snapshot
    sql = run_sql(spark, f"SELECT partition, offset, key, value, COUNT(*) OVER (PARTITION BY partition, offset) AS n "
                         f"FROM {TOPIC} ORDER BY partition, offset", discover_tables(StorageLayout(root)))
    assert sql["n"].to_pylist() == [1] * len(expected)
    assert list(zip(*(sql[c].to_pylist() for c in ("partition", "offset", "key", "value")))) == \
        [e[:4] for e in expected]

    # The group's offsets: in the Delta log, and mirrored into the broker's __consumer_offsets
    ends = {p: table.transaction_version(app_id(GROUP, TOPIC, p)) for p in range(PARTITIONS)}
    assert ends == {p: 1 + max(e[1] for e in expected if e[0] == p) for p in range(PARTITIONS)}  # data ends each
    assert broker_offsets(lake_broker.bootstrap) == ends
    lag = subprocess.run([sys.executable, "-m", "topiclake.cli", "groups", "lag", GROUP, "--bootstrap",
                          lake_broker.bootstrap], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert lag.returncode == 0, lag.stderr
    rows = [line.split() for line in lag.stdout.splitlines()[1:] if line.strip()]
    assert {(int(r[1]), int(r[2]), int(r[4])) for r in rows} == {(p, ends[p], 0) for p in range(PARTITIONS)}

    # Nothing new: nothing committed; the broker going away is a warning, not a failure
    again = ingest(spark, IngestOptions(topics=(TOPIC,), root=root, bootstrap=lake_broker.bootstrap))
    assert again.tables[0].version is None and again.tables[0].mirror.ok
    lake_broker.stop()
    down = ingest(spark, IngestOptions(topics=(TOPIC,), root=root, bootstrap=lake_broker.bootstrap, mirror_timeout_s=2))
    assert down.tables[0].version is None and "unreachable" in down.tables[0].mirror.error
    assert read_table(root / "tables" / TOPIC)[0].version() == 0


def broker_offsets(bootstrap: str) -> dict[int, int]:
    """The group's committed offsets as a standard client sees them."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP)])[GROUP]
    return {tp.partition: tp.offset for tp in future.result(15).topic_partitions if tp.topic == TOPIC}
