"""`_schemas` records as a read_committed consumer sees them, from a partition's batches: control
batches and aborted transactional data left out, and nothing past a transaction still open.
The broker's store and the lake's replay from segment files both read through here."""

from __future__ import annotations

from typing import Iterable, Sequence

from topiclake.segments.batch import RecordBatch
from topiclake.segments.txn_metadata import collect_aborted_txns

StoredRecord = tuple[int, bytes | None, bytes | None]  # offset, key, value


def committed_records(batches: Sequence[RecordBatch], from_offset: int,
                      end_offset: int) -> tuple[list[StoredRecord], int]:
    """The records at offsets >= `from_offset` of `batches` (consecutive, in log order, ending at
    `end_offset`), and the offset to read on from: `end_offset`, or the first offset of the
    earliest transaction still open."""
    aborted = collect_aborted_txns(batches)
    open_first: dict[int, int] = {}
    for batch in batches:
        h = batch.header
        if h.is_transactional:
            if h.is_control:
                open_first.pop(h.producer_id, None)
            else:
                open_first.setdefault(h.producer_id, h.base_offset)
    stable_end = min([end_offset, *open_first.values()])
    out: list[StoredRecord] = []
    for batch in batches:
        h = batch.header
        if h.base_offset >= stable_end:
            break
        if h.is_control or h.is_transactional and _aborted(aborted, h.producer_id, h.base_offset):
            continue
        out.extend((r.offset, r.key, r.value) for r in batch.records() if r.offset >= from_offset)
    return out, stable_end


def _aborted(aborted: Iterable, producer_id: int, offset: int) -> bool:
    return any(a.producer_id == producer_id and a.first_offset <= offset <= a.last_offset for a in aborted)
