"""Raw Produce, Fetch and OffsetForLeaderEpoch requests over the test BrokerConnection (exact control of what is sent), and
the v2 batches they carry."""

from __future__ import annotations

import datetime

from kio.schema.fetch.v12 import request as fetch_req
from kio.schema.fetch.v13 import request as fetch_v13
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_req
from kio.schema.produce.v9 import request as produce_req

from topiclake.segments.batch import Record, build_batch, iter_batches


TIMEOUT = datetime.timedelta(seconds=5)


def batch(values, *, ts=1_700_000_000_000, producer_id=-1, epoch=-1, seq=-1, compression="none") -> bytes:
    records = [Record(i, ts + i, f"k{i}".encode(), v, ()) for i, v in enumerate(values)]
    return build_batch(records, base_offset=0, compression=compression, producer_id=producer_id,
                       producer_epoch=epoch, base_sequence=seq)


def produce_request(topic, data, partition=0, acks=-1):
    return produce_req.ProduceRequest(transactional_id=None, acks=acks, timeout=TIMEOUT, topic_data=(
        produce_req.TopicProduceData(name=topic, partition_data=(
            produce_req.PartitionProduceData(index=partition, records=data),)),))


def produce(client, topic, data, partition=0, acks=-1):
    resp = client.request(produce_request(topic, data, partition, acks), expect_response=acks != 0)
    return None if resp is None else resp.responses[0].partition_responses[0]


def fetch_request(topic, offset, *, partition=0, max_wait_ms=0, min_bytes=1, partition_max_bytes=1 << 20):
    return fetch_req.FetchRequest(max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes,
                                  topics=(fetch_req.FetchTopic(topic=topic, partitions=(fetch_req.FetchPartition(
                                      partition=partition, fetch_offset=offset,
                                      partition_max_bytes=partition_max_bytes),)),),
                                  forgotten_topics_data=())


def fetch(client, topic, offset, *, partition=0, max_wait_ms=0, min_bytes=1, partition_max_bytes=1 << 20):
    req = fetch_request(topic, offset, partition=partition, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                        partition_max_bytes=partition_max_bytes)
    return client.request(req).responses[0].partitions[0]


def session_fetch(client, topic, offsets: dict[int, int], *, session_id=0, epoch=-1, forget=(), max_wait_ms=0,
                  topic_id=None, committed=False, by_name=fetch_req):
    """One Fetch of a KIP-227 session (epoch 0 opens one; -1, with session id 0: sessionless) naming
    `offsets` (partition -> fetch offset) of `topic`, v13 when `topic_id` is given, else in the
    request schema `by_name` (v7-v12); the response and {partition: its answer}."""
    if topic_id is None:
        schema, key = by_name, {"topic": topic}
    else:
        schema, key = fetch_v13, {"topic_id": topic_id}
    parts = tuple(schema.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
                  for p, o in offsets.items())
    topics = (schema.FetchTopic(**key, partitions=parts),) if parts else ()
    forgotten = (schema.ForgottenTopic(**key, partitions=tuple(forget)),) if forget else ()
    response = client.request(schema.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, isolation_level=int(committed),
        session_id=session_id, session_epoch=epoch, topics=topics, forgotten_topics_data=forgotten))
    return response, {p.partition_index: p for t in response.responses for p in t.partitions}


def values_of(records: bytes):
    return [(r.offset, r.value) for b in iter_batches(records) for r in b.records()]


def offset_for_epoch(client, topic: str, epoch: int, *, partition: int = 0, current: int = -1):
    """One partition's EpochEndOffset: where `epoch` ended (`current`: the client's leader epoch)."""
    request = epoch_req.OffsetForLeaderEpochRequest(replica_id=-1, topics=(epoch_req.OffsetForLeaderTopic(
        topic=topic, partitions=(epoch_req.OffsetForLeaderPartition(
            partition=partition, current_leader_epoch=current, leader_epoch=epoch),)),))
    return client.request(request).topics[0].partitions[0]
