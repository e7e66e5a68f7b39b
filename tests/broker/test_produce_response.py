"""The Produce response the handler encodes itself (broker/produce_response.py, issue 33) is, byte
for byte, what kio writes for the same answer, in every version the broker serves: appended
partitions (with and without a log append time), refused ones with their error message and
rejected records, topics by name and by id, a throttle time; and a real broker answers a Produce
that a kio client decodes."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from topiclake.broker import wire
from topiclake.broker.handlers.produce import _response
from topiclake.broker.produce_response import produce_response
from topiclake.broker.request_metrics import RequestMetrics
from topiclake.protocol.codec import response_schema
from tests.support.in_process_broker import InProcessBroker
from tests.support.wire import batch, produce

TOPIC_ID = uuid.UUID("6d3b8a52-0f1e-4e8c-9a57-1b2c3d4e5f60")


def _answer(index, code=ErrorCode.none, base_offset=-1, append_ms=-1, log_start=-1, record_errors=(), message=None):
    return dict(index=index, error_code=code, base_offset=base_offset, log_append_time_ms=append_ms,
                log_start_offset=log_start, record_errors=record_errors, error_message=message)


ANSWERS = [
    _answer(0, base_offset=1234, log_start=17),
    _answer(1, base_offset=5, append_ms=1_700_000_000_123, log_start=0),
    _answer(7, ErrorCode.invalid_timestamp, message="produce to t-7: timestamp out of range",
            record_errors=((0, "record 0: too old"), (3, None))),
    _answer(9, ErrorCode.unknown_topic_or_partition),
]


def _bytes(chunks) -> bytes:
    return b"".join(chunks)


@pytest.mark.parametrize("version", range(3, 14))
@pytest.mark.parametrize("throttle_ms", [0, 250])
def test_pre_encoded_bytes_are_kios(version, throttle_ms):
    key = TOPIC_ID if version >= 13 else "wide-topic"
    answers = [(dict(name=None if version >= 13 else key, topic_id=TOPIC_ID if version >= 13 else None), ANSWERS),
               (dict(name=None if version >= 13 else "other", topic_id=TOPIC_ID if version >= 13 else None),
                ANSWERS[:1])]
    ours = produce_response(version, [(t["name"] if t["topic_id"] is None else t["topic_id"], parts)
                                      for t, parts in answers], throttle_ms)
    kios = _response(response_schema(0, version), answers, throttle_ms)
    assert _bytes(wire.encode_response(42, ours)) == _bytes(wire.encode_response(42, kios))
    # The request metrics count the same error codes either way.
    counted = RequestMetrics(), RequestMetrics()
    counted[0].record(0, version, 0.001, ours)
    counted[1].record(0, version, 0.001, kios)
    assert counted[0].apis[0].errors == counted[1].apis[0].errors == {0: 3, ErrorCode.invalid_timestamp: 1,
                                                                      ErrorCode.unknown_topic_or_partition: 1}


def test_a_broker_answers_produce_a_client_decodes(tmp_path):
    broker = InProcessBroker(tmp_path).start()
    try:
        broker.create_topic("answered", 2)
        with broker.client() as client:
            first = produce(client, "answered", batch([b"a", b"b"]), partition=1)
            second = produce(client, "answered", batch([b"c"]), partition=1)
            missing = produce(client, "answered", batch([b"d"]), partition=5)
    finally:
        broker.stop()
    assert (first.index, first.error_code, first.base_offset, first.log_start_offset) == (1, ErrorCode.none, 0, 0)
    assert (second.error_code, second.base_offset) == (ErrorCode.none, 2)
    assert first.log_append_time is None  # CreateTime: -1 on the wire
    assert (missing.index, missing.error_code, missing.base_offset) == (5, ErrorCode.unknown_topic_or_partition, -1)
