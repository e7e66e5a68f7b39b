"""The coordinator runtime moves a partition of an internal topic in and out of a running broker,
as leadership will: after `unload` the broker answers NOT_COORDINATOR for what that partition
holds, and a later `load` brings back exactly the state that was written. Once for each
coordinator (groups, transactions, share-group state), over the wire."""

from __future__ import annotations

import asyncio
import datetime
import struct

import pytest
from kio.schema.describe_share_group_offsets.v1 import request as offsets_req
from kio.schema.describe_transactions.v0 import request as dt_req
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v9 import request as join_req
from kio.schema.offset_fetch.v8 import request as of8

from tests.support.in_process_broker import InProcessBroker
from tests.support.share_wire import ACCEPT, joined, partition_of, share_fetch, start_offset
from tests.support.wire import batch, produce
from tests.support.group_wire import commit, fetch, retry
from tests.support.waits import wait_for
from tests.support.txn_wire import add_partitions, init_producer_id
from topiclake.broker import wire
from topiclake.broker.coordinator_runtime import Status
from topiclake.broker.group.config import GroupsConfig
from topiclake.broker.group.share_config import ShareConfig
from topiclake.segments.filenames import log_file


@pytest.fixture(scope="module")
def runtime_broker(tmp_path_factory):
    b = InProcessBroker(tmp_path_factory.mktemp("runtime") / "data",
                        groups=GroupsConfig(offsets_topic_partitions=3, initial_rebalance_delay_ms=0),
                        share=ShareConfig(state_topic_partitions=3))
    b.start()
    yield b
    b.stop()


def call(b, coro):
    return asyncio.run_coroutine_threadsafe(coro, b.loop).result(20)


def join(client, group):
    return client.request(join_req.JoinGroupRequest(
        group_id=group, session_timeout=datetime.timedelta(seconds=10),
        rebalance_timeout=datetime.timedelta(seconds=10), member_id="", group_instance_id=None,
        protocol_type="consumer", protocols=(join_req.JoinGroupRequestProtocol(name="range", metadata=b""),),
        reason=None))


def describe_txn(client, txn_id):
    [state] = client.request(dt_req.DescribeTransactionsRequest(transactional_ids=(txn_id,))).transaction_states
    return state


def describe_txn_error(client, txn_id) -> ErrorCode:
    """The error code of one id's DescribeTransactions answer, read from the frame: an answer
    without a state carries Kafka's -1 timestamps, which kio's reader refuses to decode."""
    client.send_raw(wire.encode_request(99, dt_req.DescribeTransactionsRequest(transactional_ids=(txn_id,)),
                                        "test"))
    frame = client.read_frame()
    # v0 is flexible: correlation id (4), header tags (1), throttle time (4), states as a compact
    # array (1 byte for one state), then the state's int16 error code.
    return ErrorCode(struct.unpack_from(">h", frame, 10)[0])


def test_a_group_partition_unloads_and_loads_back(runtime_broker):
    groups = runtime_broker.context.groups
    runtime_broker.create_topic("rt-offsets", 2)
    with runtime_broker.client() as c:
        retry(lambda: None if {p.error_code for t in commit(c, "rt-g", "rt-offsets", {0: 5, 1: 9}).topics
                               for p in t.partitions} == {ErrorCode.coordinator_load_in_progress} else True)
        assert fetch(c, "rt-g") == {"rt-g": {("rt-offsets", 0): 5, ("rt-offsets", 1): 9}}
        index = groups.partition_for("rt-g")
        before = groups.describe(["rt-g"])

        call(runtime_broker, groups.runtime.unload(index))
        assert index not in groups.runtime.owned()
        resp = c.request(of8.OffsetFetchRequest(groups=(of8.OffsetFetchRequestGroup(group_id="rt-g", topics=None),),
                                                require_stable=False))
        assert resp.groups[0].error_code == ErrorCode.not_coordinator
        committed = commit(c, "rt-g", "rt-offsets", {0: 6})
        assert {p.error_code for t in committed.topics for p in t.partitions} == {ErrorCode.not_coordinator}
        assert join(c, "rt-g").error_code == ErrorCode.not_coordinator
        assert groups.describe(["rt-g"])[0].error.name == "NOT_COORDINATOR"

        call(runtime_broker, groups.runtime.load(index))
        assert fetch(c, "rt-g") == {"rt-g": {("rt-offsets", 0): 5, ("rt-offsets", 1): 9}}  # the refused commit left nothing
        assert groups.describe(["rt-g"]) == before


