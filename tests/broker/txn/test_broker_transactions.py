"""Transactions against an in-process broker: raw requests for the exact codes, real clients for
the read_committed view, and restarts over the same storage."""

from __future__ import annotations

import asyncio
import time

import confluent_kafka as ck
import pytest
from kio.schema.errors import ErrorCode

from topiclake.broker.txn.config import TransactionsConfig
from topiclake.broker.txn.coordinator import TRANSACTION_STATE_TOPIC
from topiclake.broker.txn.state import S
from topiclake.segments.batch import iter_batches

from tests.support.in_process_broker import InProcessBroker
from tests.support import txn_wire as raw


def values(fetched) -> list[bytes]:
    """Record values of a fetch response, skipping control batches (no aborted-txn filtering)."""
    return [r.value for b in iter_batches(bytes(fetched.records)) if not b.header.is_control for r in b.records()]


def run(broker, coro):
    return asyncio.run_coroutine_threadsafe(coro, broker.loop).result(10)


def consume(bootstrap, topic, partitions, isolation, expected, timeout=8.0) -> list[bytes]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{isolation}", "isolation.level": isolation,
                     "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, p, 0) for p in partitions])
    got: list[bytes] = []
    deadline = time.time() + timeout
    try:
        while time.time() < deadline and len(got) < expected:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
        # a little longer: anything beyond `expected` would be a bug
        end = time.time() + 0.5
        while time.time() < end:
            m = c.poll(0.1)
            if m is not None and not m.error():
                got.append(m.value())
    finally:
        c.close()
    return got


def test_commit_and_abort_seen_by_read_committed_and_uncommitted(broker):
    broker.create_topic("orders", 2)
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "shop"})
    p.init_transactions(10)
    p.begin_transaction()
    for i in range(6):
        p.produce("orders", value=b"kept-%d" % i, partition=i % 2)
    p.commit_transaction(10)
    p.begin_transaction()
    for i in range(4):
        p.produce("orders", value=b"dropped-%d" % i, partition=i % 2)
    p.flush(10)
    p.abort_transaction(10)
    committed = consume(broker.bootstrap, "orders", [0, 1], "read_committed", 6)
    assert sorted(committed) == sorted(b"kept-%d" % i for i in range(6))
    everything = consume(broker.bootstrap, "orders", [0, 1], "read_uncommitted", 10)
    assert len(everything) == 10 and {v for v in everything if v.startswith(b"dropped")} == {
        b"dropped-%d" % i for i in range(4)}

    import kafka  # kafka-python drops aborted records with the aborted_transactions list too
    kc = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=3000)
    kc.assign([kafka.TopicPartition("orders", 0), kafka.TopicPartition("orders", 1)])
    kc.seek_to_beginning()
    assert sorted(m.value for m in kc) == sorted(b"kept-%d" % i for i in range(6))
    kc.close()

    m = broker.context.txn.get("shop")
    assert m.state is S.COMPLETE_ABORT and m.partitions == frozenset()
    with broker.client() as c:  # the ABORT-ed data is listed for read_committed fetches
        resp = raw.fetch(c, "orders", 0, committed=True)
        assert [(t.producer_id, t.first_offset) for t in resp.aborted_transactions] == [(m.producer_id, 4)]
        assert resp.last_stable_offset == resp.high_watermark == 7
        assert raw.fetch(c, "orders", 0, committed=False).aborted_transactions is None


def test_last_stable_offset_holds_back_read_committed(broker):
    broker.create_topic("t")
    with broker.client() as c:
        err, pid, epoch = raw.init_producer_id(c, "lso")
        assert err == ErrorCode.none and epoch == 0
        assert raw.add_partitions(c, "lso", pid, epoch, "t", [0]) == {("t", 0): ErrorCode.none}
        r = raw.produce(c, "lso", "t", raw.txn_batch([b"a", b"b"], pid, epoch, 0))
        assert r.error_code == ErrorCode.none and r.base_offset == 0
        assert raw.latest(c, "t", committed=True) == 0
        assert raw.latest(c, "t", committed=False) == 2
        resp = raw.fetch(c, "t", 0, committed=True)
        assert (resp.high_watermark, resp.last_stable_offset, bytes(resp.records)) == (2, 0, b"")
        assert values(raw.fetch(c, "t", 0, committed=False)) == [b"a", b"b"]
        assert raw.end_txn(c, "lso", pid, epoch, True) == ErrorCode.none
        assert raw.latest(c, "t", committed=True) == 3  # past the COMMIT marker
        resp = raw.fetch(c, "t", 0, committed=True)
        assert values(resp) == [b"a", b"b"] and resp.aborted_transactions == ()
        assert raw.end_txn(c, "lso", pid, epoch, True) == ErrorCode.none  # a retry is fine
        assert raw.end_txn(c, "lso", pid, epoch, False) == ErrorCode.invalid_txn_state


