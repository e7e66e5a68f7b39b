"""KIP-227 incremental fetch sessions over a real socket: raw Fetch requests (v12 by topic name, v13+
by topic id) checking which partitions an answer names, the session errors, closing and the
cache's bound and eviction (lib/broker/fetch_sessions.py)."""

from __future__ import annotations

import datetime
import threading
import time

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v7 import request as v7

from topiclake.broker.security.config import SecurityConfig
from topiclake.security.acls import AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType
from tests.support import txn_wire
from tests.support.in_process_broker import InProcessBroker
from tests.support.wire import batch, produce, session_fetch as fetch, values_of


def test_an_incremental_fetch_names_only_partitions_with_something_new(broker):
    broker.create_topic("s", partitions=4)
    with broker.client() as c:
        for p in (0, 1):
            produce(c, "s", batch([b"p%d" % p]), partition=p)
        full, parts = fetch(c, "s", {p: 0 for p in range(4)}, epoch=0)
        assert full.error_code == ErrorCode.none and full.session_id > 0
        assert sorted(parts) == [0, 1, 2, 3]  # a full answer names every partition
        assert values_of(parts[0].records) == [(0, b"p0")] and parts[2].high_watermark == 0
        sid = full.session_id

        # The client moves partitions 0 and 1 to offset 1; nothing is new anywhere.
        nothing, parts = fetch(c, "s", {0: 1, 1: 1}, session_id=sid, epoch=1)
        assert nothing.error_code == ErrorCode.none and nothing.session_id == sid and parts == {}

        # Records on partition 2 (fetched at 0 by the session, not named in the request): only it answers.
        produce(c, "s", batch([b"p2"]), partition=2)
        _, parts = fetch(c, "s", {}, session_id=sid, epoch=2)
        assert list(parts) == [2] and values_of(parts[2].records) == [(0, b"p2")]

        # Partition 3 forgotten: its records are no longer read; partition 2 moved on to 1.
        produce(c, "s", batch([b"p3"]), partition=3)
        _, parts = fetch(c, "s", {2: 1}, session_id=sid, epoch=3, forget=[3])
        assert parts == {}
        # A partition added to the session is answered (its high watermark was never sent), an
        # error always is: partition 9 does not exist.
        _, parts = fetch(c, "s", {3: 0, 9: 0}, session_id=sid, epoch=4)
        assert sorted(parts) == [3, 9] and values_of(parts[3].records) == [(0, b"p3")]
        assert parts[9].error_code == ErrorCode.unknown_topic_or_partition
        _, parts = fetch(c, "s", {3: 1}, session_id=sid, epoch=5)
        assert list(parts) == [9]  # still wrong: named again

        # The session's reader waits for an append to any of its partitions, as a full fetch does.
        _, parts = fetch(c, "s", {}, session_id=sid, epoch=6, forget=[9])
        assert parts == {}
        started = time.monotonic()
        _, parts = fetch(c, "s", {}, session_id=sid, epoch=7, max_wait_ms=300)
        assert parts == {} and time.monotonic() - started >= 0.25


def test_an_append_to_a_quiet_partition_ends_the_long_poll(broker):
    """The session's idle partitions get no read, only a watch: an append to one during the wait
    answers the fetch then, not at max_wait."""
    broker.create_topic("q", partitions=50)
    with broker.client() as c, broker.client() as producer:
        sid = fetch(c, "q", {p: 0 for p in range(50)}, epoch=0)[0].session_id
        assert fetch(c, "q", {}, session_id=sid, epoch=1)[1] == {}
        timer = threading.Timer(0.5, lambda: produce(producer, "q", batch([b"late"]), partition=37))
        timer.start()
        started = time.monotonic()
        _, parts = fetch(c, "q", {}, session_id=sid, epoch=2, max_wait_ms=10_000)
        waited = time.monotonic() - started
        timer.join()
        assert list(parts) == [37] and values_of(parts[37].records) == [(0, b"late")]
        assert 0.4 < waited < 5


