"""Produce with many partitions: a request's per-partition answers, and Produce requests pipelined
on one connection (queued on the writer thread in request order, answered in order; any other
request waits for the appends before it)."""

from __future__ import annotations

import dataclasses
import gc
import logging
import socket
import threading
import time

from kio.schema.end_txn.v3 import request as end_req
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7 import request as lo_req
from kio.schema.produce.v9 import request as produce_req

from topiclake.protocol import codec
from tests.support import txn_wire
from tests.support.in_process_broker import InProcessBroker
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


def send_all(client, requests: list) -> None:
    """Every request written before any answer is read (librdkafka pipelines up to 5 per connection)."""
    client.send_raw(b"".join(codec.encode_request(i, req, "pipelined") for i, req in enumerate(requests)))


def answers_of(client, requests: list) -> list:
    """The answers to `requests` (those with acks=0 have none), each checked to come in request order."""
    answered = [(i, req) for i, req in enumerate(requests) if getattr(req, "acks", -1) != 0]
    bodies = []
    for i, req in answered:
        correlation, body = codec.decode_response(client.read_frame(), req)
        assert correlation == i
        bodies.append(body)
    return bodies


def latest_request(topic: str, partition: int = 0):
    return lo_req.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(lo_req.ListOffsetsTopic(
        name=topic, partitions=(lo_req.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1,
                                                            timestamp=-1),)),))


def test_another_request_waits_for_the_appends_queued_before_it(broker):
    """The writer thread held up (as by a slow fsync): a Fetch (read on a reader thread, which
    does not wait for the writer) behind a queued Produce still sees its append."""
    broker.create_topic("held")
    release = threading.Event()
    holding = broker.context.partitions.io.submit(release.wait, 10)
    requests = [produce_request("held", batch([b"held"])), fetch_request("held", 0), latest_request("held")]
    with broker.client() as c:
        send_all(c, requests)
        time.sleep(0.3)  # the broker has read them all meanwhile
        release.set()
        holding.result(10)
        produced, fetched, latest = answers_of(c, requests)
        assert produced.responses[0].partition_responses[0].base_offset == 0
        assert latest.topics[0].partitions[0].offset == 1
        assert values_of(fetched.responses[0].partitions[0].records) == [(0, b"held")]


def test_a_refused_queued_append_is_answered_and_the_connection_kept(broker):
    broker.create_topic("gaps")
    requests = [
        produce_request("gaps", batch([b"first"], producer_id=21, epoch=0, seq=0)),
        produce_request("gaps", batch([b"gap"], producer_id=21, epoch=0, seq=5)),  # refused on the writer thread
        produce_request("gaps", batch([b"unacked"]), acks=0),  # no answer; appended in its turn
        produce_request("gaps", batch([b"second"], producer_id=21, epoch=0, seq=1)),
        latest_request("gaps"),  # waits for the appends before it
    ]
    with broker.client() as c:
        send_all(c, requests)
        first, gap, second, latest = answers_of(c, requests)
        parts = [r.responses[0].partition_responses[0] for r in (first, gap, second)]
        assert [(p.error_code, p.base_offset) for p in parts] == [
            (ErrorCode.none, 0), (ErrorCode.out_of_order_sequence_number, -1), (ErrorCode.none, 2)]
        assert latest.topics[0].partitions[0].offset == 3
        # The same connection goes on serving.
        assert produce(c, "gaps", batch([b"third"], producer_id=21, epoch=0, seq=2)).base_offset == 3
        assert values_of(fetch(c, "gaps", 0).records) == [(0, b"first"), (1, b"unacked"), (2, b"second"),
                                                           (3, b"third")]


