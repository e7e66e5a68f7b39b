"""One share-partition's in-flight records: acquisition, acknowledgement, locks, delivery limit,
the in-flight window, the start offset and what is persisted."""

import pytest

from topiclake.broker.share.partition import (AckRange, Acquired, AckType, BatchExtent, InvalidRecordState,
                                              InvalidAcknowledgement, RecordState, SharePartition)
from topiclake.broker.share.persisted import PersistedState
from topiclake.broker.share.state_records import DeliveryState, StateBatch

LOCK = 1_000
LIMIT = 3


def fresh(start=0) -> SharePartition:
    return SharePartition.from_persisted(PersistedState(0, start))


def acquire(part, member, batches, *, now=0, max_records=500, max_locks=2_000, strict=False):
    return part.acquire(member, [BatchExtent(*b) for b in batches], max_records=max_records, max_locks=max_locks,
                        lock_ms=LOCK, now_ms=now, strict=strict)


def ack(part, member, first, last, *types, now=0):
    part.acknowledge(member, [AckRange(first, last, types)], delivery_limit=LIMIT, lock_ms=LOCK, now_ms=now)


def test_acquire_accept_moves_the_start_offset_past_delivered_records():
    part = fresh()
    assert acquire(part, "a", [(0, 4), (5, 9)]) == [Acquired(0, 9, 1)]
    assert part.next_fetch_offset() == 10 and part.end_offset == 9
    ack(part, "a", 0, 4, AckType.ACCEPT)
    assert part.start_offset == 5
    assert part.changes() == (5, ())  # the accepted records are below the new start: only the start moves
    ack(part, "a", 6, 9, AckType.ACCEPT)
    assert part.start_offset == 5  # offset 5 is still acquired
    assert part.changes() == (None, (StateBatch(6, 9, DeliveryState.ACKNOWLEDGED, 1),))
    ack(part, "a", 5, 5, AckType.ACCEPT)
    assert (part.start_offset, part.window) == (10, 0)


def test_only_the_holder_may_acknowledge_and_a_bad_batch_changes_nothing():
    part = fresh()
    acquire(part, "a", [(0, 3)])
    with pytest.raises(InvalidRecordState):
        ack(part, "b", 0, 0, AckType.ACCEPT)
    with pytest.raises(InvalidRecordState):  # 4 was never acquired: the whole acknowledgement fails
        ack(part, "a", 2, 4, AckType.ACCEPT)
    assert part.records[2].state is RecordState.ACQUIRED
    with pytest.raises(InvalidAcknowledgement):
        ack(part, "a", 0, 3, AckType.ACCEPT, AckType.ACCEPT)  # 2 types for 4 offsets
    ack(part, "a", 0, 3, AckType.ACCEPT, AckType.REJECT, AckType.RELEASE, AckType.GAP)
    assert part.start_offset == 2
    assert part.records[2].state is RecordState.AVAILABLE and part.records[3].state is RecordState.ARCHIVED
    assert acquire(part, "b", [(0, 3)]) == [Acquired(2, 2, 2)]  # released: delivered again, count 2


def test_expired_locks_come_back_and_the_delivery_limit_archives():
    part = fresh()
    for delivery in range(1, LIMIT + 1):
        now = delivery * 10 * LOCK
        assert acquire(part, "a", [(0, 0)], now=now) == [Acquired(0, 0, delivery)]
        assert part.next_deadline() == now + LOCK
        assert part.expire_locks(now + LOCK - 1, delivery_limit=LIMIT) == 0
        assert part.expire_locks(now + LOCK, delivery_limit=LIMIT) == 1
    assert part.start_offset == 1  # the third expiry archived it
    assert acquire(part, "a", [(0, 0)]) == []