def test_a_read_committed_session_hears_of_a_transaction_when_it_ends(broker):
    """read_committed: an open transaction's records move the high watermark (answered once, no
    records: the last stable offset holds), then nothing until the commit lets them through."""
    broker.create_topic("rc", partitions=2)
    with broker.client() as c:
        sid = fetch(c, "rc", {0: 0, 1: 0}, epoch=0, committed=True)[0].session_id
        _code, pid, producer_epoch = txn_wire.init_producer_id(c, "rc-txn")
        txn_wire.add_partitions(c, "rc-txn", pid, producer_epoch, "rc", [0])
        txn_wire.produce(c, "rc-txn", "rc", txn_wire.txn_batch([b"t"], pid, producer_epoch, 0))
        _, parts = fetch(c, "rc", {}, session_id=sid, epoch=1, committed=True)
        assert list(parts) == [0] and parts[0].high_watermark == 1 and parts[0].last_stable_offset == 0
        assert not parts[0].records
        assert fetch(c, "rc", {}, session_id=sid, epoch=2, committed=True)[1] == {}
        assert txn_wire.end_txn(c, "rc-txn", pid, producer_epoch, True) == ErrorCode.none
        _, parts = fetch(c, "rc", {}, session_id=sid, epoch=3, committed=True)
        assert list(parts) == [0] and parts[0].last_stable_offset == 2 and values_of(parts[0].records)[0] == (0, b"t")


def test_session_errors_and_closing(broker):
    broker.create_topic("e", partitions=2)
    with broker.client() as c:
        produce(c, "e", batch([b"x"]), partition=0)
        response, _ = fetch(c, "e", {0: 0, 1: 0}, session_id=12345, epoch=3)
        assert response.error_code == ErrorCode.fetch_session_id_not_found
        assert response.session_id == 0 and response.responses == ()
        sid = fetch(c, "e", {0: 0, 1: 0}, epoch=0)[0].session_id
        for wrong in (2, 0x7FFFFFFF):  # ahead of the session, and far off
            response, _ = fetch(c, "e", {}, session_id=sid, epoch=wrong)
            assert response.error_code == ErrorCode.invalid_fetch_session_epoch and response.responses == ()
        assert fetch(c, "e", {}, session_id=sid, epoch=1)[0].error_code == ErrorCode.none
        # An epoch used twice (a retried request) is refused: the session moved on.
        assert fetch(c, "e", {}, session_id=sid, epoch=1)[0].error_code == ErrorCode.invalid_fetch_session_epoch

        # Epoch 0 naming the session closes it and opens another.
        renewed = fetch(c, "e", {0: 0, 1: 0}, session_id=sid, epoch=0)[0]
        assert renewed.session_id not in (0, sid)
        assert fetch(c, "e", {}, session_id=sid, epoch=2)[0].error_code == ErrorCode.fetch_session_id_not_found
        # Epoch -1 closes it and is answered sessionless (every partition, session id 0).
        closed, parts = fetch(c, "e", {0: 0, 1: 0}, session_id=renewed.session_id, epoch=-1)
        assert closed.session_id == 0 and sorted(parts) == [0, 1]
        assert fetch(c, "e", {}, session_id=renewed.session_id, epoch=1)[0].error_code == \
            ErrorCode.fetch_session_id_not_found

        # Sessionless fetches (librdkafka's) name every partition every time.
        for _ in range(2):
            response, parts = fetch(c, "e", {0: 1, 1: 0})
            assert response.session_id == 0 and sorted(parts) == [0, 1]

        # Everything forgotten: the session is gone.
        sid = fetch(c, "e", {0: 0}, epoch=0)[0].session_id
        emptied, _ = fetch(c, "e", {}, session_id=sid, epoch=1, forget=[0])
        assert emptied.error_code == ErrorCode.none and emptied.session_id == 0
        assert fetch(c, "e", {}, session_id=sid, epoch=2)[0].error_code == ErrorCode.fetch_session_id_not_found


