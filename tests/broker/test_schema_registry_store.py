"""The broker's registry store: appends through the partition layer, refused when the log moved
under the registry; records produced to `_schemas` by any Kafka client are replayed too."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Producer

from topiclake.broker.schema_registry import _append
from topiclake.registry import records as rec
from topiclake.registry.config import RegistryConfig
from topiclake.registry.errors import StoreConflict
from topiclake.registry.records import SchemaValue
from topiclake.segments.batch import Record, build_batch

from tests.support.registry_http import RegistryHTTP
from tests.support.in_process_broker import InProcessBroker


@pytest.fixture
def registry_in_process(tmp_path):
    b = InProcessBroker(tmp_path / "data", registry=RegistryConfig(listen="127.0.0.1:0")).start()
    yield b
    b.stop()


def _run(broker, coro):
    return asyncio.run_coroutine_threadsafe(coro, broker.loop).result(30)


def test_records_produced_by_a_kafka_client_are_replayed(registry_in_process):
    http = RegistryHTTP(registry_in_process.server.registry_url)
    key, value = rec.schema_record(SchemaValue("external", 1, 500, '"string"')).encode()
    producer = Producer({"bootstrap.servers": registry_in_process.bootstrap, "acks": "all"})
    producer.produce("_schemas", key=key, value=value)
    assert producer.flush(30) == 0
    assert http.ok("GET", "/subjects/external/versions/1")["id"] == 500
    assert http.ok("POST", "/subjects/mine/versions", {"schema": '"long"'}) == {"id": 501}  # after the external id


def test_an_append_is_refused_when_the_log_moved(registry_in_process):
    store = registry_in_process.server.registry.store
    part = store.part
    end = part.log_end_offset
    batch = build_batch([Record(0, 0, *rec.mode_record(None, "READONLY").encode())], base_offset=0)
    with pytest.raises(StoreConflict):
        _run(registry_in_process, registry_in_process.context.partitions.run_io(_append, part, batch, end + 1))
    assert part.log_end_offset == end  # nothing written
    assert _run(registry_in_process, registry_in_process.context.partitions.run_io(_append, part, batch, end)) == end