def test_renew_restarts_a_lock_and_member_release_returns_what_it_holds():
    part = fresh()
    acquire(part, "a", [(0, 1)], now=0)
    ack(part, "a", 0, 0, AckType.RENEW, now=900)
    part.expire_locks(LOCK, delivery_limit=LIMIT)
    assert part.records[0].state is RecordState.ACQUIRED and part.records[1].state is RecordState.AVAILABLE
    assert part.release_member("a", delivery_limit=LIMIT) == 1
    assert part.next_fetch_offset() == 0


def test_two_members_share_a_partition_without_overlap():
    part = fresh()
    first = acquire(part, "a", [(0, 2)], max_records=1)
    second = acquire(part, "b", [(0, 2), (3, 5)], max_records=1)
    assert first == [Acquired(0, 2, 1)] and second == [Acquired(3, 5, 1)]  # whole batches: max_records is soft
    assert acquire(part, "b", [(0, 2), (3, 5)]) == []


def test_strict_record_limit_and_in_flight_window():
    part = fresh()
    assert acquire(part, "a", [(0, 9)], max_records=3, strict=True) == [Acquired(0, 2, 1)]
    assert acquire(part, "a", [(0, 9)], max_locks=5) == [Acquired(3, 4, 1)]  # the window holds 5 records
    assert not part.can_acquire(5)
    ack(part, "a", 0, 1, AckType.ACCEPT)
    assert part.can_acquire(5) and acquire(part, "a", [(0, 9)], max_locks=5) == [Acquired(5, 6, 1)]


def test_undeliverable_batches_and_log_holes_are_archived():
    part = fresh()
    got = acquire(part, "a", [(0, 1), (2, 2, False), (5, 6)])  # 2: a marker; 3-4: compacted away
    assert got == [Acquired(0, 1, 1), Acquired(5, 6, 1)]
    assert [part.records[o].state for o in (2, 3, 4)] == [RecordState.ARCHIVED] * 3
    ack(part, "a", 0, 1, AckType.ACCEPT)
    assert part.start_offset == 5


def test_the_start_offset_follows_the_log_start_offset():
    part = fresh()
    acquire(part, "a", [(0, 9)])
    part.move_to_log_start(4)
    assert (part.start_offset, min(part.records)) == (4, 4)
    assert part.changes()[0] == 4
    part.move_to_log_start(20)  # past everything in flight
    assert (part.start_offset, part.end_offset, part.records) == (20, 19, {})


def test_persisted_state_rebuilds_the_window_with_acquired_records_available():
    part = fresh(start=10)
    acquire(part, "a", [(10, 14)])
    ack(part, "a", 12, 12, AckType.ACCEPT)
    ack(part, "a", 13, 13, AckType.REJECT)
    snapshot = part.snapshot()
    assert snapshot == (StateBatch(10, 11, DeliveryState.AVAILABLE, 1),
                        StateBatch(12, 12, DeliveryState.ACKNOWLEDGED, 1),
                        StateBatch(13, 13, DeliveryState.ARCHIVED, 1), StateBatch(14, 14, DeliveryState.AVAILABLE, 1))
    again = SharePartition.from_persisted(PersistedState(0, 10, snapshot))
    assert again.next_fetch_offset() == 10 and again.end_offset == 14
    assert acquire(again, "b", [(10, 14)]) == [Acquired(10, 11, 2), Acquired(14, 14, 2)]


def test_hostile_ranges_and_large_log_holes_stay_cheap():
    part = fresh()
    acquire(part, "a", [(0, 1)])
    with pytest.raises(InvalidRecordState):  # refused before any offset is looked at
        ack(part, "a", 0, 2**62, AckType.ACCEPT)
    ack(part, "a", 0, 1, AckType.ACCEPT)
    assert acquire(part, "a", [(10**12, 10**12 + 1)]) == [Acquired(10**12, 10**12 + 1, 1)]  # jumped, not filled
    assert part.start_offset == 10**12 and len(part.records) == 2
    assert acquire(part, "a", [(2 * 10**12, 2 * 10**12)], max_locks=100) == []  # no room to archive the gap now
