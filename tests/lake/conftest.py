"""Lake test fixtures: a storage root, and tiny topics written as real Kafka segment files (the
session's Spark is the root conftest's `spark`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.lake import TopicWriter


@pytest.fixture
def root(tmp_path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def topic_writer(root):
    def make(topic: str, partitions: int = 1) -> TopicWriter:
        return TopicWriter(root, topic, partitions)
    return make
