"""Leader epochs in storage: which epoch owns each offset, and which batches are therefore valid.

Many brokers share one storage root (docs/CLUSTER.md). Each partition has one leader at a time,
chosen in ZooKeeper with an increasing leader epoch; but ZooKeeper cannot stop a leader that was
paused (GC, SIGSTOP, a VM freeze) from waking up and writing to the shared files. So the files
themselves say who owned which offsets, and readers ignore whatever a stale leader wrote:

* Every batch a leader writes carries its epoch in the header's partitionLeaderEpoch (outside
  the CRC, as Kafka's leader stamps it).
* The partition's epoch history: epoch E *starts* at offset S when E's leader, after fencing and
  recovering the log, found the log ending at S. The *owner* of an offset is the highest epoch
  whose start is <= that offset (Kafka's LeaderEpochFileCache: epochs and start offsets rise
  together). A batch is valid only if its partitionLeaderEpoch is the owner of its base offset.
  A paused old leader keeps stamping its old epoch, so its late bytes at offsets the new epoch
  owns are invalid, to every reader, forever.
* Offsets below the first recorded start belong to no epoch: data written before the partition
  ever had a cluster leader (single-broker mode stamps 0 and records nothing) stays valid,
  whatever it carries. A directory without history is exactly today's log.

Where the history lives (`leader-epochs/` in the partition directory; `leader_fence` writes it):

    0000000007.claim   epoch 7 was claimed: the fence a stale leader checks before acknowledging
    0000000007.start   "1234\n": epoch 7 starts at offset 1234, or "-1\n": sealed, owns nothing

Both are created once, with O_EXCL semantics, and never rewritten, so the history only grows and
a late writer can never change what an offset's owner was: a lower epoch that records its start
late (it won, paused, woke) owns nothing, because a higher epoch's start is already <= its own.
Kafka's `leader-epoch-checkpoint` (version line, entry count, "epoch start_offset" lines; Kafka's
LeaderEpochCheckpointFile) is derived from these files for Kafka's tools; nothing trusts it.

Reading safely (the reader's side of the protocol, docs/CLUSTER.md "Readers"):
* `EpochHistory.load(dir)` once per read pass (it re-reads only new files), then
  `history.is_valid(base_offset, partition_leader_epoch)` per batch: a bisect over a few
  entries, no file access; `valid_mask` does a column of batches at once (Arrow).
* A segment file counts only if its first batch is valid (`counts_segment`): a stale leader may
  have created a segment after the takeover; ignoring it keeps it from hiding the new leader's
  data from a floor lookup.
* While a takeover is in progress (`history.pending`: an epoch claimed, its start not yet
  recorded) the log's end is not decided: bound reads by a high watermark the leader published
  after its fence check, or retry. After reading, `history.still_current(dir)` (one stat) says
  no takeover began meanwhile; if one did, what was read beyond that bound must be re-read.
"""

from __future__ import annotations

import bisect
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, NamedTuple

from .atomic import atomic_write
from .errors import CorruptRecordError

EPOCHS_DIR = "leader-epochs"
CHECKPOINT_FILE = "leader-epoch-checkpoint"  # Kafka's LeaderEpochCheckpointFile name
CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH_OFFSET = -1  # Kafka's EpochEntry "no offset": a sealed epoch's start
CLAIM_SUFFIX = ".claim"
START_SUFFIX = ".start"
_EPOCH_DIGITS = 10  # int32 epochs, zero-padded so names sort by epoch
_NAME = re.compile(r"^(\d{10})(\.claim|\.start)$")


class EpochEntry(NamedTuple):
    """One line of Kafka's leader-epoch-checkpoint: `epoch` owns offsets from `start_offset`."""

    epoch: int
    start_offset: int


def epochs_dir(partition_dir: str | os.PathLike) -> Path:
    return Path(partition_dir) / EPOCHS_DIR


def claim_path(partition_dir: str | os.PathLike, epoch: int) -> Path:
    return epochs_dir(partition_dir) / f"{epoch:0{_EPOCH_DIGITS}d}{CLAIM_SUFFIX}"


def start_path(partition_dir: str | os.PathLike, epoch: int) -> Path:
    return epochs_dir(partition_dir) / f"{epoch:0{_EPOCH_DIGITS}d}{START_SUFFIX}"


def check_epoch(epoch: int) -> None:
    if not isinstance(epoch, int) or not 0 <= epoch < 2 ** 31 - 1:
        raise ValueError(f"a leader epoch is an int32 >= 0 (and below the largest), not {epoch!r}")


# ---- Kafka's leader-epoch-checkpoint ------------------------------------------------------------

def format_checkpoint(entries: Iterable[EpochEntry]) -> bytes:
    """Kafka's text: `0`, the entry count, then `epoch start_offset` per line."""
    entries = list(entries)
    lines = [str(CHECKPOINT_VERSION), str(len(entries))] + [f"{e.epoch} {e.start_offset}" for e in entries]
    return ("\n".join(lines) + "\n").encode("ascii")


