"""Fixtures of the segment-store tests: a writable copy of a Kafka corpus partition."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.segments.segment_logs import copy_tree
from tests.support.paths import KAFKA_38_SEGMENTS as CORPUS

SNAPSHOTS = ("codecrafters-kafka-tester-e856b9a", "codecrafters-kafka-tester-510714e")


@pytest.fixture
def corpus_copy(tmp_path):
    def copy(snapshot: str, partition_dir: str) -> Path:
        target = tmp_path / snapshot / partition_dir
        copy_tree(CORPUS / snapshot / partition_dir, target)
        return target
    return copy
