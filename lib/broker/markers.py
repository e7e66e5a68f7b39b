"""Writing COMMIT/ABORT markers into a partition (Kafka's WriteTxnMarkers, done locally: the
coordinator appends the markers itself instead of sending them to leaders). The transaction
coordinator writes them to data partitions, the coordinator runtime to `__consumer_offsets`."""

from __future__ import annotations

from topiclake.segments import filenames
from topiclake.segments.control import build_end_txn_marker
from topiclake.segments.txn_index import append_txn_index


COORDINATOR_EPOCH = 0  # the __transaction_state partition's leader epoch: one broker, never re-elected


def write_marker(part, producer_id: int, producer_epoch: int, commit: bool, now_ms: int, *,
                 coordinator_epoch: int = COORDINATOR_EPOCH) -> int:
    """On the partition manager's I/O thread: append the marker and apply it to the partition's
    producer state (the epoch fences older batches) and open-transaction state (the LSO moves);
    an ABORT also goes into the `.txnindex` of the segment holding it, before anything else
    happens on this partition (a later snapshot relies on it). Every marker goes through here,
    `__consumer_offsets` ones included (through the coordinator runtime). Returns the marker's offset."""
    data = build_end_txn_marker(offset=0, timestamp=now_ms, producer_id=producer_id,
                                producer_epoch=producer_epoch, commit=commit, coordinator_epoch=coordinator_epoch)
    result = part.log.append(data, leader_epoch=part.stamp_epoch)
    part.producers.observe_marker(producer_id, producer_epoch, coordinator_epoch, result.max_timestamp)
    aborted = part.txns.on_marker(producer_id, result.first_offset, commit)
    if aborted is not None:
        append_txn_index(filenames.txn_index_file(part.log.directory, result.segment_base_offset),
                         part.txns.index_entry(aborted))
    part.confirm()  # cluster mode: fsync and the fence check before the marker counts
    return result.first_offset
