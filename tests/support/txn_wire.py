"""Raw transactional requests over the test BrokerConnection (exact control of what is sent)."""

from __future__ import annotations

import datetime

from kio.schema.add_partitions_to_txn.v3 import request as add_req
from kio.schema.end_txn.v3 import request as end_req
from kio.schema.fetch.v12 import request as fetch_req
from kio.schema.init_producer_id.v4 import request as init_req
from kio.schema.list_offsets.v7 import request as lo_req
from kio.schema.produce.v9 import request as produce_req

from topiclake.segments.batch import Record, build_batch

TIMEOUT = datetime.timedelta(seconds=5)


def init_producer_id(client, txn_id, timeout_ms=60_000):
    resp = client.request(init_req.InitProducerIdRequest(
        transactional_id=txn_id, transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
        producer_id=-1, producer_epoch=-1))
    return resp.error_code, resp.producer_id, resp.producer_epoch


def add_partitions(client, txn_id, pid, epoch, topic, partitions):
    resp = client.request(add_req.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=(add_req.AddPartitionsToTxnTopic(name=topic, partitions=tuple(partitions)),)))
    return {(t.name, p.partition_index): p.partition_error_code
            for t in resp.results_by_topic_v3_and_below for p in t.results_by_partition}


def end_txn(client, txn_id, pid, epoch, commit):
    return client.request(end_req.EndTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
                                                committed=commit)).error_code


def txn_batch(values, pid, epoch, seq):
    records = [Record(i, 1_700_000_000_000, None, v, ()) for i, v in enumerate(values)]
    return build_batch(records, base_offset=0, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       is_transactional=True)


def produce(client, txn_id, topic, data, partition=0):
    resp = client.request(produce_req.ProduceRequest(transactional_id=txn_id, acks=-1, timeout=TIMEOUT, topic_data=(
        produce_req.TopicProduceData(name=topic, partition_data=(
            produce_req.PartitionProduceData(index=partition, records=data),)),)))
    return resp.responses[0].partition_responses[0]


def fetch(client, topic, offset, *, committed, partition=0):
    req = fetch_req.FetchRequest(max_wait=datetime.timedelta(0), min_bytes=1, isolation_level=1 if committed else 0,
                                 topics=(fetch_req.FetchTopic(topic=topic, partitions=(fetch_req.FetchPartition(
                                     partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20),)),),
                                 forgotten_topics_data=())
    return client.request(req).responses[0].partitions[0]


def latest(client, topic, *, committed, partition=0):
    req = lo_req.ListOffsetsRequest(replica_id=-1, isolation_level=1 if committed else 0, topics=(
        lo_req.ListOffsetsTopic(name=topic, partitions=(
            lo_req.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=-1),)),))
    return client.request(req).topics[0].partitions[0].offset
