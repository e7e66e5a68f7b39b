"""The Fetch response the handler encodes itself (broker/fetch_response.py, issue 33) is, byte for
byte, what kio writes for the same answer, in every version the broker serves: partitions with
records (small ones as bytes, large ones as a file region for sendfile), empty ones, errors,
read_committed's aborted-transaction lists, topics by name and by id, a throttle time."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition

from topiclake.broker import wire
from topiclake.broker.handlers.fetch import _response, _rows, _Slot, _fill
from topiclake.broker.fetch_response import fetch_response
from topiclake.broker.partitions import PartitionManager
from topiclake.broker.request_metrics import RequestMetrics
from topiclake.protocol.codec import response_schema
from topiclake.segments.batch import Record, build_batch, read_header
from topiclake.segments.storage import StorageLayout

TOPIC_ID = uuid.UUID("6d3b8a52-0f1e-4e8c-9a57-1b2c3d4e5f60")


class _Broker:
    """What _fill reads of the broker context: its partitions and (no) archive."""

    def __init__(self, partitions: PartitionManager):
        self.partitions, self.archive = partitions, None


def _flat(chunks) -> list:
    """Adjacent bytes joined; a file region as (position, size)."""
    out: list = []
    for chunk in chunks:
        if isinstance(chunk, wire.FileRegion):
            out.append((chunk.position, chunk.size))
        elif out and isinstance(out[-1], bytes):
            out[-1] += chunk
        else:
            out.append(bytes(chunk))
    return out


@pytest.fixture(scope="module")
def slots(tmp_path_factory):
    """Slots as the handler fills them: partition 0 holds a 100 KiB batch (a file region),
    1 a small one, 2 is read at its end (nothing), 3 out of range (an error), 4 not served."""
    layout = StorageLayout(tmp_path_factory.mktemp("fetch-response"))

    async def filled():
        manager = PartitionManager(layout)
        manager.create_topic("wide", 4)
        parts = [await manager.get("wide", p) for p in range(4)]

        def append() -> None:
            big = build_batch([Record(0, 1000, None, bytes(100 * 1024), ())], base_offset=0)
            parts[0].append_batch(big, read_header(big))
            for part in parts[1:]:
                small = build_batch([Record(0, 1000, b"k", b"v" * 50, ())], base_offset=0)
                part.append_batch(small, read_header(small))

        await manager.run_io(append)
        requested = [(0, 0), (1, 0), (2, 1), (3, 99)]
        slots = [_Slot("wide", "wide", FetchPartition(partition=p, fetch_offset=offset, partition_max_bytes=1 << 20),
                       part=parts[p]) for p, offset in requested]
        slots.append(_Slot("wide", "wide", FetchPartition(partition=4, fetch_offset=0, partition_max_bytes=1 << 20),
                           error=ErrorCode.not_leader_or_follower))
        await _fill(_Broker(manager), slots, 50 * 1024 * 1024)
        return manager, slots

    manager, found = asyncio.run(filled())
    assert isinstance(found[0].records, wire.FileRegion) and len(found[1].records) > 0
    assert found[2].records == b"" and found[3].error == ErrorCode.offset_out_of_range
    yield found
    asyncio.run(manager.close())


@pytest.mark.parametrize("version", range(4, 19))
@pytest.mark.parametrize("committed", [False, True])
def test_the_same_bytes_kio_writes(slots, version, committed):
    by_id = version >= 13
    keyed = [_Slot(TOPIC_ID if by_id else s.topic_key, s.topic, s.request, s.part, s.error, s.records) for s in slots]
    keyed.append(_Slot(TOPIC_ID if by_id else "other", None, slots[1].request, error=ErrorCode.unknown_topic_or_partition))
    kio_response = _response(response_schema(1, version), _rows(keyed, committed), by_id, throttle_ms=250,
                             session_id=123456)
    ours = fetch_response(version, _rows(keyed, committed), throttle_ms=250, session_id=123456)
    assert _flat(wire.encode_response(7, ours)) == _flat(wire.encode_response(7, kio_response))
    counted_ours, counted_kio = RequestMetrics(), RequestMetrics()
    counted_ours.record(1, version, 0.01, ours)
    counted_kio.record(1, version, 0.01, kio_response)
    assert counted_ours.apis[1].errors == counted_kio.apis[1].errors


def test_aborted_transactions_are_encoded_as_kio_does():
    rows = {"t": [(0, 0, 10, 8, 0, ((1001, 3), (1002, 5)), b"\x00" * 70), (1, 0, 10, 10, 0, (), b""),
                  (2, 0, 4, 4, 0, None, b"")]}
    for version in range(4, 19):
        key = TOPIC_ID if version >= 13 else "t"
        ours = fetch_response(version, {key: rows["t"]}, throttle_ms=0)
        cls = response_schema(1, version)
        topic_cls = wire.nested(cls, "responses")
        part_cls = wire.nested(topic_cls, "partitions")
        aborted_cls = wire.nested(part_cls, "aborted_transactions")
        parts = tuple(wire.make(part_cls, partition_index=i, error_code=ErrorCode(e), high_watermark=hw,
                                last_stable_offset=lso, log_start_offset=start, preferred_read_replica=-1,
                                aborted_transactions=None if ab is None else tuple(
                                    wire.make(aborted_cls, producer_id=p, first_offset=f) for p, f in ab),
                                records=rec)
                      for i, e, hw, lso, start, ab, rec in rows["t"])
        theirs = wire.make(cls, throttle_time=ours.throttle_time, error_code=ErrorCode.none, session_id=0,
                           responses=(wire.make(topic_cls, **{"topic_id" if version >= 13 else "topic": key},
                                                partitions=parts),))
        assert _flat(wire.encode_response(3, ours)) == _flat(wire.encode_response(3, theirs)), version


def test_with_refused_topics_the_policy_still_merges_its_answers(tmp_path):
    """An authorizer's policy appends the refused topics to the handler's answer: there the handler
    answers with kio objects (encoded.objects_wanted), and both parts reach the client."""
    from kio.schema.create_acls.v3 import request as acl_req
    from kio.static.primitive import i8

    from topiclake.broker.security.config import SecurityConfig
    from tests.support.in_process_broker import InProcessBroker
    from tests.support.wire import batch, fetch_request, produce, values_of

    broker = InProcessBroker(tmp_path, security=SecurityConfig(authorizer="acl", allow_everyone_if_no_acl_found=True))
    broker.start()
    try:
        for name in ("open", "closed"):
            broker.create_topic(name)
        with broker.client() as client:
            for name in ("open", "closed"):
                assert produce(client, name, batch([name.encode()])).error_code == ErrorCode.none
            deny_read = acl_req.AclCreation(resource_type=i8(2), resource_name="closed", resource_pattern_type=i8(3),
                                            principal="User:ANONYMOUS", host="*", operation=i8(3),
                                            permission_type=i8(2))
            assert client.request(acl_req.CreateAclsRequest(creations=(deny_read,))).results[0].error_code == 0
            both = fetch_request("open", 0)
            both = dataclasses.replace(both, topics=both.topics + tuple(
                dataclasses.replace(t, topic="closed") for t in both.topics))
            answer = {t.topic: t.partitions[0] for t in client.request(both).responses}
        assert values_of(answer["open"].records) == [(0, b"open")]
        assert answer["closed"].error_code == ErrorCode.topic_authorization_failed and not answer["closed"].records
    finally:
        broker.stop()


@pytest.mark.parametrize("version", range(7, 19))
def test_a_session_error_is_encoded_as_kio_does(version):
    """A fetch session's error (KIP-227): the top-level error code, session id 0, no topics."""
    kio_response = _response(response_schema(1, version), {}, version >= 13,
                             error=ErrorCode.invalid_fetch_session_epoch)
    ours = fetch_response(version, {}, throttle_ms=0, error=ErrorCode.invalid_fetch_session_epoch)
    assert _flat(wire.encode_response(7, ours)) == _flat(wire.encode_response(7, kio_response))
    assert ours.error_counts == {int(ErrorCode.invalid_fetch_session_epoch): 1}
