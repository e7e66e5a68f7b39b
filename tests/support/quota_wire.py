"""Raw client-quota requests (no client library exposes them), and the throttle time a broker
answers produce and fetch with."""

from __future__ import annotations

import datetime

from kio.schema.alter_client_quotas.v1 import request as quotas_alter
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_req
from kio.schema.produce.v9 import request as produce_req

from tests.support.wire import TIMEOUT


def quota_entity(cls, **names):
    return tuple(cls(entity_type=t.replace("_", "-"), entity_name=n) for t, n in names.items())


def alter_quotas(client, entity: dict, ops: dict, validate_only=False):
    entry = quotas_alter.EntryData(entity=quota_entity(quotas_alter.EntityData, **entity), ops=tuple(
        quotas_alter.OpData(key=k, value=v if v is not None else 0.0, remove=v is None) for k, v in ops.items()))
    [result] = client.request(quotas_alter.AlterClientQuotasRequest(entries=(entry,),
                                                                    validate_only=validate_only)).entries
    return result.error_code


def produce_throttled(client, topic: str, data: bytes) -> tuple[ErrorCode, int]:
    """(error, throttle_time_ms) of a produce request."""
    response = client.request(produce_req.ProduceRequest(
        transactional_id=None, acks=-1, timeout=TIMEOUT, topic_data=(produce_req.TopicProduceData(
            name=topic, partition_data=(produce_req.PartitionProduceData(index=0, records=data),)),)))
    return response.responses[0].partition_responses[0].error_code, int(response.throttle_time.total_seconds() * 1000)


def fetch_throttled(client, topic: str) -> tuple[int, int]:
    """(record bytes, throttle_time_ms) of a fetch from offset 0."""
    response = client.request(fetch_req.FetchRequest(
        max_wait=datetime.timedelta(0), min_bytes=1, forgotten_topics_data=(), topics=(fetch_req.FetchTopic(
            topic=topic, partitions=(fetch_req.FetchPartition(partition=0, fetch_offset=0,
                                                                 partition_max_bytes=1 << 20),)),)))
    return len(response.responses[0].partitions[0].records or b""), int(response.throttle_time.total_seconds() * 1000)
