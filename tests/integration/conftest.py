"""Fixtures shared by the integration tests (the session's `registry_broker` is the root conftest's)."""

from __future__ import annotations

import pytest

# the group settings of the consumer-group tests' brokers: quick rebalances, short sessions
SETTINGS = """
[groups]
offsets_topic_partitions = 5
initial_rebalance_delay_ms = 0
consumer_session_timeout_ms = 6000
consumer_heartbeat_interval_ms = 500
"""


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("conf") / "topiclake.toml"
    path.write_text(SETTINGS)
    return path
