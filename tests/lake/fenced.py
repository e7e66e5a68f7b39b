"""The `fenced` fixture: topic `t` (one partition) under the test root, written by takeovers with a
fenced leader's late bytes and squatter files (tests/segments/fenced_partition.py)."""

from __future__ import annotations

import pytest

from topiclake.segments.storage import StorageLayout, TopicRegistry
from tests.segments import fenced_partition


@pytest.fixture
def fenced(root):
    layout = StorageLayout(root)
    TopicRegistry(layout).create("t", 1)
    partition = fenced_partition.build(layout.log_dir("t", 0))
    yield partition
    partition.close()
