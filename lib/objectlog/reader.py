"""The log of a partition read from the bucket: plan.py's pieces, each fetched whole, walked with
segments' batch reader and filtered by the piece's rule (epoch validity and offset range)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from topiclake.segments.batch import RecordBatch, iter_batches
from topiclake.segments.leader_epochs import EpochHistory
from topiclake.store.objects import ObjectStore

from .epochs import load_history
from .keys import PartitionKeys
from .manifest import Manifest, load_newest
from .plan import Listed, Piece, plan_log


@dataclass(frozen=True)
class PartitionView:
    """One consistent look at a partition: its manifest, epoch history and pieces."""

    keys: PartitionKeys
    manifest: Manifest
    history: EpochHistory
    pieces: list[Piece]


def view_partition(store: ObjectStore, keys: PartitionKeys) -> PartitionView:
    """The epoch history first, then the manifest, then the listing: a takeover claims before it
    lists, so anything it could adopt is in this listing or stamped with an epoch the history
    already knows."""
    history = load_history(store, keys)
    manifest = load_newest(store, keys)
    listed = [Listed(info.key, info.size) for info in store.list(keys.prefix)]
    return PartitionView(keys, manifest, history, plan_log(keys, manifest, listed))


def iter_piece_batches(data: bytes, piece: Piece, history: EpochHistory, *,
                       source: str | None = None) -> Iterator[RecordBatch]:
    """The batches of one piece's bytes that belong to the log (a torn tail never: objects are
    whole, so a short batch is corruption)."""
    for batch in iter_batches(data, source=source or piece.key):
        header = batch.header
        if piece.accepts(history, header.base_offset, header.partition_leader_epoch, header.last_offset):
            yield batch


def read_log(store: ObjectStore, keys: PartitionKeys, *, from_offset: int = 0,
             view: PartitionView | None = None) -> Iterator[RecordBatch]:
    """Every valid batch of the partition holding offsets >= from_offset, in offset order, each
    offset once (a batch at or below what was already returned is skipped)."""
    view = view or view_partition(store, keys)
    next_offset = max(from_offset, view.manifest.log_start_offset)
    for piece in view.pieces:
        if piece.end_offset is not None and piece.end_offset <= next_offset:
            continue
        data = store.get(piece.key)
        for batch in iter_piece_batches(data, piece, view.history, source=store.root.uri(piece.key)):
            if batch.last_offset < next_offset:
                continue
            yield batch
            next_offset = batch.next_offset
