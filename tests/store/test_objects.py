"""ObjectStore against a real versitygw: conditional writes (one winner among racing creators,
If-Match), ranges, paginated listings, deletes, typed one-line errors, a server killed -9 and
restarted, and the metrics every call leaves."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

import pytest

from tests.support.s3 import VersityGW
from topiclake.store.errors import (AccessDenied, InvalidKey, ObjectExists, ObjectNotFound, ObjectStoreError,
                                    PreconditionFailed, StoreUnavailable)
from topiclake.store.metrics import ObjectStoreMetrics
from topiclake.store.objects import CREATE, OVERWRITE, IfMatch, ObjectStore
from topiclake.store.root import parse_root


@pytest.fixture
def store(s3_root) -> ObjectStore:
    return ObjectStore(s3_root.root, metrics=ObjectStoreMetrics())


def test_put_get_head(store):
    etag = store.put("log/t-0/00000000000000000000.log", b"segment bytes")
    assert store.get("log/t-0/00000000000000000000.log") == b"segment bytes"
    info = store.head("log/t-0/00000000000000000000.log")
    assert (info.key, info.size, info.etag) == ("log/t-0/00000000000000000000.log", 13, etag)
    assert info.last_modified.tzinfo is not None
    assert store.head("log/t-0/missing.log") is None


def test_keys_stay_under_the_root_prefix(s3_root, s3_server):
    store = ObjectStore(s3_root.root)
    store.put("a/x", b"1")
    assert (s3_server.data_dir / s3_root.root.bucket / "data" / "a" / "x").read_bytes() == b"1"
    sibling = ObjectStore(dataclasses.replace(s3_root.root, prefix="other"))
    assert sibling.head("a/x") is None and list(sibling.list()) == []
    for bad in ("../x", "a/../../x", "", "a//b", "/a"):
        with pytest.raises(InvalidKey):
            store.put(bad, b"escape")
    assert [i.key for i in store.list()] == ["a/x"]


def test_create_once_sixteen_racers_one_winner(s3_root):
    racers = 16
    barrier = threading.Barrier(racers)
    outcomes: dict[int, str] = {}

    def race(n: int) -> None:
        store = ObjectStore(s3_root.root)  # a client of its own, as another process would have
        barrier.wait()
        try:
            store.put("cluster/meta.json", f"racer {n}".encode(), mode=CREATE)
            outcomes[n] = "won"
        except ObjectExists:
            outcomes[n] = "lost"

    threads = [threading.Thread(target=race, args=(n,)) for n in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    winners = [n for n, outcome in outcomes.items() if outcome == "won"]
    assert len(outcomes) == racers and len(winners) == 1, outcomes
    assert ObjectStore(s3_root.root).get("cluster/meta.json") == f"racer {winners[0]}".encode()


def test_if_match_writes_only_over_the_version_read(store):
    first = store.put("topics/t.json", b"v1", mode=CREATE)
    second = store.put("topics/t.json", b"v2", mode=IfMatch(first))
    assert second != first and store.get("topics/t.json") == b"v2"
    with pytest.raises(PreconditionFailed) as caught:
        store.put("topics/t.json", b"v3 from a stale reader", mode=IfMatch(first))
    assert store.get("topics/t.json") == b"v2"
    assert caught.value.reason == "precondition"
    with pytest.raises(ObjectExists):
        store.put("topics/t.json", b"again", mode=CREATE)
    store.put("topics/t.json", b"v4", mode=OVERWRITE)
    assert store.get("topics/t.json") == b"v4"


def test_ranges(store):
    data = bytes(range(256)) * 40
    store.put("blob", data)
    assert store.get_range("blob", 0, 10) == data[0:10]
    assert store.get_range("blob", 1000, 5000) == data[1000:5000]
    assert store.get_range("blob", len(data) - 3, len(data)) == data[-3:]
    with pytest.raises(ObjectNotFound):
        store.get_range("missing", 0, 1)


def test_list_pages_through_more_than_a_thousand_keys(store):
    keys = [f"log/t-{p}/{n:020d}.log" for p in range(2) for n in range(650)]

    async def put_all():
        await asyncio.gather(*(store.put_async(k, k.encode()) for k in keys))

    asyncio.run(put_all())
    store.put("logs-elsewhere/x", b"not under log/")
    listed = [info.key for info in store.list("log")]
    assert sorted(listed) == sorted(keys) and len(listed) == 1300
    assert sorted(info.key for info in store.list("log/t-1")) == sorted(k for k in keys if k.startswith("log/t-1/"))
    assert len(list(store.list())) == 1301
    assert store.metrics.snapshot()["list"]["requests"] == 2 + 1 + 2, "one request per page of up to 1000 keys"


def test_list_dir_one_level(store):
    for key in ("tables/a/_delta_log/0.json", "tables/a/part-0.parquet", "tables/b/x", "tables/top.txt"):
        store.put(key, b".")
    listing = store.list_dir("tables")
    assert sorted(listing.prefixes) == ["tables/a", "tables/b"]
    assert store.list_dir("tables/") == listing
    assert [o.key for o in listing.objects] == ["tables/top.txt"]
    top = store.list_dir()
    assert top.prefixes == ["tables"] and top.objects == []
    assert store.list_dir("nothing-here").prefixes == [] and store.list_dir("nothing-here").objects == []


def test_delete(store):
    store.put("x/y", b"1")
    store.delete("x/y")
    assert store.head("x/y") is None
    store.delete("x/y")  # absent is fine
    assert store.metrics.snapshot()["delete"]["errors"] == {}


def test_async_twins(store):
    async def run():
        etag = await store.put_async("a/b", b"async bytes", mode=CREATE)
        with pytest.raises(ObjectExists):
            await store.put_async("a/b", b"again", mode=CREATE)
        assert await store.get_async("a/b") == b"async bytes"
        assert await store.get_range_async("a/b", 6, 11) == b"bytes"
        assert (await store.head_async("a/b")).etag == etag
        assert [i.key async for i in store.list_async("a")] == ["a/b"]
        await store.delete_async("a/b")
        assert await store.head_async("a/b") is None
        with pytest.raises(ObjectNotFound):
            await store.get_async("a/b")

    asyncio.run(run())


def test_errors_are_one_typed_line(s3_root, s3_server):
    store = ObjectStore(s3_root.root)
    with pytest.raises(ObjectNotFound) as missing:
        store.get("no/such/key")
    wrong_secret = dataclasses.replace(s3_root.root, credentials=dataclasses.replace(
        s3_root.root.credentials, secret_access_key="not-the-secret"))
    with pytest.raises(AccessDenied) as denied:
        ObjectStore(wrong_secret).get("no/such/key")
    with pytest.raises(ObjectStoreError) as no_bucket:
        ObjectStore(parse_root("s3://no-such-bucket-here/data", env=s3_server.env())).put("k", b"1")
    with pytest.raises(InvalidKey) as invalid:
        store.get("../escape")
    for caught in (missing, denied, no_bucket, invalid):
        message = str(caught.value)
        assert "\n" not in message and "<?xml" not in message and "Debug source" not in message, message
        assert message.startswith("object store get s3://") or message.startswith("object store put s3://")
        assert "not-the-secret" not in message
    assert str(missing.value) == (f"object store get {s3_root.root.uri('no/such/key')}: no such object: "
                                  "404 Not Found (NoSuchKey: The specified key does not exist.)")
    assert "bucket does not exist" in str(no_bucket.value)
    assert "SignatureDoesNotMatch" in str(denied.value)


def test_killed_server_is_unavailable_then_serves_the_same_data_after_restart(tmp_path):
    server = VersityGW(tmp_path).start()
    try:
        root = parse_root(f"s3://{server.create_bucket()}/data", env=server.env())
        metrics = ObjectStoreMetrics()
        store = ObjectStore(root, metrics=metrics, retry_timeout_s=2.0)
        written = {f"log/t-0/{n:020d}.log": bytes([n]) * 1000 for n in range(20)}
        for key, data in written.items():
            store.put(key, data, mode=CREATE)
        port = server.port

        server.kill9()
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as caught:
            store.get("log/t-0/00000000000000000000.log")
        assert time.monotonic() - started < 10, "the client gives up within its retry budget"
        assert "connection refused" in str(caught.value) and "\n" not in str(caught.value)
        with pytest.raises(StoreUnavailable):
            store.put("log/t-0/new.log", b"x", mode=CREATE)
        assert metrics.snapshot()["get"]["errors"] == {"unavailable": 1}

        server.restart()
        assert server.port == port
        assert {info.key: store.get(info.key) for info in store.list("log")} == written
        store.put("log/t-0/new.log", b"after the restart", mode=CREATE)
        assert store.get("log/t-0/new.log") == b"after the restart"
    finally:
        server.stop()


def test_metrics_count_requests_bytes_and_errors(store):
    store.put("m/a", b"12345", mode=CREATE)
    with pytest.raises(ObjectExists):
        store.put("m/a", b"123", mode=CREATE)
    assert store.get("m/a") == b"12345"
    assert store.get_range("m/a", 1, 3) == b"23"
    store.head("m/a")
    store.head("m/missing")
    with pytest.raises(ObjectNotFound):
        store.get("m/missing")
    list(store.list("m"))
    store.delete("m/a")

    snap = store.metrics.snapshot()
    assert snap["put"]["requests"] == 2 and snap["put"]["bytes_written"] == 5 and snap["put"]["errors"] == {"exists": 1}
    assert snap["get"]["requests"] == 2 and snap["get"]["bytes_read"] == 5 and snap["get"]["errors"] == {"not_found": 1}
    assert snap["get_range"]["bytes_read"] == 2
    assert snap["head"] == {**snap["head"], "requests": 2, "errors": {}}, "a missing object is an answer to head"
    assert (snap["list"]["requests"], snap["delete"]["requests"]) == (1, 1)
    assert all(s["seconds"] > 0 for s in snap.values() if s["requests"])

    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(store.metrics.collector())
    text = generate_latest(registry).decode()
    assert 'topiclake_object_store_requests_total{operation="put"} 2.0' in text
    assert 'topiclake_object_store_errors_total{operation="put",reason="exists"} 1.0' in text
    assert 'topiclake_object_store_bytes_total{direction="written",operation="put"} 5.0' in text
    assert 'topiclake_object_store_bytes_total{direction="read",operation="get"} 5.0' in text
    assert 'topiclake_object_store_request_seconds_count{operation="get"} 2.0' in text
    assert 'topiclake_object_store_request_seconds_bucket{le="+Inf",operation="head"} 2.0' in text


def test_stores_count_into_the_process_metrics_by_default(s3_root):
    from topiclake.store.metrics import process_metrics

    before = process_metrics().snapshot()["put"]["requests"]
    ObjectStore(s3_root.root).put("k", b"1")
    assert process_metrics().snapshot()["put"]["requests"] == before + 1
