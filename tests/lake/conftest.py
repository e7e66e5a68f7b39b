"""Lake test fixtures: a storage root, tiny topics written as real Kafka segment files, and topics
written by takeovers with a fenced leader's late bytes (the session's Spark is the root conftest's
`spark`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from topiclake.segments.storage import StorageLayout, TopicRegistry

from tests.support import fenced_partition
from tests.support.lake import TopicWriter


@pytest.fixture
def root(tmp_path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def topic_writer(root):
    def make(topic: str, partitions: int = 1) -> TopicWriter:
        return TopicWriter(root, topic, partitions)
    return make


@pytest.fixture
def fenced_topic(root):
    """`make(config)`: topic `t` (one partition) under the test root, written by takeovers with a fenced
    leader's late bytes and squatter files (tests/support/fenced_partition.py)."""
    made = []

    def make(config: dict[str, str] | None = None) -> fenced_partition.FencedPartition:
        layout = StorageLayout(root)
        TopicRegistry(layout).create("t", 1, config or {})
        made.append(fenced_partition.build(layout.log_dir("t", 0)))
        return made[-1]

    yield make
    for partition in made:
        partition.close()


@pytest.fixture
def fenced_in_root(fenced_topic):
    """Partition 0 of topic `t` under the test root, with the default topic config."""
    return fenced_topic()