def test_end_txn_behind_pipelined_transactional_produces_commits_them_all(broker):
    broker.create_topic("txn-piped", partitions=2)
    with broker.client() as c:
        _code, pid, epoch = txn_wire.init_producer_id(c, "piped-txn")
        assert set(txn_wire.add_partitions(c, "piped-txn", pid, epoch, "txn-piped", [0, 1]).values()) == \
            {ErrorCode.none}
        produces = [dataclasses.replace(produce_request(
            "txn-piped", txn_wire.txn_batch([f"t{i}".encode()], pid, epoch, i // 2), partition=i % 2),
            transactional_id="piped-txn") for i in range(8)]
        requests = [*produces, end_req.EndTxnRequest(transactional_id="piped-txn", producer_id=pid,
                                                     producer_epoch=epoch, committed=True)]
        send_all(c, requests)
        *produced, ended = answers_of(c, requests)
        assert [r.responses[0].partition_responses[0].error_code for r in produced] == [ErrorCode.none] * 8
        assert ended.error_code == ErrorCode.none
        # The commit marker follows every batch: a read_committed consumer sees them all.
        for partition in (0, 1):
            records = txn_wire.fetch(c, "txn-piped", 0, committed=True, partition=partition).records
            assert [v for _o, v in values_of(records)] == [f"t{i}".encode() for i in range(partition, 8, 2)]
            assert txn_wire.latest(c, "txn-piped", committed=True, partition=partition) == 5  # 4 + the marker


def test_a_connection_closed_with_appends_pending_loses_no_acknowledged_record(tmp_path, caplog, recwarn):
    """The client goes away, then the broker stops, each with appends queued: what was answered is
    in the log after a restart, the log holds a prefix of the requests in order, and nothing leaks
    into the broker's log as an unhandled error."""
    caplog.set_level(logging.WARNING)
    gone = [produce_request("closing", batch([f"c{i}".encode()], producer_id=31, epoch=0, seq=i))
            for i in range(100)]
    stopped = [produce_request("closing", batch([f"s{i}".encode()], producer_id=32, epoch=0, seq=i), partition=1)
               for i in range(100)]
    broker = InProcessBroker(tmp_path / "data").start()
    try:
        broker.create_topic("closing", partitions=2)
        with broker.client() as c:  # gone without reading an answer
            send_all(c, gone)
            c.sock.shutdown(socket.SHUT_RDWR)
        with broker.client() as c:  # reads a few answers, then the broker stops under it
            send_all(c, stopped)
            acknowledged = answers_of(c, stopped[:10])
            broker.stop()
    finally:
        if broker.thread.is_alive():
            broker.stop()
    broker = InProcessBroker(tmp_path / "data").start()
    try:
        with broker.client() as c:
            stored = [[v for _o, v in values_of(fetch(c, "closing", 0, partition=p, partition_max_bytes=1 << 24).records)]
                      for p in (0, 1)]
    finally:
        broker.stop()
    gc.collect()  # a coroutine never awaited says so when it is collected
    # Each connection's appends are a prefix of its requests, in order; what was answered is there.
    assert stored[0] == [f"c{i}".encode() for i in range(len(stored[0]))]
    assert stored[1] == [f"s{i}".encode() for i in range(len(stored[1]))]
    assert [(a.responses[0].partition_responses[0].error_code, a.responses[0].partition_responses[0].base_offset)
            for a in acknowledged] == [(ErrorCode.none, i) for i in range(10)]
    assert len(stored[1]) >= 10
    unhandled = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.name == "asyncio"]
    assert unhandled == []
    assert [str(w.message) for w in recwarn if "never awaited" in str(w.message)] == []


def values_after_restart(root, topic: str) -> list[bytes]:
    """The values of the topic's partition 0 as a broker started again on `root` serves them
    (garbage collected after, so a coroutine never awaited says so)."""
    broker = InProcessBroker(root).start()
    try:
        with broker.client() as c:
            return [v for _o, v in values_of(fetch(c, topic, 0).records)]
    finally:
        broker.stop()
        gc.collect()


def test_a_stop_cut_short_with_appends_queued_acknowledges_nothing_it_did_not_append(tmp_path, caplog, recwarn,
                                                                                     monkeypatch):
    """The writer thread held up past the shutdown grace: the connection is closed with its
    answers due, but the appends it queued still run, all of them in order (never a later request's
    without an earlier one's), before the logs close; nothing leaks as an unhandled error."""
    from topiclake.broker import server

    monkeypatch.setattr(server, "SHUTDOWN_GRACE_S", 0.5)
    caplog.set_level(logging.WARNING)
    requests = [produce_request("cut", batch([f"q{i}".encode()], producer_id=41, epoch=0, seq=i)) for i in range(5)]
    broker = InProcessBroker(tmp_path / "data").start()
    broker.create_topic("cut")
    with broker.client() as c:
        assert produce(c, "cut", batch([b"before"])).base_offset == 0
        release = threading.Event()
        holding = broker.context.partitions.io.submit(release.wait, 10)
        send_all(c, requests)
        time.sleep(0.3)  # read and queued behind the held writer
        stopping = threading.Thread(target=broker.stop)
        stopping.start()
        time.sleep(1.0)  # past the grace: the connection is closed with its appends queued
        release.set()
        holding.result(10)
        stopping.join(30)
        assert not stopping.is_alive()
        c.sock.settimeout(2)
        answered = 0
        try:
            while c.read_frame():
                answered += 1
        except (ConnectionError, OSError):
            pass
    stored = values_after_restart(tmp_path / "data", "cut")
    assert stored == [b"before"] + [f"q{i}".encode() for i in range(5)]
    assert answered == 0
    unhandled = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.name == "asyncio"]
    assert unhandled == []
    assert [str(w.message) for w in recwarn if "never awaited" in str(w.message)] == []