@pytest.mark.parametrize("schema", ["v7", "v13"])
def test_sessions_of_v7_names_and_of_v13_topic_ids(broker, schema):
    """Fetch v7 and v8 open sessions too, with no current_leader_epoch in their partitions (v9+);
    v13+ keys them by topic id, and such a session is not asked by name."""
    topic_id = broker.create_topic(f"t-{schema}", partitions=2).topic_id
    how = {"by_name": v7} if schema == "v7" else {"topic_id": topic_id}
    with broker.client() as c:
        produce(c, f"t-{schema}", batch([b"a", b"b"]), partition=1)
        full, parts = fetch(c, f"t-{schema}", {0: 0, 1: 0}, epoch=0, **how)
        assert full.session_id > 0 and sorted(parts) == [0, 1]
        _, parts = fetch(c, f"t-{schema}", {1: 2}, session_id=full.session_id, epoch=1, **how)
        assert parts == {}
        produce(c, f"t-{schema}", batch([b"c"]), partition=0)
        response, parts = fetch(c, f"t-{schema}", {}, session_id=full.session_id, epoch=2, **how)
        assert list(parts) == [0] and values_of(parts[0].records) == [(0, b"c")]
        if schema == "v13":
            assert response.responses[0].topic_id == topic_id
            # The same session asked by name (v12): refused.
            mixed, _ = fetch(c, f"t-{schema}", {}, session_id=full.session_id, epoch=3)
            assert mixed.error_code == ErrorCode.fetch_session_topic_id_error and mixed.responses == ()


@pytest.fixture
def one_slot(tmp_path):
    b = InProcessBroker(tmp_path / "data", max_incremental_fetch_session_cache_slots=1,
                        min_incremental_fetch_session_eviction_ms=400).start()
    yield b
    b.stop()


def test_a_full_cache_evicts_only_idle_or_smaller_mature_sessions(one_slot):
    one_slot.create_topic("c", partitions=3)
    with one_slot.client() as c:
        first = fetch(c, "c", {0: 0}, epoch=0)[0].session_id
        assert first > 0
        # No room: a new session is not made (the client stays sessionless) and the first one lives.
        assert fetch(c, "c", {0: 0, 1: 0}, epoch=0)[0].session_id == 0
        assert fetch(c, "c", {}, session_id=first, epoch=1)[0].error_code == ErrorCode.none
        time.sleep(0.5)
        # The first is now mature but was just used: a bigger session replaces it, an equal one does not.
        assert fetch(c, "c", {}, session_id=first, epoch=2)[0].error_code == ErrorCode.none
        assert fetch(c, "c", {1: 0}, epoch=0)[0].session_id == 0
        bigger = fetch(c, "c", {0: 0, 1: 0}, epoch=0)[0].session_id
        assert bigger > 0
        assert fetch(c, "c", {}, session_id=first, epoch=3)[0].error_code == ErrorCode.fetch_session_id_not_found
        # Idle longer than the eviction time: any new session replaces it, however small.
        time.sleep(0.5)
        smaller = fetch(c, "c", {2: 0}, epoch=0)[0].session_id
        assert smaller > 0
        assert fetch(c, "c", {}, session_id=bigger, epoch=1)[0].error_code == ErrorCode.fetch_session_id_not_found
        assert fetch(c, "c", {}, session_id=smaller, epoch=1)[0].error_code == ErrorCode.none


def test_no_slots_means_no_sessions(tmp_path):
    b = InProcessBroker(tmp_path / "data", max_incremental_fetch_session_cache_slots=0).start()
    try:
        b.create_topic("n")
        with b.client() as c:
            response, parts = fetch(c, "n", {0: 0}, epoch=0)
            assert response.session_id == 0 and list(parts) == [0]
    finally:
        b.stop()


ANYONE = ("User:ANONYMOUS", "*")


@pytest.fixture
def open_acl_broker(tmp_path):
    """A broker with the ACL authorizer, every topic open to anyone (tests take READ away)."""
    b = InProcessBroker(tmp_path / "data", security=SecurityConfig(authorizer="acl")).start()
    try:
        b.context.security.acls.add([AclBinding(ResourceType.TOPIC, "*", PatternType.LITERAL, *ANYONE,
                                                Operation.ALL, Permission.ALLOW)])
        yield b
    finally:
        b.stop()


