"""ShareGroupHeartbeat, ShareFetch and ShareAcknowledge on the wire (raw requests to an in-process
broker): share-session epochs and their errors, acquired records, acknowledgement errors, the
final epoch releasing what a member holds, and GROUP configs acting on the next acquisition."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.errors import ErrorCode

from topiclake.broker.group.config import GroupsConfig
from topiclake.broker.group.share_config import ShareConfig
from topiclake.segments.batch import iter_batches

from tests.support.in_process_broker import InProcessBroker
from tests.support.wire import batch, produce
from tests.support.share_wire import ACCEPT, RELEASE, heartbeat, share_fetch, share_ack, start_offset, partition_of, joined

LOCK_MS = 1000


@pytest.fixture(scope="module")
def share_broker(tmp_path_factory):
    b = InProcessBroker(tmp_path_factory.mktemp("share") / "data",
                        groups=GroupsConfig(offsets_topic_partitions=1, initial_rebalance_delay_ms=0),
                        share=ShareConfig(state_topic_partitions=1, record_lock_duration_ms=LOCK_MS,
                                          min_record_lock_duration_ms=LOCK_MS)).start()
    yield b
    b.stop()


def test_sessions_acquisition_and_acknowledgement_errors(share_broker):
    share_broker.create_topic("wire")
    with share_broker.client() as c:
        assert produce(c, "wire", batch([b"a", b"b", b"c"])).error_code == ErrorCode.none
        topic_id = joined(share_broker, c, "wire", "wg", "m1")
        assert share_fetch(c, "wg", "m1", 0, topic_id, acks=[(0, 0, ACCEPT)]).error_code == ErrorCode.invalid_request
        first = share_fetch(c, "wg", "m1", 0, topic_id)
        assert (first.error_code, first.acquisition_lock_timeout) == (ErrorCode.none, datetime.timedelta(seconds=1))
        part = partition_of(first)
        assert [(a.first_offset, a.last_offset, a.delivery_count) for a in part.acquired_records] == [(0, 2, 1)]
        assert [b.header.base_offset for b in iter_batches(part.records)] == [0]
        assert share_fetch(c, "wg", "m1", 5, topic_id).error_code == ErrorCode.invalid_share_session_epoch
        assert share_ack(c, "wg", "m1", 0, topic_id, [(0, 0, ACCEPT)]).error_code == \
            ErrorCode.invalid_share_session_epoch
        assert share_ack(c, "wg", "m2", 1, topic_id, [(0, 0, ACCEPT)]).error_code == ErrorCode.share_session_not_found

        heartbeat(c, "wg", "m2", 0, ("wire",))
        assert partition_of(share_fetch(c, "wg", "m2", 0, topic_id)).acquired_records == ()  # all held by m1
        stolen = share_ack(c, "wg", "m2", 1, topic_id, [(0, 0, ACCEPT)])
        assert stolen.error_code == ErrorCode.none and partition_of(stolen).error_code == ErrorCode.invalid_record_state

        piggy = partition_of(share_fetch(c, "wg", "m1", 1, topic_id, acks=[(0, 1, ACCEPT)]))
        assert (piggy.acknowledge_error_code, piggy.acquired_records) == (0, ())
        assert start_offset(c, "wg", "wire") == 2
        closed = share_fetch(c, "wg", "m1", -1, topic_id)  # the final epoch: m1's offset 2 goes back
        assert closed.error_code == ErrorCode.none
        again = partition_of(share_fetch(c, "wg", "m2", 2, topic_id))
        assert [(a.first_offset, a.last_offset, a.delivery_count) for a in again.acquired_records] == [(2, 2, 2)]
        assert share_fetch(c, "wg", "m1", 2, topic_id).error_code == ErrorCode.share_session_not_found


def test_group_configs_act_on_the_next_acquisition(share_broker):
    share_broker.create_topic("limits")
    with share_broker.client() as c:
        produce(c, "limits", batch([b"x"]))
        topic_id = joined(share_broker, c, "limits", "lg", "m")
        share_broker.context.groups.configs.alter("lg", {"share.delivery.count.limit": "2",
                                                   "share.record.lock.duration.ms": "1500"})
        first = share_fetch(c, "lg", "m", 0, topic_id)
        assert first.acquisition_lock_timeout == datetime.timedelta(milliseconds=1500)
        assert partition_of(first).acquired_records[0].delivery_count == 1
        second = share_fetch(c, "lg", "m", 1, topic_id, acks=[(0, 0, RELEASE)])
        assert partition_of(second).acquired_records[0].delivery_count == 2
        last = share_fetch(c, "lg", "m", 2, topic_id, acks=[(0, 0, RELEASE)], max_wait_ms=200)
        assert partition_of(last).acquired_records == ()  # released at the limit: archived
        assert start_offset(c, "lg", "limits") == 1
