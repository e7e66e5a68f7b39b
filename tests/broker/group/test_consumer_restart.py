"""KIP-848 groups across a broker restart, in process: the group's records are in
`__consumer_offsets`, so a member heartbeating with its old member id and epoch continues."""

from __future__ import annotations

import datetime
import time

from kio.schema.consumer_group_describe.v0 import request as describe_req
from kio.schema.consumer_group_heartbeat.v0 import request as hb_req

from topiclake.broker.group.config import GroupsConfig

from tests.support.in_process_broker import InProcessBroker

RETRIABLE = {"coordinator_load_in_progress", "coordinator_not_available", "not_coordinator"}


def retry(broker, call):
    """`call(client)` until its error is not a coordinator-loading one (a restarted broker loads)."""
    deadline = time.monotonic() + 10
    while True:
        with broker.client() as c:
            answer = call(c)
        if answer.error_code.name not in RETRIABLE or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)


def heartbeat(broker, member_id, epoch, *, topics=None, owned=()):
    req = hb_req.ConsumerGroupHeartbeatRequest(
        group_id="g848", member_id=member_id, member_epoch=epoch,
        rebalance_timeout=datetime.timedelta(seconds=30), subscribed_topic_names=topics,
        topic_partitions=None if owned is None else tuple(
            hb_req.TopicPartitions(topic_id=tid, partitions=tuple(ps)) for tid, ps in owned))
    return retry(broker, lambda c: c.request(req))


def owned_of(resp):
    return tuple((tp.topic_id, tuple(tp.partitions)) for tp in resp.assignment.topic_partitions)


def describe(broker):
    return retry(broker, lambda c: c.request(describe_req.ConsumerGroupDescribeRequest(
        group_ids=("g848",), include_authorized_operations=False)).groups[0])


def test_a_member_keeps_its_epoch_and_assignment_across_a_restart(tmp_path):
    settings = dict(groups=GroupsConfig(offsets_topic_partitions=2))
    broker = InProcessBroker(tmp_path / "data", **settings).start()
    try:
        broker.create_topic("orders", 3)
        joined = heartbeat(broker, "", 0, topics=("orders",))
        assert joined.error_code.name == "none", joined
        member, epoch, owned = joined.member_id, joined.member_epoch, owned_of(joined)
        assert epoch == 1 and [ps for _, ps in owned] == [(0, 1, 2)]
        assert heartbeat(broker, member, epoch, owned=owned).error_code.name == "none"
        before = describe(broker)
    finally:
        broker.stop()

    broker = InProcessBroker(tmp_path / "data", **settings).start()
    try:
        after = describe(broker)
        assert after.error_code.name == "none", after
        assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
        assert after.members == before.members  # member id, epoch, assignment, target, client
        resp = heartbeat(broker, member, epoch, owned=owned)
        assert resp.error_code.name == "none", resp
        assert resp.member_id == member and resp.member_epoch == epoch
        assert resp.assignment is None or owned_of(resp) == owned
        assert describe(broker).group_epoch == before.group_epoch  # no rejoin, no rebalance
        # Leaving writes tombstones: after one more restart the member is gone for good.
        assert heartbeat(broker, member, -1, owned=None).error_code.name == "none"
    finally:
        broker.stop()

    broker = InProcessBroker(tmp_path / "data", **settings).start()
    try:
        group = describe(broker)
        assert group.group_state == "Empty" and group.members == ()
        assert heartbeat(broker, member, epoch, owned=owned).error_code.name == "unknown_member_id"
    finally:
        broker.stop()


def test_an_empty_group_without_offsets_is_deleted_by_the_offset_clean_up_and_stays_deleted(tmp_path):
    """As Kafka's offset clean-up does: a KIP-848 group left empty with no offsets is deleted (its
    records tombstoned, so a restart does not bring it back); one with offsets stays."""
    from tests.support.group_wire import commit

    settings = dict(groups=GroupsConfig(offsets_topic_partitions=2, offsets_retention_check_interval_ms=300))
    broker = InProcessBroker(tmp_path / "data", **settings).start()
    try:
        broker.create_topic("orders", 1)
        joined = heartbeat(broker, "", 0, topics=("orders",))
        assert joined.error_code.name == "none", joined
        assert heartbeat(broker, joined.member_id, -1).error_code.name == "none"  # leaves: the group is empty
        assert describe(broker).group_state == "Empty"
        deadline = time.monotonic() + 10
        while describe(broker).error_code.name == "none" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert describe(broker).error_code.name == "group_id_not_found"
    finally:
        broker.stop()
    broker = InProcessBroker(tmp_path / "data", **settings).start()
    try:
        assert describe(broker).error_code.name == "group_id_not_found"
        kept = heartbeat(broker, "", 0, topics=("orders",))
        assert heartbeat(broker, kept.member_id, -1).error_code.name == "none"
        with broker.client() as c:  # an admin's commit to the empty group
            committed = commit(c, "g848", "orders", {0: 1})
        assert committed.topics[0].partitions[0].error_code.name == "none"
        time.sleep(1.0)  # three clean-ups: the offsets are not expired, so the group stays
        assert describe(broker).group_state == "Empty"
    finally:
        broker.stop()


def test_an_empty_group_goes_once_its_offsets_expired(tmp_path):
    from tests.support.group_wire import commit

    settings = dict(groups=GroupsConfig(offsets_topic_partitions=2, offsets_retention_check_interval_ms=300,
                                        offsets_retention_minutes=0))  # expired at the first clean-up
    broker = InProcessBroker(tmp_path / "data", **settings).start()
    try:
        broker.create_topic("orders", 1)
        joined = heartbeat(broker, "", 0, topics=("orders",))
        assert heartbeat(broker, joined.member_id, -1).error_code.name == "none"
        with broker.client() as c:
            committed = commit(c, "g848", "orders", {0: 1})
        assert committed.topics[0].partitions[0].error_code.name == "none"
        deadline = time.monotonic() + 10
        while describe(broker).error_code.name == "none" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert describe(broker).error_code.name == "group_id_not_found"
    finally:
        broker.stop()
