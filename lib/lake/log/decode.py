"""Executor side of reading the log: one planned task's byte range of a segment file decoded
columnar (`topiclake.segments.arrow.decode_to_arrow`: batches in, Arrow columns out, no per-record
Python objects), with control records and the records of aborted transactions dropped
(read_committed). The ingest and backfill tasks (runs/tasks.py) write what it returns; CDC planning
samples it on the driver (keyed/cdc_plan.py).

Cluster mode: a task carries its partition's leader-epoch entries (`epochs`), and the decode drops
every batch a fenced leader wrote in its byte range (segments.arrow: per batch, before the kernel).

An object-store root: the task's bytes come from a ranged GET of the object (log/bucket.py); the
decode is the same.
"""

from __future__ import annotations

import mmap

import pyarrow as pa
import pyarrow.compute as pc

from topiclake.segments.arrow import decode_to_arrow
from topiclake.segments.leader_reads import ReadEpochs

from ..errors import LakeError
from .source import open_segment


def read_task(task: dict) -> tuple[pa.Table, dict]:
    """Decode one task's byte ranges and apply read_committed; returns the kept records and the
    task's counters."""
    tables = [_decode_range(piece) for piece in task_ranges(task)]
    records = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    if task.get("unsettled") and pc.any(records.column("is_transactional")).as_py():
        raise LakeError(f"{task['root'].uri(task['path'])}: transactional batches in a closed segment of an "
                        "object-store log, and no producer snapshot object at the manifest's end says which "
                        "transactions are open there: read_committed cannot tell their fate; not ingested "
                        "until a seal writes one")
    read = records.num_rows
    control = records.column("is_control")
    aborted = _aborted_mask(records, task["aborted"] or [])
    dropped_control = pc.sum(control.cast(pa.int64())).as_py() or 0
    dropped_aborted = pc.sum(pc.and_(aborted, pc.invert(control)).cast(pa.int64())).as_py() or 0
    # Filtering copies every column, keys and values included: only when something goes.
    kept = records.filter(pc.invert(pc.or_(control, aborted))) if dropped_control or dropped_aborted else records
    counters = {"bytes_read": sum(piece["end"] - piece["start"] for piece in task_ranges(task)),
                "records_read": read,
                "dropped_control": dropped_control, "dropped_aborted": dropped_aborted}
    return kept, counters


def task_ranges(task: dict) -> list[dict]:
    """The task as one task per byte range: itself, or, for a bucket's tail task over several
    flush objects (Task.more), one per object, in offset order."""
    more = task.get("more") or ()
    return [task, *({**task, "path": key, "start": start, "end": end} for key, start, end in more)]


def _decode_range(task: dict) -> pa.Table:
    buf, start, end, source = task_bytes(task)
    try:
        return decode_to_arrow(buf, start=start, end=end, source=source, validate=True,
                               min_offset=task["min_offset"], max_offset=task["max_offset"],
                               epochs=ReadEpochs.history_of(task.get("epochs")))
    finally:
        del buf  # views of the map may live in the records until they are copied out by Arrow


def task_bytes(task: dict):
    """(buffer, start, end, source) of a task's byte range: a segment file mapped, or, on an
    object-store root, the object's range fetched with one ranged GET (log/bucket.py)."""
    if task.get("root") is not None:
        from .objects import read_object_range

        data = read_object_range(task)
        return data, 0, len(data), task["root"].uri(task["path"])
    with open_segment(task["path"], task["inode"]) as f:
        return mmap.mmap(f.fileno(), task["end"], access=mmap.ACCESS_READ), task["start"], task["end"], task["path"]


def _aborted_mask(records: pa.Table, aborted: list[dict]) -> pa.ChunkedArray:
    """True for records of aborted transactions: a transactional record of the producer inside
    one of its aborted ranges (a planner fact, from the ABORT markers)."""
    mask = pa.repeat(pa.scalar(False), records.num_rows)
    if not aborted or records.num_rows == 0:
        return mask
    offsets = records.column("offset")
    producers = records.column("producer_id")
    transactional = records.column("is_transactional")
    for r in aborted:
        hit = pc.and_(pc.equal(producers, r["producer_id"]),
                      pc.and_(pc.greater_equal(offsets, r["first_offset"]),
                              pc.less_equal(offsets, r["last_offset"])))
        mask = pc.or_(mask, pc.and_(hit, transactional))
    return mask
