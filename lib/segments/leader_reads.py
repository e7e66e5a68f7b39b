"""The readers' side of leader epochs: which files and batches of a partition directory are its log.

In cluster mode a fenced leader (paused past its session, then woken) may still append to its old
active segment, or create a segment file after the takeover (docs/CLUSTER.md). The broker's Log
never loads those bytes (loader.py); every other reader of the root goes through this module, so
that all of them apply one rule: the Spark ingest's planning and its decode in executors, backfill,
coverage, compaction and retention, `topiclake dump-log`, the registry's replay of `_schemas` and
the consumer-offsets reader. The rule (Kafka's LeaderEpochFileCache, applied to shared files):

1. No claim in `leader-epochs/` (single-broker mode, or a partition no cluster leader ever had):
   today's log. `read_epochs` returns None and a reader takes exactly its old path, with no
   per-batch work. Such data stays valid forever (it lies below any epoch's first start).
2. Segment files: a file is part of the log only if its first batch is valid
   (`EpochHistory.counts_segment`). Other files are skipped, and maintenance leaves them alone:
   never renamed, rewritten or deleted (an empty one may be the current leader's new segment).
3. Batches: a counted segment is read up to the base offset of the next counted segment (a
   fenced leader's stale tail lies beyond it); a batch that is not valid (`is_valid`: its epoch
   does not own its base offset) is skipped; any segment may end in a partial batch (a fenced
   leader may be writing it right now).
4. A takeover in progress (`history.pending`: an epoch claimed, its start not recorded): where
   the previous leader's log ends is decided by the new leader's recovery, so the offsets from
   the latest recorded start on are undecided. A reader waits for the start until SETTLE_WAIT_S
   after the claim (a takeover takes milliseconds); if the takeover is still pending then (its
   leader died in the middle; the next one seals it), the reader reads only below the latest
   recorded start (`ReadEpochs.bound`) and leaves the rest to a later pass. Only the offsets
   below that start are final; a job reading less is behind, never wrong.
5. After reading and before acting on it (a Delta commit, a segment swap): `confirm(directory,
   end)`. `still_current` (one stat) says no takeover began since the history was read: then
   every batch read was written before any newer claim, so the newer leader's recovery adopts
   it. Otherwise the history is read again (settling as in 4): if no epoch starts below `end`
   that did not before, the validity of every offset read is unchanged and the reads stand;
   else LeadershipChangedError: something read may be a fenced leader's unadopted write, and
   nothing may be committed from it (the job runs again).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from . import filenames
from .batch import HEADER_SIZE, MAGIC_OFFSET, BatchHeader, RecordBatch, iter_batches, read_header
from .errors import TopiclakeError
from .leader_epochs import EpochHistory, claim_path
from .torn_tail import batches_judging_tail

#: How long a reader waits for a takeover in progress to record its start (a takeover's claim,
#: recovery and start take milliseconds; a new leader that died mid-way is replaced after its
#: ZooKeeper session expires, in seconds).
SETTLE_WAIT_S = 5.0
_SETTLE_POLL_S = 0.02
_LEGACY_MAGICS = (0, 1)

SkipCallback = Callable[[RecordBatch, str], None]


class LeadershipChangedError(TopiclakeError):
    """A takeover moved the log's end below what a job read: nothing read may be acted on."""

    def __init__(self, directory: str | os.PathLike, end: int, epoch: int, start: int):
        self.directory, self.end, self.epoch, self.start = str(directory), end, epoch, start
        super().__init__(f"{directory}: leadership changed while reading offsets below {end}: leader epoch {epoch} "
                         f"now starts at offset {start}, so what was read from {start} on may be a fenced leader's "
                         "write the new leader did not adopt; nothing was committed from it, run again")


class TakeoverInProgressError(TopiclakeError):
    """A job that must read offsets a takeover in progress has not decided yet (rule 4)."""

    def __init__(self, directory: str | os.PathLike, epoch: int | None, bound: int, wanted: int):
        super().__init__(f"{directory}: a leader takeover is in progress (epoch {epoch} claimed, its start not "
                         f"recorded): offsets from {bound} are not decided yet, and offsets up to {wanted} are "
                         "needed; try again once the new leader serves")


