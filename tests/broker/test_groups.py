"""The group coordinator inside an in-process broker: FindCoordinator, offsets over the wire,
transactional offsets through the facade, and loading `__consumer_offsets` after a restart."""

import pytest

from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as fc4

from tests.support.in_process_broker import InProcessBroker
from topiclake.broker.constants import CoordinatorType
from topiclake.broker.group.api import CommitOffset
from topiclake.segments.batch import Record, build_batch, read_header
from tests.support.group_wire import commit, fetch, retry, call, loaded_partition


@pytest.mark.parametrize("key_type, keys, codes", [
    (CoordinatorType.TRANSACTION, ("txn-a",), [ErrorCode.none]),
    (CoordinatorType.SHARE, ("g:AAAAAAAAAAAAAAAAAAAAAA:0",), [ErrorCode.none]),
    (CoordinatorType.GROUP, ("",), [ErrorCode.invalid_request]),  # a group id must not be empty
    (7, ("x", "y"), [ErrorCode.invalid_request] * 2),  # no such coordinator type
], ids=["transaction", "share", "empty-group", "unknown-type"])
def test_find_coordinator_by_key_type(broker, key_type, keys, codes):
    with broker.client() as c:
        resp = c.request(fc4.FindCoordinatorRequest(key_type=key_type, coordinator_keys=keys))
    assert [(x.key, x.error_code) for x in resp.coordinators] == list(zip(keys, codes))
    assert [x.node_id for x in resp.coordinators] == [0 if code == ErrorCode.none else -1 for code in codes]


def test_find_coordinator_batched_and_offsets_round_trip(broker):
    with broker.client() as c:
        resp = c.request(fc4.FindCoordinatorRequest(key_type=0, coordinator_keys=("a", "b")))
        assert [(x.key, x.node_id, x.port, x.error_code) for x in resp.coordinators] == [
            ("a", 0, broker.server.port, ErrorCode.none), ("b", 0, broker.server.port, ErrorCode.none)]
        broker.create_topic("t", 2)

        def try_commit(group, offsets):
            # Each group's __consumer_offsets partition loads on its own, so each commit may wait.
            r = commit(c, group, "t", offsets)
            codes = {p.error_code for t in r.topics for p in t.partitions}
            return None if codes == {ErrorCode.coordinator_load_in_progress} else codes

        assert retry(lambda: try_commit("g1", {0: 5, 1: 7})) == {ErrorCode.none}
        assert retry(lambda: try_commit("g2", {0: 1})) == {ErrorCode.none}
        assert fetch(c, "g1", "g2", "nobody") == {"g1": {("t", 0): 5, ("t", 1): 7}, "g2": {("t", 0): 1},
                                                  "nobody": {}}


def test_transactional_offsets_commit_abort_and_reload(tmp_path):
    b = InProcessBroker(tmp_path / "data").start()
    groups = b.context.groups
    try:
        loaded_partition(b, "txn-group")
        part = groups.partition_for("txn-group")
        res = call(b, groups.commit_transactional_offsets("txn-group", 7, 0, [CommitOffset("t", 0, 11)]))
        assert [r.error.name for r in res] == ["NONE"]
        call(b, groups.commit_transactional_offsets("txn-group", 8, 0, [CommitOffset("t", 1, 22)]))
        with b.client() as c:
            assert fetch(c, "txn-group") == {"txn-group": {}}
        call(b, groups.complete_transaction(7, 0, True, partitions=[part]))
        call(b, groups.complete_transaction(8, 0, False))  # finds its partition by itself
        with b.client() as c:
            assert fetch(c, "txn-group") == {"txn-group": {("t", 0): 11}}
        call(b, groups.commit_transactional_offsets("txn-group", 9, 0, [CommitOffset("t", 2, 33)]))
    finally:
        b.stop()
    b = InProcessBroker(tmp_path / "data").start()  # replays data, markers and the open transaction
    try:
        with b.client() as c:
            stable = retry(lambda: fetch(c, "txn-group", require_stable=True).get("txn-group") or None)
        assert stable == {("t", 0): 11}
        assert b.context.groups.shard("txn-group").state.classic.pending_txn_offsets.keys() == {9}
        call(b, b.context.groups.complete_transaction(9, 0, True))
        with b.client() as c:
            assert fetch(c, "txn-group") == {"txn-group": {("t", 0): 11, ("t", 2): 33}}
    finally:
        b.stop()


def test_transactional_offsets_move_the_offsets_partition_lso_live(tmp_path):
    # The offsets batch of an open transaction holds back the LSO of its __consumer_offsets
    # partition and the marker releases it, without reopening the partition.
    b = InProcessBroker(tmp_path / "data").start()
    groups = b.context.groups
    try:
        part = loaded_partition(b, "lso-group")
        start = part.high_watermark
        call(b, groups.commit_transactional_offsets("lso-group", 21, 3, [CommitOffset("t", 0, 5)]))
        assert part.last_stable_offset == start < part.high_watermark
        assert part.txns.ongoing() == {21: start}
        call(b, groups.complete_transaction(21, 3, False))
        assert part.last_stable_offset == part.high_watermark == start + 2
        assert [(t.producer_id, t.first_offset, t.last_offset) for t in part.txns.aborted()] == [(21, start, start + 1)]
        call(b, groups.commit_transactional_offsets("lso-group", 22, 0, [CommitOffset("t", 0, 6)]))
        assert part.last_stable_offset == start + 2
        call(b, groups.complete_transaction(22, 0, True))
        assert part.last_stable_offset == part.high_watermark == start + 4
        # The ABORT marker applied producer 21's epoch 3 here too: an epoch-2 batch is fenced.
        stale = build_batch([Record(0, 0, b"k", b"v", ())], base_offset=0, producer_id=21, producer_epoch=2,
                            base_sequence=5, is_transactional=True)
        with pytest.raises(Exception, match="epoch"):
            part.producers.check(read_header(stale))
    finally:
        b.stop()
