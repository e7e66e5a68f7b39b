"""Produce with many partitions: a request's per-partition answers, and Produce requests pipelined
on one connection (queued on the writer thread in request order, answered in order; any other
request waits for the appends before it)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import request as produce_req

from topiclake.protocol import codec
from tests.support.wire import TIMEOUT, batch, fetch, fetch_request, produce, produce_request, values_of


def produce_many(client, partition_data: dict[tuple[str, int], bytes]):
    """One Produce request over every (topic, partition) of `partition_data`: {(topic, index): response}."""
    topics: dict[str, list] = {}
    for (topic, index), data in partition_data.items():
        topics.setdefault(topic, []).append(produce_req.PartitionProduceData(index=index, records=data))
    req = produce_req.ProduceRequest(transactional_id=None, acks=-1, timeout=TIMEOUT, topic_data=tuple(
        produce_req.TopicProduceData(name=topic, partition_data=tuple(parts)) for topic, parts in topics.items()))
    response = client.request(req)
    return {(t.name, p.index): p for t in response.responses for p in t.partition_responses}


def test_one_request_over_many_partitions_answers_each(broker):
    broker.create_topic("wide", partitions=300, **{"max.message.bytes": "500"})
    broker.create_topic("wide-idem", partitions=4)
    good = {("wide", i): batch([f"v{i}".encode()]) for i in range(0, 300, 2)}
    bad = {("wide", 1): batch([b"x" * 1000]),                   # over max.message.bytes
           ("wide", 3): batch([b"a"]) + batch([b"b"]),           # two batches
           ("wide", 5): b"\x00" * 30,                            # not a batch
           ("wide", 300): batch([b"x"]),                         # no such partition
           ("nope", 0): batch([b"x"])}                           # no such topic
    corrupt = bytearray(batch([b"crc"]))
    corrupt[-1] ^= 0xFF
    bad[("wide", 7)] = bytes(corrupt)
    with broker.client() as c:
        assert produce(c, "wide-idem", batch([b"a"], producer_id=9, epoch=0, seq=0)).base_offset == 0
        assert produce(c, "wide-idem", batch([b"b"], producer_id=9, epoch=0, seq=0), partition=1).base_offset == 0
        idem = {("wide-idem", 0): batch([b"a"], producer_id=9, epoch=0, seq=0),    # a retry: its old offset
                ("wide-idem", 1): batch([b"c"], producer_id=9, epoch=0, seq=5)}    # a sequence gap
        answers = produce_many(c, {**good, **bad, **idem})
        assert all((answers[key].error_code, answers[key].base_offset) == (ErrorCode.none, 0) for key in good)
        assert {key: answers[key].error_code for key in bad} == {
            ("wide", 1): ErrorCode.message_too_large, ("wide", 3): ErrorCode.invalid_record,
            ("wide", 5): ErrorCode.corrupt_message, ("wide", 7): ErrorCode.corrupt_message,
            ("wide", 300): ErrorCode.unknown_topic_or_partition, ("nope", 0): ErrorCode.unknown_topic_or_partition}
        assert (answers[("wide-idem", 0)].error_code, answers[("wide-idem", 0)].base_offset) == (ErrorCode.none, 0)
        assert answers[("wide-idem", 1)].error_code == ErrorCode.out_of_order_sequence_number
        # The valid batches are in their logs, the refused ones nowhere.
        assert values_of(fetch(c, "wide", 0, partition=42).records) == [(0, b"v42")]
        for index in (1, 3, 5, 7):
            assert fetch(c, "wide", 0, partition=index).high_watermark == 0
        assert fetch(c, "wide-idem", 0).high_watermark == 1 and fetch(c, "wide-idem", 0, partition=1).high_watermark == 1


def test_pipelined_produces_append_and_answer_in_request_order(broker):
    broker.create_topic("piped", partitions=3)
    requests = 40
    with broker.client() as c:
        for seq in range(requests):  # all sent before any answer is read, as librdkafka pipelines
            data = batch([f"r{seq}".encode()], producer_id=11, epoch=0, seq=seq // 3)  # per partition
            req = produce_request("piped", data, partition=seq % 3)
            c.send_raw(codec.encode_request(1000 + seq, req, "pipelined"))
        # A fetch queued behind them sees every one of the partition's appends.
        c.send_raw(codec.encode_request(2000, fetch_request("piped", 0, partition=0), "pipelined"))
        answers = [codec.decode_response(c.read_frame(), req) for _ in range(requests)]
        assert [correlation for correlation, _ in answers] == [1000 + seq for seq in range(requests)]
        offsets = [a.responses[0].partition_responses[0] for _, a in answers]
        assert all(p.error_code == ErrorCode.none for p in offsets)
        assert [p.base_offset for p in offsets] == [seq // 3 for seq in range(requests)]
        correlation, fetched = codec.decode_response(c.read_frame(), fetch_request("piped", 0, partition=0))
        assert correlation == 2000
        records = fetched.responses[0].partitions[0].records
        assert values_of(records) == [(i, f"r{seq}".encode()) for i, seq in enumerate(range(0, requests, 3))]

