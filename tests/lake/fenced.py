"""Fixtures over topic `t` (one partition) under the test root, written by takeovers with a fenced
leader's late bytes and squatter files (tests/segments/fenced_partition.py): `fenced` with the
default topic config, `fenced_topic(config)` with another."""

from __future__ import annotations

import pytest

from topiclake.segments.storage import StorageLayout, TopicRegistry
from tests.support import fenced_partition


@pytest.fixture
def fenced_topic(root):
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
def fenced(fenced_topic):
    return fenced_topic()
