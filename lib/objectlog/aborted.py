"""A closed segment's aborted transactions (Kafka's `.txnindex` entries: producer id, first offset,
ABORT marker offset, last stable offset), for read_committed readers of closed segments.

A seal writes them as the segment's `.txnindex` object (seal.write_segment) and names it in the
manifest; a segment without aborts names "" and has no object. A segment sealed before seals
wrote `.txnindex` objects names nothing (None): its aborts are found by scanning its batches
once, with the open transactions at its base from the producer snapshot object there (the one
the seal of the segment before wrote). A transaction open at the base with no snapshot to say
where it began is taken to begin at the base: its records in earlier segments are not named
(no snapshot exists only for a seal that ended elsewhere than its producer state).
"""

from __future__ import annotations

from topiclake.segments.batch import iter_batches
from topiclake.segments.producer_snapshot import decode_snapshot
from topiclake.segments.txn_index import TxnIndexEntry, decode_txn_index
from topiclake.segments.txn_metadata import walk_aborted
from topiclake.store.errors import ObjectNotFound
from topiclake.store.objects import ObjectStore

from .keys import PartitionKeys
from .manifest import SegmentEntry


def known_aborted(store: ObjectStore, entry: SegmentEntry) -> list[TxnIndexEntry] | None:
    """The entries the segment's `.txnindex` object holds ([] when it names none); None when the
    segment was sealed before `.txnindex` objects existed."""
    if entry.txn_index_key is None:
        return None
    if not entry.txn_index_key:
        return []
    return decode_txn_index(store.get(entry.txn_index_key), base_offset=entry.base_offset,
                            source=store.root.uri(entry.txn_index_key))


def segment_aborted(store: ObjectStore, keys: PartitionKeys, entry: SegmentEntry) -> list[TxnIndexEntry]:
    """The segment's aborted transactions: its `.txnindex` object, or a scan of its batches."""
    known = known_aborted(store, entry)
    return known if known is not None else scan_aborted(store, keys, entry)


def scan_aborted(store: ObjectStore, keys: PartitionKeys, entry: SegmentEntry) -> list[TxnIndexEntry]:
    """One GET of the segment (and of the snapshot at its base): the aborts whose marker it holds."""
    open_first: dict[int, int] = {}
    unknown_start: int | None = entry.base_offset  # no snapshot: a marker with no data before it here began at the base
    try:
        snapshot = store.get(keys.snapshot(entry.base_offset))
        open_first = {e.producer_id: e.current_txn_first_offset
                      for e in decode_snapshot(snapshot, source=store.root.uri(keys.snapshot(entry.base_offset)))
                      if e.current_txn_first_offset >= 0}
        unknown_start = None  # the snapshot says which transactions were open at the base
    except ObjectNotFound:
        pass
    batches = (batch for batch in iter_batches(store.get(entry.key), source=store.root.uri(entry.key))
               if entry.base_offset <= batch.header.base_offset < entry.end_offset)
    # Kafka's lastStableOffset(completedTxn): the first offset still undecided, else past the marker
    return [TxnIndexEntry(txn.producer_id, txn.first_offset, txn.last_offset,
                          min(still_open.values(), default=txn.last_offset + 1))
            for txn, still_open in walk_aborted(batches, open_first, unknown_start)]
