"""Partitions opened over a directory and appended to directly, for the producer-state tests."""

from __future__ import annotations

from topiclake.broker.partition import Partition
from topiclake.segments.batch import Record, build_batch, read_header
from topiclake.segments.config import LogConfig
from topiclake.segments.log import Log


CONFIG = LogConfig()


def open_partition(directory, **load) -> Partition:
    part = Partition("t", 0, Log.open(directory, CONFIG), CONFIG)
    part.load_state(**load)
    return part


def produce(part, pid, seq, n=1, *, epoch=0, transactional=False, ts=1000):
    data = build_batch([Record(i, ts + seq + i, None, b"v", ()) for i in range(n)], base_offset=0, producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, is_transactional=transactional)
    header = read_header(data)
    assert part.producers.check(header) is None
    return part.append_batch(data, header, leader_epoch=0)
