"""The log of a partition, planned from a listing alone (no object read): the newest manifest's
closed segments, then the flush objects whose base is >= its end_offset, in base order, each read
up to the next base. Pure functions, so the broker's takeover and the lake's Spark planner share
them; `accepts` is the per-batch rule a reader of a piece applies (segments' epoch rule, plus the
piece's offset range).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from topiclake.segments.leader_epochs import EpochHistory

from .keys import PartitionKeys, parse_flush_name
from .manifest import Manifest

SEGMENT = "segment"
FLUSH = "flush"


@dataclass(frozen=True, slots=True)
class Piece:
    """One object of the log and the offsets it may contribute: [base_offset, end_offset)."""

    key: str
    kind: str  # SEGMENT or FLUSH
    base_offset: int
    end_offset: int | None  # exclusive; None: the tail's last piece, open-ended
    size: int | None = None
    epoch: int | None = None  # a flush object's writer

    def accepts(self, history: EpochHistory, base_offset: int, partition_leader_epoch: int,
                last_offset: int) -> bool:
        """Whether a batch read from this piece belongs to the log."""
        if base_offset < self.base_offset or (self.end_offset is not None and base_offset >= self.end_offset):
            return False
        return history.is_valid(base_offset, partition_leader_epoch, last_offset)


@dataclass(frozen=True, slots=True)
class Listed:
    """What a listing says of an object: its key (relative to the root) and size."""

    key: str
    size: int


def flush_objects(keys: PartitionKeys, listed: Iterable[Listed]) -> list[tuple[int, int, Listed]]:
    """(base, epoch, object) of every flush object of the partition, in (base, epoch) order."""
    found = []
    for item in listed:
        relative = keys.relative(item.key)
        name = parse_flush_name(relative) if relative is not None and "/" not in relative else None
        if name is not None:
            found.append((name.base_offset, name.epoch, item))
    return sorted(found, key=lambda found_: found_[:2])


def plan_log(keys: PartitionKeys, manifest: Manifest, listed: Iterable[Listed]) -> list[Piece]:
    """The pieces of the log in offset order. Flush objects below the manifest's end_offset are
    superseded (sealed into a segment): not part of the log. Objects sharing a base (a fenced
    leader's late object beside the new leader's first) are all read to the next distinct base;
    the epoch rule keeps the valid batches of one of them."""
    pieces = [Piece(entry.key, SEGMENT, entry.base_offset, entry.end_offset, entry.size)
              for entry in manifest.segments if entry.end_offset > manifest.log_start_offset]
    tail = [found for found in flush_objects(keys, listed) if found[0] >= manifest.end_offset]
    bases = sorted({base for base, _epoch, _item in tail})
    next_base = dict(zip(bases, bases[1:]))
    pieces += [Piece(item.key, FLUSH, base, next_base.get(base), item.size, epoch) for base, epoch, item in tail]
    return pieces


def superseded_flush_objects(keys: PartitionKeys, manifest: Manifest, listed: Iterable[Listed]) -> list[Listed]:
    """Flush objects the manifest's segments replaced: garbage once past the delete grace."""
    return [item for base, _epoch, item in flush_objects(keys, listed) if base < manifest.end_offset]