def test_a_client_that_reads_no_answers_is_paused_then_answered_in_full(broker):
    """Pipelined answers are written without waiting for the socket: a client that sends on and
    reads nothing fills the broker's buffer up to its bound, and then the broker reads no more of
    its requests (nothing grows without bound); once it reads, every request is appended and
    answered, in order."""
    from topiclake.broker.connection import MAX_ANSWERS_LATER, MAX_UNSENT_BYTES

    import struct

    topic = "unread-" + "t" * 200  # a long name: an answer about as large as its request
    broker.create_topic(topic)
    requests = 60_000  # ~15 MB of answers: more than the bound and the broker's kernel buffers
    frame = codec.encode_request(0, produce_request(topic, batch([b"v"]), acks=1), "unread")
    data = bytearray(frame * requests)
    for i in range(requests):  # correlation ids 0, 1, ... (after the size, api key and version)
        struct.pack_into(">i", data, i * len(frame) + 8, i)
    view = memoryview(data)
    with broker.client() as c:
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 16)
        c.sock.setblocking(False)
        written, stalled_since = 0, None
        while written < len(data) and (stalled_since is None or time.monotonic() - stalled_since < 1):
            try:
                written += c.sock.send(view[written:written + 65536])
                stalled_since = None
            except BlockingIOError:
                stalled_since = stalled_since or time.monotonic()
                time.sleep(0.01)
        assert written < len(data), "the broker read every request of a client that reads no answer"
        [connection] = broker.server._connections
        # the bound, and the answers of the requests read before it was reached (a read frame's worth each)
        assert connection.writer.transport.get_write_buffer_size() <= MAX_UNSENT_BYTES + MAX_ANSWERS_LATER * len(frame)
        c.sock.settimeout(120)  # the rest of ~19 MB of requests
        answered: list[int] = []
        reader = threading.Thread(target=lambda: answered.extend(
            struct.unpack(">i", c.read_frame()[:4])[0] for _ in range(requests)))
        reader.start()
        c.sock.sendall(view[written:])
        reader.join(120)
        assert not reader.is_alive()
    assert answered == list(range(requests))
    with broker.client() as c:
        assert c.request(latest_request(topic)).topics[0].partitions[0].offset == requests


def test_a_request_to_two_topics_one_denied_is_answered_for_both(tmp_path):
    """The authorizer merges its refusals into the handler's answer, which a directory root makes
    after its appends: the one topic is appended and the other refused, in one answer, and the
    connection goes on."""
    from topiclake.broker.security.config import SecurityConfig
    from topiclake.security.acls import AclBinding, Operation, PatternType, Permission, ResourceType

    broker = InProcessBroker(tmp_path / "data", security=SecurityConfig(authorizer="acl")).start()
    try:
        anyone = ("User:ANONYMOUS", "*")
        broker.context.security.acls.add([
            AclBinding(ResourceType.TOPIC, "*", PatternType.LITERAL, *anyone, Operation.ALL, Permission.ALLOW),
            AclBinding(ResourceType.TOPIC, "closed", PatternType.LITERAL, *anyone, Operation.WRITE, Permission.DENY)])
        broker.create_topic("open")
        broker.create_topic("closed")
        with broker.client() as c:
            answered = produce_many(c, {("open", 0): batch([b"in"]), ("closed", 0): batch([b"out"])})
            assert {key: (p.error_code, p.base_offset) for key, p in answered.items()} == {
                ("open", 0): (ErrorCode.none, 0), ("closed", 0): (ErrorCode.topic_authorization_failed, -1)}
            assert [v for _o, v in values_of(fetch(c, "open", 0).records)] == [b"in"]
    finally:
        broker.stop()


