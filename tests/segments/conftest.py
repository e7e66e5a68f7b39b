"""Shared helpers for the segment-store tests."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest

from topiclake.segments.batch import Record, build_batch

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
CORPUS = SHARED / "conformance" / "kafka-3.8-segments"
SNAPSHOTS = ("codecrafters-kafka-tester-e856b9a", "codecrafters-kafka-tester-510714e")


def make_batch(count: int = 1, *, timestamp: int = 1_000, value_size: int = 10, base_offset: int = 0,
               key: bytes | None = b"k", **kwargs) -> bytes:
    """A v2 batch of `count` records with dense offsets and timestamps timestamp..timestamp+count-1."""
    records = [Record(base_offset + i, timestamp + i, key, bytes([65 + i % 26]) * value_size) for i in range(count)]
    return build_batch(records, base_offset=base_offset, **kwargs)


def copy_tree(src: Path, dst: Path) -> Path:
    """Copy a read-only corpus dir and make the copy writable (never touch shared/)."""
    shutil.copytree(src, dst)
    for path in [dst, *dst.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return dst


@pytest.fixture
def corpus_copy(tmp_path):
    def copy(snapshot: str, partition_dir: str) -> Path:
        target = tmp_path / snapshot / partition_dir
        copy_tree(CORPUS / snapshot / partition_dir, target)
        return target
    return copy
