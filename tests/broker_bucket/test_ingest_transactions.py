"""Ingest with read_committed over transactions a bucket broker sealed (issue 29): real
transactional producers (librdkafka), a broker sealing every 400 ms, real Spark and Delta on the
versitygw bucket. The aborts of closed segments come from their `.txnindex` objects, the
transactions open at the manifest's end from the producer snapshot object there: the table holds
exactly the committed records, and a transaction open across a seal holds the run at its first
offset until it is decided; the next run ingests it once."""

from __future__ import annotations

from deltalake import DeltaTable

from tests.support.bucket_broker import open_transaction, transactions, wait_sealed
from tests.support.topics import create_topic
from tests.support.waits import wait_for
from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.table.delta import app_id
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import load_newest
from topiclake.objectlog.reader import read_log
from topiclake.store.objects import ObjectStore

TOPIC = "payments"
GROUP = f"topiclake-ingest-{TOPIC}"


def table_values(root) -> dict[int, bytes]:
    data = DeltaTable(root.uri("tables", TOPIC), storage_options=root.delta_storage_options()).to_pyarrow_table()
    rows = dict(zip(data["offset"].to_pylist(), data["value"].to_pylist()))
    assert len(rows) == data.num_rows, "an offset is in the table twice"
    return rows


def test_transactions_sealed_in_closed_segments_are_ingested_read_committed_exactly_once(sealing_brokers, spark):
    broker = sealing_brokers.start("first")
    create_topic(broker.bootstrap, 1, TOPIC)
    committed, aborted = transactions(broker.bootstrap, TOPIC, (True, False, True))
    to_commit, commit_offsets = open_transaction(broker.bootstrap, TOPIC, "to-commit")
    to_abort, abort_offsets = open_transaction(broker.bootstrap, TOPIC, "to-abort")
    store, keys = ObjectStore(sealing_brokers.root), PartitionKeys(TOPIC, 0)
    manifest = wait_sealed(store, keys, max(abort_offsets) + 1)  # both open transactions' records sealed
    assert any(segment.txn_index_key for segment in manifest.segments), "the abort is in a .txnindex object"
    options = IngestOptions(topics=(TOPIC,), root=sealing_brokers.root, bootstrap="none", target_task_bytes=2048)

    first = ingest(spark, options)
    (plan,) = [p.plan for p in first.tables[0].partitions]
    assert plan.end_offset == min(commit_offsets) < load_newest(store, keys).end_offset  # the LSO, held
    assert any(t.closed and t.aborted for t in plan.tasks), "a closed segment's task drops the aborted range"
    rounds = [b"r0-%d" % i for i in range(20)] + [b"r2-%d" % i for i in range(20)]
    assert table_values(sealing_brokers.root) == dict(zip(sorted(committed), rounds))

    to_commit.commit_transaction(30)
    to_abort.abort_transaction(30)
    log_end = max(abort_offsets) + 3  # after both markers, which the coordinator writes after answering
    wait_for(lambda: list(read_log(store, keys))[-1].next_offset == log_end, 30, 0.1, "both markers in the bucket")
    second = ingest(spark, options)
    rows = table_values(sealing_brokers.root)
    assert set(rows) == set(committed) | set(commit_offsets)
    assert [rows[o] for o in commit_offsets] == [b"to-commit-%d" % i for i in range(10)]
    assert second.tables[0].version == 1

    wait_sealed(store, keys, log_end)  # if the second run found them in the tail, now they are sealed
    again = ingest(spark, options)
    assert again.tables[0].version is None and again.records == 0
    table = DeltaTable(sealing_brokers.root.uri("tables", TOPIC),
                       storage_options=sealing_brokers.root.delta_storage_options())
    assert table.transaction_version(app_id(GROUP, TOPIC, 0)) == log_end