def parse_checkpoint(data: bytes, *, source: str = CHECKPOINT_FILE) -> list[EpochEntry]:
    """Entries of a leader-epoch-checkpoint (Kafka splits lines on any whitespace); an empty file
    has none. Epochs and start offsets must rise together, as Kafka's cache keeps them."""
    text = data.decode("ascii", errors="replace")
    if not text.strip():
        return []
    lines = text.splitlines()

    def bad(reason: str, line: int) -> CorruptRecordError:
        return CorruptRecordError(f"malformed leader epoch checkpoint: {reason}", source=f"{source} line {line}")

    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise bad(f"unrecognised version {lines[0]!r}", 1)
    try:
        count = int(lines[1])
    except (IndexError, ValueError):
        raise bad("missing or bad entry count", 2) from None
    body = lines[2:]
    if len(body) != count:
        raise bad(f"{count} entries declared, {len(body)} present", 2)
    entries: list[EpochEntry] = []
    for number, line in enumerate(body, start=3):
        parts = line.split()
        try:
            epoch, start = (int(part) for part in parts)
        except ValueError:
            raise bad(f"expected 'epoch start_offset', got {line!r}", number) from None
        if entries and not (epoch > entries[-1].epoch and start >= entries[-1].start_offset):
            raise bad(f"entry {line!r} does not follow {entries[-1].epoch} {entries[-1].start_offset}", number)
        entries.append(EpochEntry(epoch, start))
    return entries


def read_checkpoint(partition_dir: str | os.PathLike) -> list[EpochEntry]:
    try:
        data = (Path(partition_dir) / CHECKPOINT_FILE).read_bytes()
    except FileNotFoundError:
        return []
    return parse_checkpoint(data, source=str(Path(partition_dir) / CHECKPOINT_FILE))


def write_checkpoint(partition_dir: str | os.PathLike, entries: Iterable[EpochEntry]) -> None:
    """Atomically replace the partition's leader-epoch-checkpoint (temp file, fsync, rename)."""
    atomic_write(Path(partition_dir) / CHECKPOINT_FILE, format_checkpoint(entries))


# ---- the history --------------------------------------------------------------------------------

def effective_entries(starts: Mapping[int, int]) -> tuple[EpochEntry, ...]:
    """The epochs that own at least one offset, as Kafka's cache lists them (epochs and start
    offsets strictly rising). An epoch owns nothing when it is sealed, or when a higher epoch
    starts at or below its start (it recorded its start late)."""
    out: list[EpochEntry] = []
    lowest_above = None  # the smallest start of any higher epoch
    for epoch in sorted(starts, reverse=True):
        start = starts[epoch]
        if start == UNDEFINED_EPOCH_OFFSET:
            continue
        if lowest_above is None or start < lowest_above:
            out.append(EpochEntry(epoch, start))
            lowest_above = start
    out.reverse()
    return tuple(out)