def deny_read(b, topic: str) -> None:
    b.context.security.acls.add([AclBinding(ResourceType.TOPIC, topic, PatternType.LITERAL, *ANYONE,
                                            Operation.READ, Permission.DENY)])


def allow_read_again(b, topic: str) -> None:
    removed = b.context.security.acls.remove([AclFilter(ResourceType.TOPIC, topic, PatternType.LITERAL,
                                                        operation=Operation.READ, permission=Permission.DENY)])
    assert len(removed[0]) == 1


def test_an_authorizer_checks_the_session_s_topics_on_every_fetch(open_acl_broker):
    """An incremental fetch names no topic: the ACL policy still lets the handler run, which checks
    the session's topics; READ taken away mid-session is answered TOPIC_AUTHORIZATION_FAILED."""
    b = open_acl_broker
    b.create_topic("secret")
    with b.client() as c:
        produce(c, "secret", batch([b"a"]))
        full, parts = fetch(c, "secret", {0: 0}, epoch=0)
        assert full.session_id > 0 and values_of(parts[0].records) == [(0, b"a")]
        kept, parts = fetch(c, "secret", {0: 1}, session_id=full.session_id, epoch=1)
        assert kept.error_code == ErrorCode.none and kept.session_id == full.session_id and parts == {}

        deny_read(b, "secret")
        produce(c, "secret", batch([b"b"]))
        refused, parts = fetch(c, "secret", {}, session_id=full.session_id, epoch=2)
        assert refused.session_id == full.session_id
        assert parts[0].error_code == ErrorCode.topic_authorization_failed and not parts[0].records
        # A new session is answered the same, and holds the topic (the next test).
        _, parts = fetch(c, "secret", {0: 1}, epoch=0)
        assert parts[0].error_code == ErrorCode.topic_authorization_failed and not parts[0].records


