"""Fixtures shared by every test package."""

from __future__ import annotations

import json
import os
import logging
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.fenced_partition import build as build_fenced_partition
from tests.support.in_process_broker import InProcessBroker
from tests.support.kafka_tools import KafkaTools
from tests.support.lake import spark_session
from tests.support.paths import CONFORMANCE
from tests.support.registry_http import REGISTRY_ARGS, RegistryHTTP

if TYPE_CHECKING:
    from topiclake.store.root import S3Root

# py4j logs "closing down" from __del__ at interpreter exit, after pytest closed the streams.
logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture(autouse=True)
def _root_log_handlers_restored():
    """A CLI invoked in-process (CliRunner) may call logging.basicConfig with the runner's stream as
    the handler's; that stream is closed when the invocation ends, and a later test's warning would
    print "--- Logging error ---" into its own captured output. Each test starts with the handlers
    it found."""
    root = logging.getLogger()
    # one a wider-scoped fixture's CLI run left, its stream closed since: dropped before the test
    root.handlers[:] = [h for h in root.handlers
                        if not getattr(getattr(h, "stream", None), "closed", False)]
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)

@pytest.fixture(scope="session")
def conformance_dir() -> Path:
    assert CONFORMANCE.is_dir(), f"conformance data not found at {CONFORMANCE}"
    return CONFORMANCE


@pytest.fixture(scope="session")
def batch_vectors(conformance_dir: Path) -> list[dict]:
    return json.loads((conformance_dir / "vectors.json").read_text())


class S3Fixture(NamedTuple):
    root: "S3Root"
    env: dict[str, str]  # the AWS variables a subprocess needs to reach the same bucket


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """One versitygw for the session (tests/support/s3.py); tests that kill it start their own."""
    from tests.support.s3 import VersityGW

    server = VersityGW(tmp_path_factory.mktemp("s3")).start()
    yield server
    server.stop()


@pytest.fixture
def s3_root(s3_server) -> S3Fixture:
    """A fresh bucket on the session's versitygw, as the root s3://<bucket>/data, and its environment."""
    from topiclake.store.root import parse_root

    env = s3_server.env()
    return S3Fixture(parse_root(f"s3://{s3_server.create_bucket()}/data", env=env), env)


@pytest.fixture
def store_proxy(s3_server, monkeypatch):
    """The session's versitygw behind a fault-injecting proxy (tests/support/store_faults.py), and
    a fresh bucket root on it: (the proxy, the root as the brokers see it, an ObjectStore on the
    root that bypasses the proxy, for the test's own looks). Brokers started by the test reach the
    store through the proxy (AWS_ENDPOINT_URL)."""
    from tests.support.store_faults import StoreFaults
    from topiclake.store.objects import ObjectStore
    from topiclake.store.root import parse_root

    proxy = StoreFaults(s3_server.port).start()
    try:
        for name, value in proxy.env(s3_server.env()).items():
            monkeypatch.setitem(os.environ, name, value)
        bucket = s3_server.create_bucket()
        direct = ObjectStore(parse_root(f"s3://{bucket}/data", env=s3_server.env()))
        yield proxy, parse_root(f"s3://{bucket}/data", env=proxy.env(s3_server.env())), direct
    finally:
        proxy.stop()


@pytest.fixture
def broker(tmp_path):
    """An in-process broker on a free loopback port over a fresh root (tests/support/in_process_broker.py);
    tests that need other settings start their own, under another fixture name."""
    b = InProcessBroker(tmp_path / "data").start()
    yield b
    b.stop()


@pytest.fixture
def fenced(tmp_path):
    """A partition directory (`t-0`) written by takeovers, with a fenced leader's late batches and
    squatter files (tests/support/fenced_partition.py)."""
    partition = build_fenced_partition(tmp_path / "t-0")
    yield partition
    partition.close()


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """ONE real Spark session for the whole test run, whichever directory asks first."""
    session = spark_session(tmp_path_factory.mktemp("spark-warehouse"))
    yield session
    session.stop()


@pytest.fixture(scope="session")
def registry_broker(tmp_path_factory):
    """One real broker process serving the schema registry, for the registry API and serializer tests
    (each test uses its own subjects and topics)."""
    proc = BrokerProcess(tmp_path_factory.mktemp("registry") / "data", args=REGISTRY_ARGS).start(timeout=60)
    try:
        yield proc, RegistryHTTP(proc.registry_url())
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def kafka_tools() -> KafkaTools:
    """Apache Kafka's command-line tools (fetched once by bin/fetch-peers' code)."""
    from bench._kafka import fetch_peers

    peers = fetch_peers("kafka")
    return KafkaTools(Path(peers["KAFKA_HOME"]), peers["KAFKA_VERSION"])
