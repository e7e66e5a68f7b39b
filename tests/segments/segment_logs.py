"""Segment data for the segment-store tests: v2 batches, a writable copy of the Kafka corpus, a log
read back batch by batch, and a segment 'compacted' by hand."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

from topiclake.segments import filenames as fn
from topiclake.segments.batch import Record, build_batch, iter_batches
from topiclake.segments.config import LogConfig
from topiclake.segments.log import Log

# small segments and a dense index: a few batches roll a segment
CONFIG = LogConfig(segment_bytes=400, index_interval_bytes=100)


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


def read_all(log: Log) -> list[bytes]:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        result = log.read(offset, 1 << 20)
        data = result.to_bytes()
        out += [bytes(b.data) for b in iter_batches(data)]
        offset = result.next_offset
    return out


def record_offsets(log):
    return [r.offset for b in read_all(log) for r in iter_batches(b).__next__().records()]


def write_dropping(directory, old_bases, drop):
    """A 'compacted' copy of old_bases keeping every other batch of the segments not in `drop`
    (whose batches all go). Returns (cleaned path, kept record offsets)."""
    kept = []
    for b in old_bases:
        if b in drop:
            continue
        batches = [bytes(x.data) for x in iter_batches(fn.log_file(directory, b).read_bytes())]
        kept += batches[::2]
    target = fn.log_file(directory, old_bases[0], fn.CLEANED_SUFFIX)
    target.write_bytes(b"".join(kept))
    return target, [r.offset for blob in kept for r in next(iter_batches(blob)).records()]
