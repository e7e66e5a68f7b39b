"""The pure coordinator transitions (Kafka's TransactionMetadata / TransactionCoordinator rules)."""

from __future__ import annotations

import itertools

import pytest
from kio.schema.errors import ErrorCode

from topiclake.broker.txn import state
from topiclake.broker.txn.state import S, TxnError, TxnMetadata


def ids(start=100):
    counter = itertools.count(start)
    return lambda: next(counter)


def fresh(now=1000) -> TxnMetadata:
    return state.init_producer_id(None, "tx", 60_000, now, ids()).metadata


def ongoing(parts=(("t", 0),), now=2000) -> TxnMetadata:
    m = fresh()
    return state.add_partitions(m, m.producer_id, m.producer_epoch, parts, now)


def test_first_init_allocates_an_id_with_epoch_zero():
    m = fresh()
    assert (m.producer_id, m.producer_epoch, m.state, m.partitions) == (100, 0, S.EMPTY, frozenset())
    assert m.timeout_ms == 60_000 and m.update_ms == 1000


def test_init_on_a_completed_transaction_bumps_the_epoch_and_takes_the_new_timeout():
    m = fresh()
    again = state.init_producer_id(m, "tx", 30_000, 5000, ids(999))
    assert not again.abort_first
    assert (again.metadata.producer_id, again.metadata.producer_epoch) == (100, 1)
    assert again.metadata.timeout_ms == 30_000 and again.metadata.last_producer_epoch == 0


def test_init_on_an_ongoing_transaction_fences_and_aborts_it_first():
    m = ongoing()
    out = state.init_producer_id(m, "tx", 60_000, 3000, ids())
    assert out.abort_first
    assert out.metadata.state is S.PREPARE_ABORT and out.metadata.producer_epoch == 1
    assert out.metadata.partitions == m.partitions  # the markers go where the data went


def test_init_while_markers_are_written_is_concurrent():
    m = ongoing()
    prepared = state.end_transaction(m, m.producer_id, 0, True, 3000).metadata
    with pytest.raises(TxnError) as e:
        state.init_producer_id(prepared, "tx", 60_000, 3000, ids())
    assert e.value.code == ErrorCode.concurrent_transactions


def test_epoch_exhaustion_rotates_the_producer_id():
    m = TxnMetadata("tx", 7, state.MAX_EPOCH - 1, 1000, S.COMPLETE_COMMIT)
    out = state.init_producer_id(m, "tx", 1000, 1, ids(50)).metadata
    assert (out.producer_id, out.producer_epoch, out.prev_producer_id) == (50, 0, 7)


def test_kip360_expected_epoch():
    m = fresh()
    bumped = state.init_producer_id(m, "tx", 60_000, 2, ids(), expected=(100, 0)).metadata
    assert bumped.producer_epoch == 1
    # a retry of that bump (the client never saw the answer) gets the same epoch back
    retry = state.init_producer_id(bumped, "tx", 60_000, 3, ids(), expected=(100, 0)).metadata
    assert retry.producer_epoch == 1
    for expected in ((100, 5), (42, 1)):
        with pytest.raises(TxnError) as e:
            state.init_producer_id(bumped, "tx", 60_000, 3, ids(), expected=expected)
        assert e.value.code == ErrorCode.producer_fenced


def test_add_partitions_starts_the_transaction_once():
    m = fresh()
    a = state.add_partitions(m, 100, 0, [("t", 0)], 2000)
    assert a.state is S.ONGOING and a.start_ms == 2000
    b = state.add_partitions(a, 100, 0, [("t", 1)], 3000)
    assert b.partitions == {("t", 0), ("t", 1)} and b.start_ms == 2000 and b.update_ms == 3000
    assert state.add_partitions(b, 100, 0, [("t", 1)], 4000) is b  # nothing to persist


@pytest.mark.parametrize("pid,epoch,code", [(101, 0, ErrorCode.invalid_producer_id_mapping),
                                            (100, 1, ErrorCode.producer_fenced)])
def test_requests_from_another_producer_are_refused(pid, epoch, code):
    m = ongoing()
    for call in (lambda: state.add_partitions(m, pid, epoch, [("t", 1)], 1),
                 lambda: state.end_transaction(m, pid, epoch, True, 1)):
        with pytest.raises(TxnError) as e:
            call()
        assert e.value.code == code


def test_end_transaction_and_its_retries():
    m = ongoing()
    prep = state.end_transaction(m, 100, 0, True, 3000).metadata
    assert prep.state is S.PREPARE_COMMIT and prep.partitions == m.partitions
    done = state.complete(prep, 4000)
    assert done.state is S.COMPLETE_COMMIT and done.partitions == frozenset()
    assert state.end_transaction(done, 100, 0, True, 5000).metadata is None  # retried commit: fine
    with pytest.raises(TxnError) as e:
        state.end_transaction(done, 100, 0, False, 5000)  # abort after commit
    assert e.value.code == ErrorCode.invalid_txn_state
    with pytest.raises(TxnError) as e:
        state.end_transaction(prep, 100, 0, True, 5000)
    assert e.value.code == ErrorCode.concurrent_transactions
    with pytest.raises(TxnError) as e:
        state.end_transaction(fresh(), 100, 0, True, 5000)  # nothing to end
    assert e.value.code == ErrorCode.invalid_txn_state


def test_timeout_fences_with_an_epoch_bump():
    m = ongoing(now=2000)
    assert not state.is_expired(m, 2000 + 60_000)
    assert state.is_expired(m, 2000 + 60_001)
    fenced = state.fence_abort(m, 70_000)
    assert fenced.state is S.PREPARE_ABORT and fenced.producer_epoch == 1 and fenced.last_producer_epoch == 0
    assert state.complete(fenced, 70_001).state is S.COMPLETE_ABORT
    with pytest.raises(TxnError) as e:  # the old producer's commit
        state.end_transaction(fenced, 100, 0, True, 70_002)
    assert e.value.code == ErrorCode.producer_fenced


def test_invalid_transitions_are_refused():
    m = fresh()
    with pytest.raises(state.IllegalStateTransition):
        m.transition(S.PREPARE_COMMIT)
    with pytest.raises(state.IllegalStateTransition):
        state.complete(m, 1)
    with pytest.raises(state.IllegalStateTransition):
        state.fence_abort(m, 1)


def test_timeout_limits():
    state.validate_timeout("tx", 900_000, 900_000)
    for bad in (0, -1, 900_001):
        with pytest.raises(TxnError) as e:
            state.validate_timeout("tx", bad, 900_000)
        assert e.value.code == ErrorCode.invalid_transaction_timeout