@dataclass(frozen=True)
class ReadEpochs:
    """A partition's epoch history as one read pass uses it. `bound`: offsets >= bound are
    undecided (a takeover in progress, rule 4); None when the history is settled."""

    history: EpochHistory
    bound: int | None = None

    # ---- shipping to executors (small, picklable, JSON-friendly) -------------------------------

    @property
    def entries(self) -> list[list[int]]:
        """The effective (epoch, start offset) pairs: all `is_valid` needs."""
        return [[e.epoch, e.start_offset] for e in self.history.entries]

    @staticmethod
    def history_of(entries: Iterable[Sequence[int]] | None) -> EpochHistory | None:
        """The history an executor rebuilds from `entries` (None stays None: no epochs)."""
        return None if entries is None else EpochHistory({epoch: start for epoch, start in entries})

    # ---- batches ---------------------------------------------------------------------------------

    def require_decided(self, directory: str | os.PathLike, end: int) -> None:
        """TakeoverInProgressError unless every offset below `end` is decided."""
        if self.bound is not None and self.bound < end:
            raise TakeoverInProgressError(directory, self.history.claimed, self.bound, end)

    def limit(self, next_base: int | None) -> int | None:
        """Where the read of a counted segment stops: the next counted segment's base, or the
        undecided bound, whichever is lower (None: read to the end of the file)."""
        if self.bound is None:
            return next_base
        return self.bound if next_base is None else min(next_base, self.bound)

    def skip_reason(self, header: BatchHeader, limit: int | None = None) -> str | None:
        """Why the batch is not part of the log when read up to `limit` (None: it is)."""
        base, epoch = header.base_offset, header.partition_leader_epoch
        if self.bound is not None and base >= self.bound:
            return (f"undecided: a takeover is in progress (epoch {self.history.claimed} claimed) and offsets "
                    f"from {self.bound} are not settled yet")
        if not self.history.is_valid(base, epoch, header.last_offset):
            return "written by a fenced leader: " + self._owner_text(base, epoch)
        if limit is not None and base >= limit:
            return f"a stale tail: offsets from {limit} are in the next segment of the log"
        return None

    def _owner_text(self, base: int, epoch: int | None) -> str:
        owner = self.history.owner(base)
        if owner == epoch:
            end = self.history.range_end(base)
            return f"it runs past offset {end}, where epoch {self.history.owner(end)} starts"
        start = next(e.start_offset for e in self.history.entries if e.epoch == owner)
        writer = "a message without a leader epoch (legacy format)" if epoch is None else f"leader epoch {epoch}"
        return f"{writer} wrote it, but epoch {owner} owns offset {base} (from {start})"

    def batches(self, buf, *, start: int = 0, end: int | None = None, source: str | None = None,
                limit: int | None = None, validate: bool = False,
                on_skip: SkipCallback | None = None) -> Iterator[RecordBatch]:
        """The batches of one counted segment's bytes that are part of the log (rule 3): up to
        `limit` (see `limit`), valid ones only, a partial tail tolerated. CRCs are checked only
        for the batches returned (a fenced leader's torn batch is never judged by its CRC)."""
        for batch in iter_batches(buf, start=start, end=end, source=source, allow_partial_tail=True, validate=False):
            reason = self.skip_reason(batch.header, limit)
            if reason is None:
                if validate:
                    batch.ensure_valid()
                yield batch
                continue
            if on_skip is not None:
                on_skip(batch, reason)
            if limit is not None and batch.header.base_offset >= limit:
                return  # everything after a stale tail's first batch is stale too

    # ---- segment files ---------------------------------------------------------------------------

    def segment_skip_reason(self, path: str | os.PathLike) -> str | None:
        """Why the segment file is not part of the log (rule 2; None: it is)."""
        base, epoch = first_entry(path)
        if base is None:
            return "empty: it holds no whole batch header yet (a new segment of a leader, or a fenced leader's)"
        if self.bound is not None and base >= self.bound:
            return (f"undecided: a takeover is in progress and offsets from {self.bound} are not settled yet "
                    f"(it starts at {base})")
        if self.history.counts_segment(base, epoch):
            return None
        return f"its first batch (offset {base}) was written by a fenced leader: " + self._owner_text(base, epoch)

    def counted(self, directory: str | os.PathLike,
                bases: Sequence[int]) -> tuple[list[int], list[tuple[int, str]]]:
        """(the bases of segment files that are part of the log, [(base, why not)] of the others)."""
        kept, skipped = [], []
        for base in bases:
            reason = self.segment_skip_reason(filenames.log_file(Path(directory), base))
            if reason is None:
                kept.append(base)
            else:
                skipped.append((base, reason))
        return kept, skipped

    # ---- after reading ---------------------------------------------------------------------------

    def confirm(self, directory: str | os.PathLike, end: int, *, wait_s: float | None = None) -> "ReadEpochs":
        """Rule 5: the reads of offsets below `end` made with this history stand (returns the
        history now), or LeadershipChangedError."""
        if self.history.still_current(directory):
            return self
        now = read_epochs(directory, wait_s=wait_s, previous=self.history)
        if now is None:  # leader-epochs/ went away: not something a takeover does
            raise TopiclakeError(f"{directory}: its leader-epochs/ disappeared while it was read")
        before = [e for e in self.history.entries if e.start_offset < end]
        after = [e for e in now.history.entries if e.start_offset < end]
        if after != before:  # only a new epoch starting below `end` changes the owners there
            culprit = next((e for e in after if e not in before), after[-1] if after else before[-1])
            raise LeadershipChangedError(directory, end, culprit.epoch, culprit.start_offset)
        now.require_decided(directory, end)  # a takeover still pending after the wait: nothing to confirm yet
        return now