def test_produce_only_into_partitions_of_the_ongoing_transaction(broker):
    broker.create_topic("t", 2)
    with broker.client() as c:
        _, pid, epoch = raw.init_producer_id(c, "strict")
        data = raw.txn_batch([b"x"], pid, epoch, 0)
        assert raw.produce(c, "strict", "t", data).error_code == ErrorCode.invalid_txn_state  # nothing added
        raw.add_partitions(c, "strict", pid, epoch, "t", [0])
        assert raw.produce(c, "strict", "t", data, partition=1).error_code == ErrorCode.invalid_txn_state
        assert raw.produce(c, "strict", "t", data, partition=0).error_code == ErrorCode.none
        assert raw.produce(c, None, "t", raw.txn_batch([b"y"], pid, epoch, 1)).error_code == \
            ErrorCode.transactional_id_authorization_failed
        # unknown partitions fail alone, the others are not attempted
        assert raw.add_partitions(c, "strict", pid, epoch, "t", [1, 7]) == {
            ("t", 1): ErrorCode.operation_not_attempted, ("t", 7): ErrorCode.unknown_topic_or_partition}
        assert raw.add_partitions(c, "nobody", pid, epoch, "t", [0]) == {
            ("t", 0): ErrorCode.invalid_producer_id_mapping}


def test_a_new_instance_fences_the_old_one(broker):
    broker.create_topic("t")
    with broker.client() as c:
        _, pid, epoch = raw.init_producer_id(c, "zombie")
        raw.add_partitions(c, "zombie", pid, epoch, "t", [0])
        assert raw.produce(c, "zombie", "t", raw.txn_batch([b"old"], pid, epoch, 0)).error_code == ErrorCode.none
        # the new instance: its predecessor's transaction is aborted, the epoch bumped twice
        err, pid2, epoch2 = raw.init_producer_id(c, "zombie")
        assert (err, pid2, epoch2) == (ErrorCode.none, pid, epoch + 2)
        assert raw.latest(c, "t", committed=True) == 2  # data + ABORT marker: stable
        assert raw.end_txn(c, "zombie", pid, epoch, True) == ErrorCode.producer_fenced
        assert raw.fetch(c, "t", 0, committed=True).aborted_transactions[0].first_offset == 0


def test_fenced_codes_by_version(broker):
    from kio.schema.end_txn.v1 import request as end_v1

    broker.create_topic("t")
    with broker.client() as c:
        _, pid, epoch = raw.init_producer_id(c, "v")
        raw.init_producer_id(c, "v")
        assert raw.end_txn(c, "v", pid, epoch, True) == ErrorCode.producer_fenced
        old = c.request(end_v1.EndTxnRequest(transactional_id="v", producer_id=pid, producer_epoch=epoch,
                                             committed=True))
        assert old.error_code == ErrorCode.invalid_producer_epoch
        assert raw.produce(c, "v", "t", raw.txn_batch([b"z"], pid, epoch, 0)).error_code == \
            ErrorCode.invalid_producer_epoch


def test_confluent_producer_is_fenced_by_a_new_instance(broker):
    broker.create_topic("t")
    old = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "app"})
    old.init_transactions(10)
    old.begin_transaction()
    old.produce("t", value=b"from-old")
    old.flush(10)
    new = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "app"})
    new.init_transactions(10)
    new.begin_transaction()
    new.produce("t", value=b"from-new")
    new.commit_transaction(10)
    with pytest.raises(ck.KafkaException) as e:
        old.commit_transaction(10)
    assert e.value.args[0].code() in (ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED,
                                      ck.KafkaError.INVALID_PRODUCER_EPOCH)
    assert consume(broker.bootstrap, "t", [0], "read_committed", 1) == [b"from-new"]


