"""Consumer-group offsets as the broker committed them, read from `__consumer_offsets` files.

The lake never imports the broker (import-linter contract): this reads the topic's segment files
with topiclake.segments and decodes only what retention needs, in Kafka's layout
(KAFKA-SEMANTICS.md (e)): key = int16 version (0/1 = OffsetCommitKey: group STRING, topic
STRING, partition INT32; other versions are other record types), value = int16 version then
offset INT64 first in every version; a null value is a tombstone (the offset was deleted).
The last record per key wins, as when the coordinator loads the topic. Offsets committed inside
a transaction count only once their COMMIT marker is written (aborted ones never; open ones
not yet): what read_committed would see. In cluster mode only the valid log counts (a fenced
coordinator's late commits are not offsets: segments.leader_reads).
"""

from __future__ import annotations

import mmap
import struct
from typing import Iterable

from topiclake.segments.leader_reads import log_batches
from topiclake.segments.errors import UnknownTopicError
from topiclake.segments.storage import StorageLayout, TopicRegistry
from topiclake.segments.txn_metadata import AbortedIndex, collect_aborted_txns

from .source import list_partition

OFFSETS_TOPIC = "__consumer_offsets"
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def _string(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = _I16.unpack_from(buf, pos)
    return buf[pos + 2 : pos + 2 + n].decode("utf-8"), pos + 2 + n


def _offset_key(key: bytes | None) -> tuple[str, str, int] | None:
    if key is None or len(key) < 2 or _I16.unpack_from(key, 0)[0] not in (0, 1):
        return None
    group, pos = _string(key, 2)
    topic, pos = _string(key, pos)
    return group, topic, _I32.unpack_from(key, pos)[0]


def broker_committed_offsets(layout: StorageLayout, groups: Iterable[str]) -> dict[str, dict[tuple[str, int], int]]:
    """group -> {(topic, partition): committed offset} for the given groups ({} if none)."""
    wanted = set(groups)
    out: dict[str, dict[tuple[str, int], int]] = {g: {} for g in wanted}
    try:
        partitions = TopicRegistry(layout).get(OFFSETS_TOPIC).partitions
    except UnknownTopicError:
        return out
    for p in range(partitions):
        files = list_partition(layout, OFFSETS_TOPIC, p)
        batches = []
        maps = []
        for i, seg in enumerate(files.segments):
            if seg.size == 0:
                continue
            with open(seg.path, "rb") as f:
                buf = mmap.mmap(f.fileno(), seg.size, access=mmap.ACCESS_READ)
            maps.append(buf)
            batches += list(log_batches(buf, files.epochs, source=seg.path, last=i == len(files.segments) - 1,
                                        limit=files.limit(i)))
        aborted = AbortedIndex(collect_aborted_txns(batches))
        settled = _settled(batches)
        for batch in batches:
            h = batch.header
            if batch.is_control or aborted.is_aborted(h) or (h.is_transactional and h.base_offset >= settled):
                continue
            for record in batch.records():
                key = _offset_key(record.key)
                if key is None or key[0] not in wanted:
                    continue
                group, topic, partition = key
                if record.value is None:
                    out[group].pop((topic, partition), None)
                else:
                    out[group][(topic, partition)] = _I64.unpack_from(record.value, 2)[0]
        del batches
    return out


def _settled(batches) -> int:
    """The last stable offset: the first offset of the earliest still-open transaction."""
    open_txn: dict[int, int] = {}
    end = 0
    for batch in batches:
        h = batch.header
        end = h.next_offset
        if h.is_transactional and h.producer_id >= 0:
            if h.is_control:
                open_txn.pop(h.producer_id, None)
            else:
                open_txn.setdefault(h.producer_id, h.base_offset)
    return min(open_txn.values(), default=end)
