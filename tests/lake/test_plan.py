"""Planning without Spark: scans, LSO, task cutting, the offset index as a starting hint."""

from __future__ import annotations

import struct

import pytest

from topiclake.lake.errors import DataLossError
from topiclake.lake.log.offsets import EARLIEST, LATEST, OffsetSpec, parse_offset_spec
from topiclake.lake.log.plan import plan_partition
from topiclake.lake.log.scan import scan_partition
from topiclake.lake.log.source import list_partition
from topiclake.segments.batch import MAGIC_OFFSET

START, END = OffsetSpec(EARLIEST), OffsetSpec(LATEST)


def plan(w, partition=0, **kwargs):
    kwargs.setdefault("committed", None)
    return plan_partition(list_partition(w.layout, w.topic, partition), table_uri="/t", starting=START,
                          ending=END, **kwargs)


def test_tasks_follow_batches_and_segments(root, topic_writer):
    w = topic_writer("t")
    for i in range(6):
        w.produce(0, [b"x" * 100] * 2)  # 6 batches of ~300 bytes, offsets 0-11
    w.roll(0)
    w.produce(0, [b"y"])  # 12
    p = plan(w, committed=3, target_task_bytes=600)
    assert (p.start_offset, p.end_offset) == (3, 13)
    spans = [(t.min_offset, t.max_offset, t.path.rsplit("/", 1)[1][:20]) for t in p.tasks]
    assert spans == [(3, 5, "00000000000000000000"), (6, 9, "00000000000000000000"),
                     (10, 11, "00000000000000000000"), (12, 12, "00000000000000000012")]
    assert all(t.end > t.start for t in p.tasks)
    assert not plan(w, committed=13).tasks and not plan(w, committed=13).moves


def test_lso_is_the_first_offset_of_the_earliest_open_transaction(root, topic_writer):
    w = topic_writer("t")
    w.produce(0, [b"a"], producer_id=1, transactional=True)  # 0 open
    w.produce(0, [b"b"], producer_id=2, transactional=True)  # 1 aborted below
    w.end_txn(0, 2, commit=False)  # 2
    scan = scan_partition(list_partition(w.layout, "t", 0), 0)
    assert scan.last_stable_offset == 0 and scan.log_end_offset == 3
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in scan.aborted] == [(2, 1, 1)]
    assert plan(w).end_offset == 0


def test_data_loss_names_the_range(root, topic_writer):
    w = topic_writer("t")
    w.segment_base[0] = w.next_offset[0] = 5  # the log starts at 5
    w.produce(0, [b"a"])
    with pytest.raises(DataLossError, match=r"topic 't' partition 0: offsets \[2, 5\)"):
        plan(w, committed=2)
    assert plan(w, committed=2, allow_data_loss=True).lost == (2, 5)


def test_offset_index_is_a_starting_hint(root, topic_writer):
    w = topic_writer("t")
    positions = []
    for i in range(4):
        positions.append(w.path(0).stat().st_size if w.path(0).exists() else 0)
        w.produce(0, [b"v"] * 3)  # batch i: offsets 3i..3i+2
    log = w.path(0)
    entries = b"".join(struct.pack(">ii", 3 * i + 2, positions[i]) for i in (1, 2)) + b"\0" * 64  # + preallocation
    log.with_suffix(".index").write_bytes(entries)
    data = bytearray(log.read_bytes())
    data[MAGIC_OFFSET] = 9  # batch 0 unreadable: only a scan that starts from the index survives
    log.write_bytes(bytes(data))
    scan = scan_partition(list_partition(w.layout, "t", 0), 9)
    assert list(scan.batches.base_offset) == [9] and scan.log_end_offset == 12


def test_offset_specs():
    assert parse_offset_spec(None, default=EARLIEST, allow_time=True).resolve("t", 0) == ("earliest", -2)
    spec = parse_offset_spec('{"t": {"1": 7, "2": -1}}', default=EARLIEST, allow_time=True)
    assert [spec.resolve("t", p) for p in (0, 1, 2)] == [("earliest", -2), ("offset", 7), ("latest", -1)]
    assert parse_offset_spec("2024-05-01T00:00:01", default=EARLIEST, allow_time=True).timestamp_ms == \
        1_714_521_601_000
    with pytest.raises(ValueError):
        parse_offset_spec("earliest", default=LATEST, allow_time=False)
    with pytest.raises(ValueError):
        parse_offset_spec("soon", default=EARLIEST, allow_time=True)