def test_idle_transaction_times_out_and_is_aborted(tmp_path):
    b = InProcessBroker(tmp_path / "data", transactions=TransactionsConfig(abort_check_interval_ms=100)).start()
    try:
        b.create_topic("t")
        p = ck.Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "slow",
                         "transaction.timeout.ms": 1000})
        p.init_transactions(10)
        p.begin_transaction()
        p.produce("t", value=b"never")
        p.flush(10)
        before = b.context.txn.get("slow")
        deadline = time.time() + 5
        while time.time() < deadline and b.context.txn.get("slow").state is not S.COMPLETE_ABORT:
            time.sleep(0.05)
        after = b.context.txn.get("slow")
        assert after.state is S.COMPLETE_ABORT and after.producer_epoch == before.producer_epoch + 1
        part = run(b, b.context.partitions.get("t", 0))
        assert part.last_stable_offset == part.high_watermark == 2
        with pytest.raises(ck.KafkaException):
            p.commit_transaction(5)
        assert consume(b.bootstrap, "t", [0], "read_committed", 1, timeout=2) == []
    finally:
        b.stop()


def test_restart_keeps_ongoing_and_finishes_prepared_transactions(tmp_path):
    root = tmp_path / "data"
    b = InProcessBroker(root).start()
    try:
        b.create_topic("t")
        with b.client() as c:
            _, pid, epoch = raw.init_producer_id(c, "open")
            raw.add_partitions(c, "open", pid, epoch, "t", [0])
            raw.produce(c, "open", "t", raw.txn_batch([b"o1", b"o2"], pid, epoch, 0))
            _, pid2, epoch2 = raw.init_producer_id(c, "prep")
            raw.add_partitions(c, "prep", pid2, epoch2, "t", [0])
            raw.produce(c, "prep", "t", raw.txn_batch([b"p1"], pid2, epoch2, 0))
        # a crash between PrepareCommit and the markers: persist the decision only
        coordinator = b.context.txn
        from topiclake.broker.txn import state
        prepared = state.end_transaction(coordinator.get("prep"), pid2, epoch2, True, coordinator.clock()).metadata
        run(b, coordinator._persist(prepared))
        assert coordinator.get("prep").state is S.PREPARE_COMMIT
    finally:
        b.stop()

    b = InProcessBroker(root).start()
    try:
        coordinator = b.context.txn
        assert coordinator.get("prep").state is S.COMPLETE_COMMIT  # completed at load
        assert coordinator.get("open").state is S.ONGOING
        part = run(b, b.context.partitions.get("t", 0))
        assert part.last_stable_offset == 0  # "open" still holds it, rebuilt from the log
        with b.client() as c:
            assert raw.end_txn(c, "open", pid, epoch, False) == ErrorCode.none
            resp = raw.fetch(c, "t", 0, committed=True)
            assert [(t.producer_id, t.first_offset) for t in resp.aborted_transactions] == [(pid, 0)]
            assert resp.last_stable_offset == resp.high_watermark == 5
        assert b.context.partitions.topic(TRANSACTION_STATE_TOPIC).partitions == 50
    finally:
        b.stop()

    b = InProcessBroker(root).start()  # the aborted-transaction index is rebuilt from the log too
    try:
        part = run(b, b.context.partitions.get("t", 0))
        assert [(t.producer_id, t.first_offset, t.last_offset) for t in part.txns.aborted()] == [(pid, 0, 4)]
        assert part.last_stable_offset == 5
    finally:
        b.stop()


def test_add_partitions_v4_verify_only(broker):
    from kio.schema.add_partitions_to_txn.v4 import request as add4

    broker.create_topic("t", 2)
    with broker.client() as c:
        _, pid, epoch = raw.init_producer_id(c, "batch")
        raw.add_partitions(c, "batch", pid, epoch, "t", [0])

        def txn(verify, parts, txn_id="batch", ep=epoch):
            return add4.AddPartitionsToTxnTransaction(transactional_id=txn_id, producer_id=pid, producer_epoch=ep,
                                                      verify_only=verify, topics=(
                                                          add4.AddPartitionsToTxnTopic(name="t", partitions=parts),))

        resp = c.request(add4.AddPartitionsToTxnRequest(transactions=(txn(True, (0, 1)), txn(True, (0,), ep=9))))
        codes = [{p.partition_index: p.partition_error_code for t in r.topic_results for p in t.results_by_partition}
                 for r in resp.results_by_transaction]
        assert codes == [{0: ErrorCode.none, 1: ErrorCode.invalid_txn_state}, {0: ErrorCode.producer_fenced}]
        assert broker.context.txn.get("batch").partitions == {("t", 0)}  # verify_only adds nothing
