"""Producer-id expiration (Kafka's producer.id.expiration.ms, ProducerStateManager.removeExpiredProducers
and loadFromSnapshot): an idle producer without an open transaction is forgotten by the periodic
check and left out when a snapshot is loaded; one with an open transaction, or active recently, stays."""

from __future__ import annotations

import time

import pytest
from kio.schema.errors import ErrorCode

from topiclake.broker.config import BrokerConfig
from topiclake.broker.errors import OutOfOrderSequence
from topiclake.broker.producer_state import ProducerState
from topiclake.broker.markers import write_marker
from topiclake.segments.batch import Record, build_batch, read_header
from topiclake.segments.errors import InvalidConfigError
from topiclake.segments.producer_snapshot import list_snapshots, read_snapshot

from tests.support.in_process_broker import InProcessBroker
from tests.broker.partitions import open_partition, produce
from tests.support.wire import batch
from tests.support.wire import produce as produce_request
from tests.support.waits import wait_for

EXPIRATION = 60_000
NOW = 1_700_000_000_000


def header(pid, seq, *, ts, epoch=0):
    return read_header(build_batch([Record(0, ts, None, b"v", ())], base_offset=0, producer_id=pid,
                                   producer_epoch=epoch, base_sequence=seq))


def test_remove_expired_keeps_open_transactions_and_recent_producers():
    state = ProducerState("t", 0)
    last = {1: NOW - EXPIRATION,  # idle exactly the expiration: gone (Kafka compares with >=)
            2: NOW - EXPIRATION - 1,  # idle longer, but its transaction is open: kept
            3: NOW - EXPIRATION + 1,  # just recent enough: kept
            4: NOW - 10 * EXPIRATION}  # idle for long: gone
    for offset, (pid, ts) in enumerate(last.items()):
        state.observe(header(pid, 0, ts=ts), offset, offset, ts)
    state.observe(header(5, 0, ts=NOW - 10 * EXPIRATION), 9, 9, NOW - 10 * EXPIRATION)
    state.observe_marker(5, 0, 0, NOW - 5)  # a recent COMMIT/ABORT marker is activity too (Kafka's lastTimestamp)

    assert sorted(state.remove_expired(NOW, EXPIRATION, {2: 1})) == [1, 4]
    assert [pid for pid in range(1, 6) if pid in state] == [2, 3, 5]
    assert state.remove_expired(NOW, EXPIRATION, {2: 1}) == []
    # The marker's timestamp is what the snapshot keeps as the producer's timestamp.
    assert {e.producer_id: e.timestamp for e in state.to_snapshot({})}[5] == NOW - 5


def test_expired_producer_is_unknown_again_and_leaves_the_next_snapshot(tmp_path):
    part = open_partition(tmp_path / "t-0")
    produce(part, 1, 0, 3, ts=NOW - 2 * EXPIRATION)  # 0-2: idle idempotent producer
    produce(part, 2, 0, ts=NOW - 2 * EXPIRATION, transactional=True)  # 3: transaction still open
    produce(part, 3, 0, 2, ts=NOW - 1000)  # 4-5: active a second ago
    produce(part, 4, 0, ts=NOW - 2 * EXPIRATION, transactional=True)  # 6
    write_marker(part, 4, 0, True, NOW - 2 * EXPIRATION)  # 7: committed long ago

    assert sorted(part.remove_expired_producers(NOW, EXPIRATION)) == [1, 4]
    assert part.txns.ongoing() == {2: 3}  # the open transaction and the LSO are untouched
    assert part.last_stable_offset == 3

    part.log.roll()  # a snapshot at 8: without the expired producers
    snapshot = read_snapshot(list_snapshots(part.log.directory)[8])
    assert [(e.producer_id, e.current_txn_first_offset) for e in snapshot] == [(2, 3), (3, -1)]

    # Kafka's checkSequence accepts any sequence from a producer it has no state for (its records
    # were deleted, or it expired), so the next batch is appended, not OUT_OF_ORDER_SEQUENCE_NUMBER.
    assert part.producers.check(header(1, 3, ts=NOW)) is None
    produce(part, 1, 3, ts=NOW)  # 8
    # ... and its sequence is checked again from there on.
    with pytest.raises(OutOfOrderSequence):
        part.producers.check(header(1, 9, ts=NOW))
    # The producer that stayed still has its sequence checked and its retries recognised.
    with pytest.raises(OutOfOrderSequence):
        part.producers.check(header(3, 5, ts=NOW))
    assert part.producers.check(header(3, 2, ts=NOW)) is None
    part.log.close()