def read_epochs(directory: str | os.PathLike, *, wait_s: float | None = None,
                previous: EpochHistory | None = None) -> ReadEpochs | None:
    """The partition's epochs for one read pass, or None without any claim (rule 1: read as
    today). While a takeover is in progress, waits up to `wait_s` (default SETTLE_WAIT_S; 0: do
    not wait) for it to record its start, then bounds the read (rule 4)."""
    history = EpochHistory.load(directory, previous)
    if history.claimed is None:
        return None
    deadline = time.monotonic() + _left_to_wait(directory, history, SETTLE_WAIT_S if wait_s is None else wait_s)
    while history.pending and time.monotonic() < deadline:
        time.sleep(_SETTLE_POLL_S)
        history = EpochHistory.load(directory, history)
    if not history.pending:
        return ReadEpochs(history)
    # Only offsets below the latest recorded start are decided; with none recorded, no cluster
    # leader ever appended (a leader appends after recording its start): nothing is undecided.
    return ReadEpochs(history, history.entries[-1].start_offset if history.entries else None)


def _left_to_wait(directory: str | os.PathLike, history: EpochHistory, wait_s: float) -> float:
    """How long to wait for a pending takeover: `wait_s` from its claim, not from now, so a
    takeover stuck for longer (its new leader died) costs no reader, nor each of a job's many
    partitions, any wait at all."""
    if not history.pending or wait_s <= 0:
        return 0.0
    try:
        claimed_at = os.stat(claim_path(directory, history.claimed)).st_mtime
    except FileNotFoundError:
        return wait_s
    return min(wait_s, max(0.0, claimed_at + wait_s - time.time()))


def first_entry(path: str | os.PathLike) -> tuple[int | None, int | None]:
    """(base offset, partition leader epoch) of a segment file's first batch; (None, None) when it
    holds no whole header yet. A legacy v0/v1 message has no epoch (None): it is valid only below
    the first recorded start, like every message written before the partition had a leader."""
    with open(path, "rb") as f:
        head = f.read(HEADER_SIZE)
    if len(head) > MAGIC_OFFSET and head[MAGIC_OFFSET] in _LEGACY_MAGICS:
        return int.from_bytes(head[:8], "big", signed=True), None
    if len(head) < HEADER_SIZE:
        return None, None
    header = read_header(head)  # CorruptRecordError for a magic that is neither: the file is damaged
    return header.base_offset, header.partition_leader_epoch


def valid_only(batches: Iterable[RecordBatch], history: EpochHistory | None) -> Iterable[RecordBatch]:
    """`batches` without those a fenced leader wrote (executors: the history a task carries, its
    byte ranges already cut to the log by the planner); `batches` itself without a history."""
    if history is None:
        return batches
    return (b for b in batches if history.is_valid(b.base_offset, b.header.partition_leader_epoch, b.last_offset))


def log_batches(buf, epochs: ReadEpochs | None, *, start: int = 0, end: int | None = None,
                source: str | None = None, last: bool = True, limit: int | None = None, validate: bool = False,
                on_skip: SkipCallback | None = None) -> Iterator[RecordBatch]:
    """The batches of one segment's bytes that a reader may use: without epochs `iter_batches`
    (a partial tail only in the `last` segment, and only where `torn_tail` finds it is one: not
    damage), with them `ReadEpochs.batches` (rule 3)."""
    if epochs is None:
        if last:
            return batches_judging_tail(buf, start=start, end=end, source=source, validate=validate)
        return iter_batches(buf, start=start, end=end, source=source, allow_partial_tail=False, validate=validate)
    return epochs.batches(buf, start=start, end=end, source=source, limit=limit, validate=validate, on_skip=on_skip)