def test_a_topic_refused_when_the_session_opens_stays_in_it_as_kafka_s(open_acl_broker):
    """Kafka adds every partition a full request names to the new session, those the client may not
    read too, and answers them refused on each fetch. A Java consumer then stops naming them: once
    READ is granted again, an incremental fetch naming nothing must read them. A denied topic named
    again in an incremental request is answered once, not twice."""
    b = open_acl_broker
    b.create_topic("secret")
    b.create_topic("open")
    deny_read(b, "secret")
    with b.client() as c:
        produce(c, "secret", batch([b"a"]))
        full, parts = fetch(c, "secret", {0: 0}, epoch=0)
        assert full.session_id > 0
        assert parts[0].error_code == ErrorCode.topic_authorization_failed and not parts[0].records
        sid = full.session_id
        again = c.request(v7.FetchRequest(
            max_wait=datetime.timedelta(0), min_bytes=1, isolation_level=0, session_id=sid, session_epoch=1,
            topics=(v7.FetchTopic(topic="secret", partitions=(v7.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),), forgotten_topics_data=()))
        rows = [(t.topic, p.partition_index, p.error_code) for t in again.responses for p in t.partitions]
        assert rows == [("secret", 0, ErrorCode.topic_authorization_failed)]

        allow_read_again(b, "secret")
        granted, parts = fetch(c, "open", {}, session_id=sid, epoch=2)
        assert granted.session_id == sid
        assert parts[0].error_code == ErrorCode.none and values_of(parts[0].records) == [(0, b"a")]


def test_a_session_topic_refused_is_answered_but_does_not_end_the_wait(open_acl_broker):
    """As Kafka leaves unauthorized partitions out of a fetch's wait: a session holding a topic
    the client may no longer read still long-polls its other partitions (it would spin otherwise)."""
    b = open_acl_broker
    b.create_topic("secret")
    b.create_topic("open")
    with b.client() as c:
        full, _ = fetch(c, "secret", {0: 0}, epoch=0)
        fetch(c, "open", {0: 0}, session_id=full.session_id, epoch=1)  # the session holds both
        deny_read(b, "secret")
        started = time.monotonic()
        answer, parts = fetch(c, "open", {}, session_id=full.session_id, epoch=2, max_wait_ms=800)
        waited = time.monotonic() - started
    assert answer.error_code == ErrorCode.none
    assert [p.error_code for p in parts.values()] == [ErrorCode.topic_authorization_failed]
    assert waited >= 0.6, f"answered after {waited:.2f} s: the refused topic ended the wait"


def test_the_cache_holds_a_bounded_number_of_partitions(broker):
    """A client naming ever more partitions (of topics that need not exist) cannot grow the cache
    without bound: past it, a new session is not made and a growing one is closed; the client
    reads on sessionless."""
    broker.create_topic("bound", partitions=2)
    cache = broker.context.fetch_sessions
    cache.max_partitions = 4
    with broker.client() as c:
        produce(c, "bound", batch([b"x"]), partition=1)
        first = fetch(c, "bound", {0: 0, 1: 0}, epoch=0)[0].session_id
        assert first > 0
        # Two more, of an unknown topic: at the bound, kept.
        grown, _ = fetch(c, "nowhere", {0: 0, 1: 0}, session_id=first, epoch=1)
        assert grown.error_code == ErrorCode.none
        assert {p.error_code for t in grown.responses if t.topic == "nowhere"
                for p in t.partitions} == {ErrorCode.unknown_topic_or_partition}
        # A second session of three would pass it: none is made, the answer is a sessionless one.
        second, parts = fetch(c, "bound", {0: 0, 1: 0}, epoch=0)
        assert second.session_id == 0 and values_of(parts[1].records) == [(0, b"x")]
        # One more partition in the first session passes it: the session is closed.
        closed, parts = fetch(c, "nowhere", {2: 0}, session_id=first, epoch=2)
        assert closed.error_code == ErrorCode.fetch_session_id_not_found and parts == {}
        assert len(cache) == 0
        # Room again: a new session holds what the old one held.
        assert fetch(c, "bound", {0: 0, 1: 0}, epoch=0)[0].session_id > 0


def test_idle_sessions_give_way_to_the_partition_bound(broker):
    broker.create_topic("idle", partitions=3)
    cache = broker.context.fetch_sessions
    cache.max_partitions, cache.eviction_ms = 3, 300
    with broker.client() as c:
        abandoned = fetch(c, "idle", {0: 0, 1: 0}, epoch=0)[0].session_id
        assert abandoned > 0
        assert fetch(c, "idle", {2: 0, 1: 0}, epoch=0)[0].session_id == 0  # the first is in use: no room
        time.sleep(0.4)
        taken = fetch(c, "idle", {2: 0, 1: 0}, epoch=0)[0].session_id
        assert taken > 0 and len(cache) == 1
        assert fetch(c, "idle", {}, session_id=abandoned, epoch=1)[0].error_code == ErrorCode.fetch_session_id_not_found


def test_under_an_authorizer_a_session_closes_and_never_tells_what_exists(open_acl_broker):
    """A refused name is refused before its existence is looked at, on incremental fetches too (a
    client without READ must not learn whether a topic exists); a fetch of epoch -1 naming no topic
    (a Java consumer's close) reaches the cache and closes the session."""
    b = open_acl_broker
    b.create_topic("real")
    deny_read(b, "real")
    deny_read(b, "ghost")
    with b.client() as c:
        full, _ = fetch(c, "real", {0: 0}, epoch=0)
        sid = full.session_id
        fetch(c, "ghost", {0: 0}, session_id=sid, epoch=1)
        answer, _ = fetch(c, "real", {}, session_id=sid, epoch=2, max_wait_ms=0)
        rows = {(t.topic, p.error_code) for t in answer.responses for p in t.partitions}
        assert rows == {("real", ErrorCode.topic_authorization_failed), ("ghost", ErrorCode.topic_authorization_failed)}
        cache = b.context.fetch_sessions
        assert len(cache) == 1
        closed, parts = fetch(c, "real", {}, session_id=sid, epoch=-1)
        assert closed.error_code == ErrorCode.none and parts == {} and len(cache) == 0
