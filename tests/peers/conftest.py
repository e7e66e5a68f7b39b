"""Kafka's own tools as test peers: Apache Kafka's command-line tools (the jars bin/fetch-peers
fetches from Maven Central, as on a clean machine) run as real processes against one real
`topiclake broker start` process per module (`kafka_tools` is the root conftest's)."""

from __future__ import annotations

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.kafka_tools import BROKER_TOML


@pytest.fixture(scope="module")
def peer_broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("peers")
    config = tmp / "broker.toml"
    config.write_text(BROKER_TOML)
    b = BrokerProcess(tmp / "data", config=config).start()
    yield b
    b.stop()