def test_a_transaction_state_partition_unloads_and_loads_back(runtime_broker):
    txn = runtime_broker.context.txn
    runtime_broker.create_topic("rt-txn", 1)
    with runtime_broker.client() as c:
        code, pid, epoch = init_producer_id(c, "rt-app")
        assert code == ErrorCode.none
        assert add_partitions(c, "rt-app", pid, epoch, "rt-txn", [0]) == {("rt-txn", 0): ErrorCode.none}
        written = txn.get("rt-app")
        assert written.state.label == "Ongoing" and written.partitions == {("rt-txn", 0)}
        index = txn.partition_for("rt-app")

        call(runtime_broker, txn.runtime.unload(index))
        assert describe_txn_error(c, "rt-app") == ErrorCode.not_coordinator
        assert describe_txn_error(c, "rt-unknown") == ErrorCode.transactional_id_not_found  # the frame reading holds
        assert init_producer_id(c, "rt-app")[0] == ErrorCode.not_coordinator
        assert add_partitions(c, "rt-app", pid, epoch, "rt-txn", [0]) == {("rt-txn", 0): ErrorCode.not_coordinator}

        call(runtime_broker, txn.runtime.load(index))
        assert txn.get("rt-app") == written
        state = describe_txn(c, "rt-app")
        assert (state.error_code, state.transaction_state, state.producer_id) == (ErrorCode.none, "Ongoing", pid)


def test_a_share_state_partition_unloads_and_loads_back(runtime_broker):
    """The share-partition keeps serving from memory (its leader is not its share coordinator),
    but what needs the state (a write, a read) gets the coordinator's error: the acknowledgement
    COORDINATOR_NOT_AVAILABLE (as Kafka's share-partition leader maps NOT_COORDINATOR), the
    offsets NOT_COORDINATOR; once loaded back, the state is exactly what was written."""
    store = runtime_broker.context.share.store
    runtime_broker.create_topic("rt-share", 1)
    with runtime_broker.client() as c:
        assert produce(c, "rt-share", batch([b"a", b"b", b"c"])).error_code == ErrorCode.none
        topic_id = joined(runtime_broker, c, "rt-share", "rt-sg", "m1")
        first = partition_of(share_fetch(c, "rt-sg", "m1", 0, topic_id))
        assert [(a.first_offset, a.last_offset) for a in first.acquired_records] == [(0, 2)]
        acked = share_fetch(c, "rt-sg", "m1", 1, topic_id, acks=[(0, 2, ACCEPT)])
        assert partition_of(acked).acknowledge_error_code == ErrorCode.none
        assert start_offset(c, "rt-sg", "rt-share") == 3
        [key] = store.keys("rt-sg")
        written = store.get(key)
        index = store.partition_for(key)

        call(runtime_broker, store.runtime.unload(index))
        assert store.runtime._shards.get(index) is None
        assert produce(c, "rt-share", batch([b"d"])).error_code == ErrorCode.none
        held = partition_of(share_fetch(c, "rt-sg", "m1", 2, topic_id))  # from memory: no state needed
        assert [(a.first_offset, a.last_offset) for a in held.acquired_records] == [(3, 3)]
        refused = partition_of(share_fetch(c, "rt-sg", "m1", 3, topic_id, acks=[(3, 3, ACCEPT)]))
        assert refused.acknowledge_error_code == ErrorCode.coordinator_not_available
        resp = c.request(offsets_req.DescribeShareGroupOffsetsRequest(groups=(
            offsets_req.DescribeShareGroupOffsetsRequestGroup(group_id="rt-sg", topics=(
                offsets_req.DescribeShareGroupOffsetsRequestTopic(topic_name="rt-share", partitions=(0,)),)),)))
        assert resp.groups[0].topics[0].partitions[0].error_code == ErrorCode.not_coordinator
        assert partition_of(share_fetch(c, "rt-sg", "m1", 4, topic_id)).error_code == \
            ErrorCode.coordinator_not_available

        call(runtime_broker, store.runtime.load(index))
        assert store.get(key) == written
        assert start_offset(c, "rt-sg", "rt-share") == 3
        again = partition_of(share_fetch(c, "rt-sg", "m1", 5, topic_id))  # the refused acknowledgement: again
        assert [(a.first_offset, a.last_offset) for a in again.acquired_records] == [(3, 3)]


def test_a_partition_whose_log_does_not_load_answers_coordinator_not_available_until_a_retry_loads_it(
        runtime_broker):
    """A failed load is retried on its own (a store down at a takeover must not leave the groups
    unavailable until the next leadership change): once the log reads again, the partition serves."""
    groups = runtime_broker.context.groups
    runtime_broker.create_topic("rt-broken-t", 1)
    with runtime_broker.client() as c:
        retry(lambda: None if {p.error_code for t in commit(c, "rt-broken", "rt-broken-t", {0: 4}).topics
                               for p in t.partitions} == {ErrorCode.coordinator_load_in_progress} else True)
        index = groups.partition_for("rt-broken")
        segment = log_file(runtime_broker.context.layout.log_dir("__consumer_offsets", index), 0)
        data = bytearray(segment.read_bytes())
        good = bytes(data)
        data[len(data) - 3] ^= 0xFF  # inside the last batch's records: its CRC no longer matches
        segment.write_bytes(bytes(data))
        try:
            call(runtime_broker, groups.runtime.load(index))
            assert groups.runtime._shards[index].status is Status.FAILED
            assert join(c, "rt-broken").error_code == ErrorCode.coordinator_not_available
        finally:
            segment.write_bytes(good)
        wait_for(lambda: groups.runtime._shards[index].status is Status.ACTIVE, timeout=10, what="the retried load")
        assert fetch(c, "rt-broken") == {"rt-broken": {("rt-broken-t", 0): 4}}
        assert join(c, "rt-broken").error_code == ErrorCode.member_id_required  # served again