def test_a_stop_cut_short_after_the_client_half_closed_logs_no_error(tmp_path, caplog, monkeypatch):
    """The client has sent its requests and closed its side: the connection waits for its answers
    due when the stop's grace runs out. The queued appends still run, in order; nothing leaks as an
    unhandled error (the connection's task was cancelled while it waited)."""
    from topiclake.broker import server

    monkeypatch.setattr(server, "SHUTDOWN_GRACE_S", 0.5)
    caplog.set_level(logging.WARNING)
    broker = InProcessBroker(tmp_path / "data").start()
    broker.create_topic("half")
    with broker.client() as c:
        release = threading.Event()
        holding = broker.context.partitions.io.submit(release.wait, 10)
        send_all(c, [produce_request("half", batch([f"h{i}".encode()])) for i in range(5)])
        time.sleep(0.3)
        c.sock.shutdown(socket.SHUT_WR)  # EOF: the connection stops reading and waits for its answers
        time.sleep(0.3)
        stopping = threading.Thread(target=broker.stop)
        stopping.start()
        time.sleep(1.0)  # past the grace
        release.set()
        holding.result(10)
        stopping.join(30)
        assert not stopping.is_alive()
    stored = values_after_restart(tmp_path / "data", "half")
    assert stored == [f"h{i}".encode() for i in range(5)]
    unhandled = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.name == "asyncio"]
    assert unhandled == []


def test_an_unknown_apiversions_version_is_answered_after_the_produces_before_it(broker):
    """KIP-511's answer (v0 with our versions) keeps the request order like any other."""
    import struct

    broker.create_topic("before-versions")
    unknown_versions = struct.pack(">hhih", 18, 99, 3, 0)  # ApiVersions v99, correlation 3, empty client id
    with broker.client() as c:
        release = threading.Event()
        holding = broker.context.partitions.io.submit(release.wait, 10)
        send_all(c, [produce_request("before-versions", batch([f"v{i}".encode()])) for i in range(3)])
        c.send_raw(struct.pack(">i", len(unknown_versions)) + unknown_versions)
        time.sleep(0.3)
        release.set()
        holding.result(10)
        assert [struct.unpack(">i", c.read_frame()[:4])[0] for _ in range(4)] == [0, 1, 2, 3]


def test_one_list_offsets_over_many_partitions_answers_each(broker):
    """A consumer resetting every partition asks for all of them in one ListOffsets (looked up in
    one pass on the writer thread): each gets its own answer, a partition that does not exist is
    refused alone, and a topic named twice is answered twice."""
    broker.create_topic("many-offsets", partitions=50)
    with broker.client() as c:
        for i in range(0, 50, 5):
            for n in range(i // 5 + 1):
                produce(c, "many-offsets", batch([f"{i}-{n}".encode()], ts=1_000 + n), partition=i)

        def asked(*specs: tuple[int, int]):
            return lo_req.ListOffsetsTopic(name="many-offsets", partitions=tuple(
                lo_req.ListOffsetsPartition(partition_index=i, current_leader_epoch=-1, timestamp=ts) for i, ts in specs))

        latest_all = asked(*((i, -1) for i in range(51)))  # 50: no such partition
        by_time = asked((5, 1_001), (10, -2), (15, -3))
        answer = c.request(lo_req.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(latest_all, by_time)))
    first, second = answer.topics
    assert [(p.partition_index, p.error_code, p.offset) for p in first.partitions] == \
        [(i, ErrorCode.none, i // 5 + 1 if i % 5 == 0 else 0) for i in range(50)] + \
        [(50, ErrorCode.unknown_topic_or_partition, -1)]
    # by time: the first record at or after it; EARLIEST; MAX_TIMESTAMP: the newest record's
    assert [(p.partition_index, p.offset, p.timestamp) for p in second.partitions] == \
        [(5, 1, 1_001), (10, 0, -1), (15, 3, 1_003)]
