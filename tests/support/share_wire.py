"""Raw share-group requests over the test BrokerConnection: heartbeat, ShareFetch, ShareAcknowledge,
and joining a member."""

from __future__ import annotations

import datetime
import time

from kio.schema.describe_share_group_offsets.v1 import request as offsets_req
from kio.schema.errors import ErrorCode
from kio.schema.share_acknowledge.v1 import request as ack_req
from kio.schema.share_fetch.v1 import request as fetch_req
from kio.schema.share_group_heartbeat.v1 import request as hb_req




ACCEPT, RELEASE = 1, 2


def heartbeat(c, group, member, epoch, topics=None):
    return c.request(hb_req.ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch,
                                                       rack_id=None, subscribed_topic_names=topics))


def share_fetch(c, group, member, epoch, topic_id, acks=(), max_records=100, max_wait_ms=0):
    batches = tuple(fetch_req.AcknowledgementBatch(first_offset=f, last_offset=l, acknowledge_types=(t,))
                    for f, l, t in acks)
    return c.request(fetch_req.ShareFetchRequest(
        group_id=group, member_id=member, share_session_epoch=epoch,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=1 << 20,
        max_records=max_records, batch_size=100, topics=(fetch_req.FetchTopic(topic_id=topic_id, partitions=(
            fetch_req.FetchPartition(partition_index=0, acknowledgement_batches=batches),)),),
        forgotten_topics_data=()))


def share_ack(c, group, member, epoch, topic_id, acks):
    return c.request(ack_req.ShareAcknowledgeRequest(
        group_id=group, member_id=member, share_session_epoch=epoch, topics=(ack_req.AcknowledgeTopic(
            topic_id=topic_id, partitions=(ack_req.AcknowledgePartition(
                partition_index=0, acknowledgement_batches=tuple(
                    ack_req.AcknowledgementBatch(first_offset=f, last_offset=l, acknowledge_types=(t,))
                    for f, l, t in acks)),)),)))


def start_offset(c, group, topic):
    wanted = offsets_req.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=(0,))
    resp = c.request(offsets_req.DescribeShareGroupOffsetsRequest(groups=(
        offsets_req.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=(wanted,)),)))
    return resp.groups[0].topics[0].partitions[0].start_offset


def partition_of(response):
    [topic] = response.responses
    [part] = topic.partitions
    return part


def joined(broker, c, topic, group, member):
    """Join (earliest reset) and return the topic id of the assignment."""
    broker.context.groups.configs.alter(group, {"share.auto.offset.reset": "earliest"})
    for _ in range(500):  # the coordinator may still be loading (polled, not spun: its load needs the loop)
        resp = heartbeat(c, group, member, 0, (topic,))
        if resp.error_code != ErrorCode.coordinator_load_in_progress:
            break
        time.sleep(0.01)
    assert resp.error_code == ErrorCode.none and resp.member_epoch == 1
    [tp] = resp.assignment.topic_partitions
    assert tp.partitions == (0,)
    return tp.topic_id
