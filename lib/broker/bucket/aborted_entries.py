"""The aborted transactions a seal indexes: the local cache's `.txnindex` entries (written by the
marker append and by the replay at open, partition_snapshot.py) whose ABORT marker is in the
range sealed, read on the partition's writer thread where those files are consistent."""

from __future__ import annotations

from typing import Any

from topiclake.segments import filenames
from topiclake.segments.txn_index import TxnIndexEntry, read_txn_index


def local_aborted(log_: Any, start: int, end: int) -> list[TxnIndexEntry]:
    """Entries of the local Log's segments with their marker in [start, end), in marker order."""
    found = []
    for segment in log_.segments():
        if segment.next_offset <= start or segment.base_offset >= end:
            continue
        found += [entry for entry in read_txn_index(filenames.txn_index_file(log_.directory, segment.base_offset),
                                                    segment.base_offset)
                  if start <= entry.last_offset < end]
    return sorted(found, key=lambda entry: entry.last_offset)
