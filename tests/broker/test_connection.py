"""Framing and bad input: a broken frame closes only its own connection; the right error codes."""

from __future__ import annotations

import socket
import struct

import pytest
from kio.schema.api_versions.v3 import request as av_req
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as md_req

from topiclake.broker import wire

API_VERSIONS = av_req.ApiVersionsRequest(client_software_name="test", client_software_version="1")


def closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(5)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def still_serves(broker) -> None:
    with broker.client() as c:
        assert c.request(API_VERSIONS).error_code == ErrorCode.none


@pytest.mark.parametrize("frame", [
    struct.pack(">i", 12) + b"\xde\xad\xbe\xef" * 3,             # garbage api key / version
    struct.pack(">i", 0x7FFFFFF0),                                # huge size prefix
    struct.pack(">i", -5),                                        # negative size
    struct.pack(">i", 8) + struct.pack(">hhi", 3, 12, 1),         # header cut short
    struct.pack(">i", 40) + struct.pack(">hhi", 0, 9, 1) + b"\xff" * 32,  # undecodable produce
], ids=["garbage", "huge", "negative", "short-header", "bad-body"])
def test_bad_frame_closes_only_that_connection(broker, frame):
    with broker.client() as bystander:
        with socket.create_connection(("127.0.0.1", broker.server.port)) as sock:
            sock.sendall(frame)
            assert closed_by_peer(sock)
        assert bystander.request(API_VERSIONS).error_code == ErrorCode.none
    still_serves(broker)


def test_client_disconnect_mid_frame(broker):
    with socket.create_connection(("127.0.0.1", broker.server.port)) as sock:
        sock.sendall(struct.pack(">i", 1000) + b"\x00" * 10)
    still_serves(broker)


def test_api_versions_lists_every_served_api(broker):
    with broker.client() as c:
        resp = c.request(API_VERSIONS)
    served = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    for key in (0, 1, 2, 3, 18, 19, 20, 22, 32, 33, 37, 44, 60):
        assert key in served
    assert served[18] == (0, 4)


def test_unsupported_api_versions_version_answers_v0(broker):
    with socket.create_connection(("127.0.0.1", broker.server.port)) as sock:
        body = struct.pack(">hhi", 18, 99, 42) + struct.pack(">h", 1) + b"x" + b"\x00" * 4
        sock.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", sock.recv(4))
        data = b""
        while len(data) < size:
            data += sock.recv(size - len(data))
    from kio.schema.api_versions.v0 import request as v0
    correlation_id, resp = wire.decode_response(data, v0.ApiVersionsRequest())
    assert correlation_id == 42 and resp.error_code == ErrorCode.unsupported_version
    assert any(k.api_key == 18 for k in resp.api_keys)


def test_unsupported_api_closes_connection(broker):
    with socket.create_connection(("127.0.0.1", broker.server.port)) as sock:
        body = struct.pack(">hhi", 76, 0, 1) + struct.pack(">h", -1) + b"\x00" * 20  # ShareGroupHeartbeat: not served
        sock.sendall(struct.pack(">i", len(body)) + body)
        assert closed_by_peer(sock)
    still_serves(broker)


def metadata(client, *names, auto_create=True):
    import uuid
    topics = None if not names else tuple(md_req.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=n) for n in names)
    return client.request(md_req.MetadataRequest(topics=topics, allow_auto_topic_creation=auto_create,
                                                 include_topic_authorized_operations=False))


def test_metadata_rejects_path_tricks_and_auto_creates(broker):
    with broker.client() as c:
        resp = metadata(c, "../evil", "a/b", "..", "fresh")
    codes = {t.name: t.error_code for t in resp.topics}
    assert codes == {"../evil": ErrorCode.invalid_topic_exception, "a/b": ErrorCode.invalid_topic_exception,
                     "..": ErrorCode.invalid_topic_exception, "fresh": ErrorCode.none}
    fresh = next(t for t in resp.topics if t.name == "fresh")
    assert [p.partition_index for p in fresh.partitions] == [0]
    assert fresh.partitions[0].leader_id == 0
    assert resp.brokers[0].port == broker.server.port and resp.cluster_id == broker.context.cluster_id
    assert not (broker.context.layout.root.parent / "evil").exists()


def test_metadata_without_auto_create(broker):
    with broker.client() as c:
        resp = metadata(c, "absent", auto_create=False)
        assert resp.topics[0].error_code == ErrorCode.unknown_topic_or_partition
        assert metadata(c).topics == ()


def test_create_topics_errors(broker):
    assert broker.create_topic("ok", 2).error_code == ErrorCode.none
    assert broker.create_topic("ok").error_code == ErrorCode.topic_already_exists
    assert broker.create_topic("a/b").error_code == ErrorCode.invalid_topic_exception
    assert broker.create_topic("bad-config", **{"retention.ms": "soon"}).error_code == ErrorCode.invalid_config
    assert broker.create_topic("zero", 0).error_code == ErrorCode.invalid_partitions


def test_metadata_marks_both_internal_topics(broker):
    for name in ("__consumer_offsets", "__transaction_state", "plain"):
        broker.context.partitions.create_topic(name, 1)
    with broker.client() as c:
        listed = {t.name: t.is_internal for t in metadata(c).topics}
        named = {t.name: t.is_internal for t in metadata(c, "__transaction_state").topics}
    assert listed == {"__consumer_offsets": True, "__transaction_state": True, "plain": False}
    assert named == {"__transaction_state": True}
