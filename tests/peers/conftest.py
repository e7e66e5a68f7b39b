"""Kafka's own tools as test peers: Apache Kafka's command-line tools (the jars bin/fetch-peers
fetches from Maven Central, as on a clean machine) run as real processes against one real
`topiclake broker start` process per module (`kafka_tools` is the root conftest's)."""

from __future__ import annotations

import pytest

from tests.support.kafka_tools import peer_broker_process


@pytest.fixture(scope="module")
def peer_broker(tmp_path_factory):
    b = peer_broker_process(tmp_path_factory.mktemp("peers"))
    yield b
    b.stop()