def test_loading_a_snapshot_leaves_expired_producers_out(tmp_path):
    part = open_partition(tmp_path / "t-0")
    produce(part, 1, 0, ts=NOW - 2 * EXPIRATION)  # 0: idle
    produce(part, 2, 0, ts=NOW - 2 * EXPIRATION, transactional=True)  # 1: open transaction
    produce(part, 3, 0, ts=NOW - 1000)  # 2: recent
    part.close()  # snapshot at 3, holding all three
    assert [e.producer_id for e in read_snapshot(list_snapshots(tmp_path / "t-0")[3])] == [1, 2, 3]

    again = open_partition(tmp_path / "t-0")  # no clock given: everything is loaded, as before
    assert [pid for pid in (1, 2, 3) if pid in again.producers] == [1, 2, 3]
    again.log.close()

    again = open_partition(tmp_path / "t-0", now_ms=NOW, expiration_ms=EXPIRATION)
    assert again.replay.snapshot_offset == 3
    assert [pid for pid in (1, 2, 3) if pid in again.producers] == [2, 3]
    assert again.txns.ongoing() == {2: 1}
    again.log.close()


def test_broker_config_keys():
    default = BrokerConfig()
    assert (default.producer_id_expiration_ms, default.producer_id_expiration_check_interval_ms) == \
        (86_400_000, 600_000)
    config = BrokerConfig.from_settings({"broker": {"producer_id_expiration_ms": 5000,
                                                    "producer_id_expiration_check_interval_ms": 100}})
    assert (config.producer_id_expiration_ms, config.producer_id_expiration_check_interval_ms) == (5000, 100)
    with pytest.raises(InvalidConfigError):
        BrokerConfig.from_settings({"broker": {"producer_id_expiration_check_interval_ms": 0}})


def test_the_broker_expires_idle_producers_periodically(tmp_path):
    now = [NOW]
    b = InProcessBroker(tmp_path / "data", producer_id_expiration_ms=EXPIRATION,
                        producer_id_expiration_check_interval_ms=20).start()
    try:
        partitions = b.context.partitions
        partitions.clock = lambda: now[0]
        b.create_topic("idle")
        with b.client() as c:
            first = produce_request(c, "idle", batch([b"a", b"b"], ts=NOW, producer_id=7, epoch=0, seq=0))
            assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
            [part] = [p for p in partitions.open_partitions() if p.topic == "idle"]
            assert 7 in part.producers
            time.sleep(0.1)  # several checks run, none finds it expired yet
            assert 7 in part.producers
            dup = produce_request(c, "idle", batch([b"a", b"b"], ts=NOW, producer_id=7, epoch=0, seq=0))
            assert (dup.error_code, dup.base_offset) == (ErrorCode.none, 0)

            now[0] = NOW + 1 + EXPIRATION  # the batch's max timestamp is NOW + 1
            wait_for(lambda: 7 not in part.producers, 5.0, interval=0.01)
            # An unknown producer again: any sequence is accepted, as Kafka does.
            late = produce_request(c, "idle", batch([b"c"], ts=now[0], producer_id=7, epoch=0, seq=5))
            assert (late.error_code, late.base_offset) == (ErrorCode.none, 2)
            gap = produce_request(c, "idle", batch([b"d"], ts=now[0], producer_id=7, epoch=0, seq=9))
            assert gap.error_code == ErrorCode.out_of_order_sequence_number
    finally:
        b.stop()
    # The clean-shutdown snapshot holds the producer's new state only.
    snapshots = list_snapshots(tmp_path / "data" / "log" / "idle-0")
    assert [(e.producer_id, e.last_sequence, e.last_offset) for e in read_snapshot(snapshots[3])] == [(7, 5, 2)]
