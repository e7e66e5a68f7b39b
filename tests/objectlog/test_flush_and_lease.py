"""Flush objects created once whatever the bucket_store does (a lost response, the server killed and
back), and the single-broker lease on a real versitygw."""

from __future__ import annotations

import threading
import time

import pytest

from topiclake.objectlog.flush import FlushConflict, FlushTimedOut, create_once
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.lease import OWNER_KEY, LeaseLost, LeaseTimeout, Owner, OwnerLease
from topiclake.store.objects import ObjectStore
from topiclake.store.root import parse_root
from tests.support.s3 import VersityGW

from tests.support.bucket_batches import batches

KEY = PartitionKeys("t", 0).flush(0, 0)


def test_a_retry_whose_first_attempt_landed_counts_and_other_bytes_conflict(bucket_store):
    data = batches(0, 2, epoch=0)
    assert create_once(bucket_store, KEY, data, deadline=time.monotonic() + 5) is True
    assert create_once(bucket_store, KEY, data, deadline=time.monotonic() + 5) is False  # the same bytes: done
    with pytest.raises(FlushConflict):
        create_once(bucket_store, KEY, batches(0, 2, epoch=0, tag="other"), deadline=time.monotonic() + 5)
    assert bucket_store.get(KEY) == data


@pytest.fixture
def own_server(tmp_path):
    server = VersityGW(tmp_path / "s3").start()
    yield server
    server.stop()


def quick_store(server: VersityGW) -> ObjectStore:
    """A client that gives up on a dead server fast, so the flush's own retries are what is tested."""
    root = parse_root(f"s3://{server.create_bucket()}/data", env=server.env())
    return ObjectStore(root, connect_timeout_s=0.5, request_timeout_s=2, max_retries=0, retry_timeout_s=1)


def test_the_store_down_past_the_deadline_is_a_timeout_and_nothing_is_written(own_server):
    bucket_store = quick_store(own_server)
    own_server.kill9()
    started = time.monotonic()
    with pytest.raises(FlushTimedOut):
        create_once(bucket_store, KEY, batches(0, 2, epoch=0), deadline=started + 2)
    assert time.monotonic() - started < 6
    own_server.restart()
    assert bucket_store.head(KEY) is None


def test_the_store_killed_and_back_within_the_deadline_takes_the_same_object(own_server):
    bucket_store = quick_store(own_server)
    data = batches(0, 2, epoch=0)
    own_server.kill9()
    restarter = threading.Timer(1.5, own_server.restart)
    restarter.start()
    try:
        assert create_once(bucket_store, KEY, data, deadline=time.monotonic() + 20) is True
    finally:
        restarter.join()
    assert bucket_store.get(KEY) == data


def lease(bucket_store: ObjectStore, broker_id: int, lease_ms: int = 800) -> OwnerLease:
    return OwnerLease(bucket_store, broker_id=broker_id, host="127.0.0.1", port=9000 + broker_id, lease_ms=lease_ms,
                      poll_s=0.05)


def test_the_lease_is_taken_only_after_its_holder_stops_renewing(bucket_store):
    first = lease(bucket_store, 1)
    assert first.acquire(timeout_s=5).generation == 1 and first.previous is None
    second = lease(bucket_store, 2)
    stop = threading.Event()

    def renewing():
        while not stop.wait(first.lease_ms / 3000):
            first.renew()

    renewer = threading.Thread(target=renewing)
    renewer.start()
    try:
        with pytest.raises(LeaseTimeout, match="broker 1 at 127.0.0.1:9001"):
            second.acquire(timeout_s=2.5)  # three lease periods of renewals: never taken
    finally:
        stop.set()
        renewer.join()
    started = time.monotonic()
    owner = second.acquire(timeout_s=10)  # the first is "paused": not renewing any more
    assert time.monotonic() - started >= 0.8
    assert owner.broker_id == 2 and owner.generation == 2 and second.previous.broker_id == 1
    with pytest.raises(LeaseLost):  # the paused owner wakes up
        first.renew()
    first.release()  # not its lease any more: left alone
    assert Owner.from_json(bucket_store.get(OWNER_KEY)).broker_id == 2
    second.renew()
    second.release()
    assert bucket_store.head(OWNER_KEY) is None
    third = lease(bucket_store, 3, lease_ms=60_000)
    started = time.monotonic()
    assert third.acquire(timeout_s=5).generation == 1  # released: at once, no lease_ms wait
    assert time.monotonic() - started < 2


def test_of_two_brokers_waiting_for_an_expired_lease_exactly_one_takes_it(bucket_store):
    lease(bucket_store, 1).acquire(timeout_s=5)  # then never renewed
    contenders = [lease(bucket_store, 2), lease(bucket_store, 3)]
    outcomes: dict[int, object] = {}
    done = threading.Event()

    def take(contender):
        try:
            outcomes[contender.broker_id] = contender.acquire(timeout_s=3)
        except LeaseTimeout as exc:
            outcomes[contender.broker_id] = exc
            done.set()
            return
        while not done.wait(contender.lease_ms / 3000):  # the winner serves: it renews
            contender.renew()

    threads = [threading.Thread(target=take, args=(c,)) for c in contenders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    done.set()
    winners = [c for c in contenders if isinstance(outcomes.get(c.broker_id), Owner)]
    assert len(winners) == 1, outcomes
    assert winners[0].owner.generation == 2
    assert Owner.from_json(bucket_store.get(OWNER_KEY)).broker_id == winners[0].broker_id
