"""The share coordinator's APIs over the wire (InitializeShareGroupState 83, ReadShareGroupState
84, WriteShareGroupState 85, DeleteShareGroupState 86, ReadShareGroupStateSummary 87), as a
share-partition leader on another broker of a cluster sends them, against an in-process broker:
what each records and answers, the leader-epoch and state-epoch fences, the per-key checks,
NOT_COORDINATOR for a state partition not served here, a restart replaying what was written, and
that only super users may call them when an authorizer is on."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from kio.schema.delete_share_group_state.v0 import request as delete_req
from kio.schema.errors import ErrorCode
from kio.schema.initialize_share_group_state.v0 import request as init_req
from kio.schema.read_share_group_state.v0 import request as read_req
from kio.schema.read_share_group_state_summary.v0 import request as summary0_req
from kio.schema.read_share_group_state_summary.v1 import request as summary_req
from kio.schema.write_share_group_state.v0 import request as write0_req
from kio.schema.write_share_group_state.v1 import request as write_req

from topiclake.broker.group.share_config import ShareConfig
from topiclake.broker.partitions import topic_uuid
from topiclake.broker.security.config import SecurityConfig
from topiclake.broker.share.state_records import DeliveryState, ShareStateKey

from tests.support.in_process_broker import InProcessBroker

AVAILABLE, ACKED, ARCHIVED = DeliveryState.AVAILABLE, DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED


@pytest.fixture
def share_state_broker(tmp_path):
    b = InProcessBroker(tmp_path / "data", share=ShareConfig(state_topic_partitions=3)).start()
    yield b
    b.stop()


def topic_id(share_state_broker, name: str, partitions: int = 2) -> uuid.UUID:
    assert share_state_broker.create_topic(name, partitions).error_code == ErrorCode.none
    return topic_uuid(share_state_broker.context.partitions.topic(name))


def one(response):
    [result] = response.results
    [part] = result.partitions
    return part


def initialize(c, group, tid, partition, state_epoch, start):
    return one(c.request(init_req.InitializeShareGroupStateRequest(group_id=group, topics=(
        init_req.InitializeStateData(topic_id=tid, partitions=(init_req.PartitionData(
            partition=partition, state_epoch=state_epoch, start_offset=start),)),))))


def read(c, group, tid, partition, leader_epoch):
    return one(c.request(read_req.ReadShareGroupStateRequest(group_id=group, topics=(read_req.ReadStateData(
        topic_id=tid, partitions=(read_req.PartitionData(partition=partition, leader_epoch=leader_epoch),)),))))


def write(c, group, tid, partition, *, state_epoch, leader_epoch, start=-1, batches=(), complete=-1, schema=write_req):
    data = dict(partition=partition, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start,
                state_batches=tuple(schema.StateBatch(first_offset=f, last_offset=l, delivery_state=s, delivery_count=n)
                                    for f, l, s, n in batches))
    if schema is write_req:
        data["delivery_complete_count"] = complete
    return one(c.request(schema.WriteShareGroupStateRequest(group_id=group, topics=(schema.WriteStateData(
        topic_id=tid, partitions=(schema.PartitionData(**data),)),))))


def delete(c, group, tid, partition):
    return one(c.request(delete_req.DeleteShareGroupStateRequest(group_id=group, topics=(delete_req.DeleteStateData(
        topic_id=tid, partitions=(delete_req.PartitionData(partition=partition),)),))))


def summary(c, group, tid, partition, schema=summary_req):
    return one(c.request(schema.ReadShareGroupStateSummaryRequest(group_id=group, topics=(
        schema.ReadStateSummaryData(topic_id=tid, partitions=(
            schema.PartitionData(partition=partition, leader_epoch=-1),)),))))


def batches_of(part):
    return [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in part.state_batches]


def test_initialize_read_write_summary_and_delete(share_state_broker):
    tid = topic_id(share_state_broker, "st-life")
    with share_state_broker.client() as c:
        unknown = read(c, "g", tid, 0, 1)
        assert (unknown.error_code, unknown.start_offset, unknown.state_batches) == (ErrorCode.none, -1, ())
        assert initialize(c, "g", tid, 0, 0, 5).error_code == ErrorCode.none
        first = read(c, "g", tid, 0, 1)
        assert (first.error_code, first.state_epoch, first.start_offset, first.state_batches) == (
            ErrorCode.none, 0, 5, ())
        assert write(c, "g", tid, 0, state_epoch=0, leader_epoch=1,
                     batches=[(5, 9, AVAILABLE, 1)], complete=0).error_code == ErrorCode.none
        assert write(c, "g", tid, 0, state_epoch=0, leader_epoch=1, start=7,
                     batches=[(7, 7, ACKED, 1), (8, 8, ARCHIVED, 2)], complete=2).error_code == ErrorCode.none
        state = read(c, "g", tid, 0, 1)
        assert (state.start_offset, batches_of(state)) == (7, [(7, 7, ACKED, 1), (8, 8, ARCHIVED, 2),
                                                               (9, 9, AVAILABLE, 1)])
        done = summary(c, "g", tid, 0)
        assert (done.error_code, done.state_epoch, done.leader_epoch, done.start_offset,
                done.delivery_complete_count) == (ErrorCode.none, 0, 1, 7, 2)
        assert summary(c, "g", tid, 0, schema=summary0_req).start_offset == 7  # v0: no delivery count
        # Write v0 (no delivery count) is served too.
        assert write(c, "g", tid, 0, state_epoch=0, leader_epoch=1, batches=[(9, 9, ACKED, 1)],
                     schema=write0_req).error_code == ErrorCode.none
        assert batches_of(read(c, "g", tid, 0, 1))[-1] == (9, 9, ACKED, 1)
        assert read(c, "g", tid, 1, 1).start_offset == -1, "another partition of the topic has no state"

        assert delete(c, "g", tid, 0).error_code == ErrorCode.none
        assert summary(c, "g", tid, 0).start_offset == -1
        assert delete(c, "g", tid, 0).error_code == ErrorCode.none, "deleting nothing is no error"
        gone = write(c, "g", tid, 0, state_epoch=0, leader_epoch=1, batches=[(9, 9, ACKED, 1)])
        assert gone.error_code == ErrorCode.fenced_state_epoch, "a writer of deleted state must read again"


def test_a_newer_leader_epoch_read_fences_the_older_leader_and_survives_a_restart(tmp_path):
    share_state_broker = InProcessBroker(tmp_path / "data", share=ShareConfig(state_topic_partitions=3)).start()
    try:
        tid = topic_id(share_state_broker, "st-fence")
        with share_state_broker.client() as c:
            assert initialize(c, "g", tid, 0, 0, 0).error_code == ErrorCode.none
            assert read(c, "g", tid, 0, 4).error_code == ErrorCode.none  # the leader of epoch 4
            assert write(c, "g", tid, 0, state_epoch=0, leader_epoch=4, batches=[(0, 0, ACKED, 1)],
                         complete=1).error_code == ErrorCode.none
            assert read(c, "g", tid, 0, 5).error_code == ErrorCode.none  # a new leader (epoch 5) takes over
            stale = write(c, "g", tid, 0, state_epoch=0, leader_epoch=4, batches=[(1, 1, ACKED, 1)])
            assert stale.error_code == ErrorCode.fenced_leader_epoch
            assert read(c, "g", tid, 0, 3).error_code == ErrorCode.fenced_leader_epoch
            # AlterShareGroupOffsets starts the share-partition over at a new state epoch.
            assert initialize(c, "g", tid, 0, 1, 10).error_code == ErrorCode.none
            assert initialize(c, "g", tid, 0, 0, 3).error_code == ErrorCode.fenced_state_epoch
            behind = write(c, "g", tid, 0, state_epoch=0, leader_epoch=5, batches=[(10, 10, ACKED, 1)])
            assert behind.error_code == ErrorCode.fenced_state_epoch
            assert write(c, "g", tid, 0, state_epoch=0, leader_epoch=4).error_code == ErrorCode.fenced_leader_epoch, \
                "initialising keeps the recorded leader epoch"
            assert write(c, "g", tid, 0, state_epoch=1, leader_epoch=5, batches=[(10, 10, ACKED, 1)],
                         complete=1).error_code == ErrorCode.none
    finally:
        share_state_broker.stop()
    again = InProcessBroker(tmp_path / "data", share=ShareConfig(state_topic_partitions=3)).start()
    try:
        with again.client() as c:
            replayed = read(c, "g", tid, 0, 5)
            assert (replayed.state_epoch, replayed.start_offset, batches_of(replayed)) == (
                1, 10, [(10, 10, ACKED, 1)])
            assert write(c, "g", tid, 0, state_epoch=1, leader_epoch=4).error_code == ErrorCode.fenced_leader_epoch
    finally:
        again.stop()


def test_each_key_is_checked_and_answered_alone(share_state_broker):
    tid = topic_id(share_state_broker, "st-checks", partitions=1)
    with share_state_broker.client() as c:
        assert initialize(c, "", tid, 0, 0, 0).error_code == ErrorCode.invalid_request
        assert read(c, "g", tid, -1, 0).error_code == ErrorCode.invalid_request
        assert read(c, "g", None, 0, 0).error_code == ErrorCode.invalid_request
        assert write(c, "g", tid, 1, state_epoch=0, leader_epoch=0).error_code == ErrorCode.unknown_topic_or_partition
        assert summary(c, "g", uuid.uuid4(), 0).error_code == ErrorCode.unknown_topic_or_partition
        assert delete(c, "g", uuid.uuid4(), 0).error_code == ErrorCode.none  # a deleted topic's state may go
        response = c.request(init_req.InitializeShareGroupStateRequest(group_id="g", topics=(
            init_req.InitializeStateData(topic_id=tid, partitions=(
                init_req.PartitionData(partition=0, state_epoch=0, start_offset=3),
                init_req.PartitionData(partition=7, state_epoch=0, start_offset=3))),)))
        assert [(p.partition, p.error_code) for p in response.results[0].partitions] == [
            (0, ErrorCode.none), (7, ErrorCode.unknown_topic_or_partition)]
        assert read(c, "g", tid, 0, 0).start_offset == 3


def test_a_state_partition_not_served_here_answers_not_coordinator(share_state_broker):
    tid = topic_id(share_state_broker, "st-moved", partitions=1)
    store = share_state_broker.context.share.store
    with share_state_broker.client() as c:
        assert initialize(c, "g", tid, 0, 0, 2).error_code == ErrorCode.none
        index = store.partition_for(ShareStateKey("g", tid, 0))
        asyncio.run_coroutine_threadsafe(store.runtime.unload(index), share_state_broker.loop).result(10)
        for answer in (read(c, "g", tid, 0, 0), write(c, "g", tid, 0, state_epoch=0, leader_epoch=0),
                       summary(c, "g", tid, 0), initialize(c, "g", tid, 0, 1, 0), delete(c, "g", tid, 0)):
            assert answer.error_code == ErrorCode.not_coordinator, answer
        asyncio.run_coroutine_threadsafe(store.runtime.load(index), share_state_broker.loop).result(10)
        assert read(c, "g", tid, 0, 0).start_offset == 2


@pytest.mark.parametrize("super_users", [(), ("User:ANONYMOUS",)], ids=["not-super", "super"])
def test_with_an_authorizer_only_super_users_may_call_them(tmp_path, super_users):
    share_state_broker = InProcessBroker(tmp_path / "data", share=ShareConfig(state_topic_partitions=1),
                             security=SecurityConfig(authorizer="acl", super_users=super_users,
                                                     allow_everyone_if_no_acl_found=True)).start()
    try:
        tid = topic_id(share_state_broker, "st-acl", partitions=1)
        with share_state_broker.client() as c:
            if super_users:
                assert initialize(c, "g", tid, 0, 0, 0).error_code == ErrorCode.none
                assert read(c, "g", tid, 0, 0).start_offset == 0
            else:  # no policy: these responses carry no top-level error, so the connection is closed
                with pytest.raises((ConnectionError, EOFError, OSError)):
                    initialize(c, "g", tid, 0, 0, 0)
        recorded = share_state_broker.context.share.store.get(ShareStateKey("g", tid, 0))
        assert (recorded is not None) == bool(super_users)
    finally:
        share_state_broker.stop()