@dataclass(frozen=True)
class EpochHistory:
    """A snapshot of one partition's epoch history. Immutable; `load` again for a newer one.

    `starts`: every recorded start (epoch -> start offset, UNDEFINED_EPOCH_OFFSET when sealed).
    `claimed`: the highest claimed epoch (None: the partition never had a cluster leader).
    """

    starts: Mapping[int, int] = field(default_factory=dict)
    claimed: int | None = None
    entries: tuple[EpochEntry, ...] = field(init=False)
    _start_offsets: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        entries = effective_entries(self.starts)
        object.__setattr__(self, "entries", entries)
        object.__setattr__(self, "_start_offsets", tuple(e.start_offset for e in entries))

    @classmethod
    def load(cls, partition_dir: str | os.PathLike, previous: "EpochHistory | None" = None) -> "EpochHistory":
        """The history recorded in `partition_dir` now. Start files never change once written, so
        those `previous` already read are not read again: a reload is one listdir."""
        try:
            names = os.listdir(epochs_dir(partition_dir))
        except FileNotFoundError:
            return cls({}, None)
        return cls.from_names(names, lambda epoch: start_path(partition_dir, epoch).read_bytes(), previous,
                              source=str(epochs_dir(partition_dir)))

    @classmethod
    def from_names(cls, names: Iterable[str], read_start: Callable[[int], bytes],
                   previous: "EpochHistory | None" = None, *, source: str = EPOCHS_DIR) -> "EpochHistory":
        """The history that claim and start names make (a directory's or a bucket's listing);
        `read_start(epoch)` returns a start's bytes, asked only for starts `previous` lacks."""
        starts = dict(previous.starts) if previous is not None else {}
        claimed = None
        for name in names:
            match = _NAME.match(name.rpartition("/")[2])
            if match is None:
                continue  # temp files of a create in progress
            epoch = int(match.group(1))
            if match.group(2) == CLAIM_SUFFIX:
                claimed = epoch if claimed is None else max(claimed, epoch)
            elif epoch not in starts:
                starts[epoch] = parse_start(read_start(epoch), source=f"{source}/{match.group(0)}")
        if starts and (claimed is None or claimed < max(starts)):
            claimed = max(starts)  # a start is only ever written after its claim
        return cls(starts, claimed)

    # ---- questions about offsets ----------------------------------------------------------------

    @property
    def latest_epoch(self) -> int | None:
        """The epoch owning the newest offsets (None without history)."""
        return self.entries[-1].epoch if self.entries else None

    @property
    def pending(self) -> bool:
        """A takeover is in progress: an epoch was claimed and its start is not recorded yet, so
        where the previous epoch's offsets end is not decided."""
        return self.claimed is not None and self.claimed not in self.starts

    def owner(self, offset: int) -> int | None:
        """The epoch owning `offset`; None below the first start (offsets from before the
        partition had a cluster leader: any epoch is valid there)."""
        index = bisect.bisect_right(self._start_offsets, offset) - 1
        return self.entries[index].epoch if index >= 0 else None

    def range_end(self, offset: int) -> int | None:
        """Where the owner of `offset` stops owning (the next epoch's start), None if it owns
        everything from `offset` on."""
        index = bisect.bisect_right(self._start_offsets, offset)
        return self._start_offsets[index] if index < len(self._start_offsets) else None

    def is_valid(self, base_offset: int, partition_leader_epoch: int | None, last_offset: int | None = None) -> bool:
        """Whether a batch belongs to the log: its epoch owns its base offset (and, when given,
        the batch ends before the next epoch starts). `partition_leader_epoch` None: a legacy
        v0/v1 message set (no epoch field), valid only below the first recorded start."""
        index = bisect.bisect_right(self._start_offsets, base_offset) - 1
        if index < 0:
            return True
        if partition_leader_epoch != self.entries[index].epoch:
            return False
        return last_offset is None or index + 1 == len(self.entries) or last_offset < self._start_offsets[index + 1]

    def counts_segment(self, first_base_offset: int | None, first_partition_leader_epoch: int | None) -> bool:
        """Whether a segment file is part of the log: it has a first batch and that batch is valid.
        A fenced leader may create a segment after the takeover; everything in it is invalid, and
        it must not shadow the new leader's data in the floor lookup of an offset."""
        return first_base_offset is not None and self.is_valid(first_base_offset, first_partition_leader_epoch)

    def valid_mask(self, base_offsets, partition_leader_epochs):
        """`is_valid` for a column of batches at once: two int arrays (Arrow or anything
        pyarrow.array takes) -> a pyarrow BooleanArray. One pass per epoch range."""
        import pyarrow as pa
        import pyarrow.compute as pc

        base = pa.array(base_offsets, pa.int64())
        epochs = pa.array(partition_leader_epochs, pa.int64())
        if not self.entries:
            return pc.is_valid(base)
        mask = pc.less(base, self._start_offsets[0])
        for index, entry in enumerate(self.entries):
            in_range = pc.greater_equal(base, entry.start_offset)
            if index + 1 < len(self.entries):
                in_range = pc.and_(in_range, pc.less(base, self._start_offsets[index + 1]))
            mask = pc.or_(mask, pc.and_(in_range, pc.equal(epochs, entry.epoch)))
        return pc.fill_null(mask, False)

    def end_offset_for(self, epoch: int, log_end_offset: int) -> EpochEntry:
        """Kafka's LeaderEpochFileCache.endOffsetFor (OffsetForLeaderEpoch): for the latest epoch
        the log end; for an older one the largest epoch <= it and where that one ended (the next
        epoch's start); below every epoch, `epoch` itself ending at the first start (its offsets
        are gone); (-1, -1) for an undefined epoch or one above every epoch."""
        epochs = [e.epoch for e in self.entries]
        if epoch < 0 or not epochs:
            return EpochEntry(-1, UNDEFINED_EPOCH_OFFSET)
        if epoch == epochs[-1]:
            return EpochEntry(epoch, log_end_offset)
        index = bisect.bisect_right(epochs, epoch)
        if index == len(epochs):
            return EpochEntry(-1, UNDEFINED_EPOCH_OFFSET)
        if index == 0:
            return EpochEntry(epoch, self._start_offsets[0])
        return EpochEntry(epochs[index - 1], self._start_offsets[index])

    def still_current(self, partition_dir: str | os.PathLike) -> bool:
        """No epoch above this snapshot's was claimed since: what was read with this snapshot
        below the log's end at that time stays valid. One stat (claims are contiguous: a claim of
        any higher epoch implies one of `claimed + 1`)."""
        if self.claimed is None:
            return not os.path.lexists(epochs_dir(partition_dir))
        return not os.path.lexists(claim_path(partition_dir, self.claimed + 1))

    def with_start(self, epoch: int, start_offset: int) -> "EpochHistory":
        """This history plus one recorded start (what `load` would return after it is written)."""
        return EpochHistory({**self.starts, epoch: start_offset}, max(epoch, self.claimed or 0))


def parse_start(data: bytes, *, source: str) -> int:
    """The offset a `<e>.start` file (or object) holds: a start, or -1 when the epoch was sealed."""
    text = data.decode("ascii", errors="replace").strip()
    try:
        value = int(text)
    except ValueError:
        raise CorruptRecordError(f"expected a start offset, got {text[:40]!r}", source=source) from None
    if value < UNDEFINED_EPOCH_OFFSET:
        raise CorruptRecordError(f"negative start offset {value}", source=source)
    return value
