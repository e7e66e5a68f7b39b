"""The writer's side of leader epochs in storage: claiming an epoch, recording where it starts,
rolling to a segment nobody else writes, and the fence a leader checks before acknowledging.

`leader_epochs` explains the history and the validity rule; this module keeps the protocol that
makes the rule sufficient. For a new leader of epoch E (E won by compare-and-set in ZooKeeper):

1. `begin_takeover(E)`: claim E (`leader-epochs/<E>.claim`, created exclusively), then seal every
   lower epoch that was claimed but never recorded its start (`<e>.start` = -1, exclusively:
   a leader that won e, paused and woke can then never record a start, and the history is
   final for every epoch below E). Returns the history to recover the log with.
2. The caller recovers the log with that history (valid batches only, `counts_segment` for
   segment files) and finds its end, L. Bytes that landed before this read are adopted (none
   was acknowledged after step 1: see 5); bytes landing later are at offsets >= L.
3. `record_start(E, L)`: `<E>.start` = L, exclusively. From now on every offset >= L is owned
   by E, so a stale leader's late bytes there are invalid. Fails if E was sealed by a newer
   leader meanwhile. Kafka's leader-epoch-checkpoint is rewritten from the history.
4. `create_segment(L)`: the new leader never appends to a file an old leader may still write;
   it creates a new segment `.log` exclusively. If the name is taken (a fenced leader rolled
   there first), that file holds nothing valid (its offsets are >= L and stamped with an older
   epoch), so it is left alone, never renamed or deleted, and the next free base offset is used:
   the log gets a gap, which Kafka's log allows. Readers ignore the squatter (`counts_segment`).
5. While leading: after each fsync and before acknowledging, and before advancing the high
   watermark, `check(E)`: one stat of `<E+1>.claim`. Claims are contiguous (a claim of E fills
   in every missing lower claim first), so any newer claim shows as E+1. A write acknowledged
   passed the check, so its fsync finished before any newer claim, so before the new leader's
   recovery read the log: every acknowledged write is in the new leader's log.

Nothing here takes a lock: the file system's exclusive create (link() of a finished temp file)
and rename are the only primitives, so two hosts on one POSIX file system can run it.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from . import filenames
from .atomic import create_exclusive, fsync_dir
from .errors import TopiclakeError
from .leader_epochs import (CLAIM_SUFFIX, UNDEFINED_EPOCH_OFFSET, EpochHistory, check_epoch, claim_path,
                            epochs_dir, start_path, write_checkpoint)

MAX_SEGMENT_NAME_TRIES = 1000


class FencedLeaderError(TopiclakeError):
    """A newer leader epoch was claimed for this partition: this leader must stop (answer
    NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH and acknowledge nothing more)."""

    def __init__(self, partition_dir: Path, epoch: int, current: int | None, action: str):
        self.partition_dir = partition_dir
        self.epoch = epoch
        self.current = current
        newer = f"epoch {current}" if current is not None else "a newer epoch"
        super().__init__(f"{partition_dir}: leader epoch {epoch} is fenced by {newer} ({action})")


class PartitionFence:
    """One partition directory's claims and starts. Cheap to create; the fast path `check` is
    one stat of a file that does not exist (and remembers a fence once seen)."""

    def __init__(self, partition_dir: str | os.PathLike):
        self.partition_dir = Path(partition_dir)
        self._fenced_below: int | None = None  # every epoch below this is known to be fenced
        self._next_claim: tuple[int, str] | None = None  # (epoch, path of its successor's claim)

    # ---- the fast path ----------------------------------------------------------------------

    def superseded(self, epoch: int) -> bool:
        """Whether an epoch above `epoch` has been claimed (one stat)."""
        if self._fenced_below is not None and epoch < self._fenced_below:
            return True
        if self._next_claim is None or self._next_claim[0] != epoch:
            self._next_claim = (epoch, str(claim_path(self.partition_dir, epoch + 1)))  # built once, not per check
        if os.path.lexists(self._next_claim[1]):
            self._fenced_below = max(self._fenced_below or 0, epoch + 1)
            return True
        return False

    def check(self, epoch: int) -> None:
        """Raise FencedLeaderError if `epoch` no longer leads: call after the fsync of an append
        and before acknowledging it, and before advancing the high watermark."""
        if self.superseded(epoch):
            raise FencedLeaderError(self.partition_dir, epoch, None, "checked before acknowledging")

    def current_epoch(self) -> int | None:
        """The highest claimed epoch (a listdir), None if the partition never had a cluster
        leader. A controller whose ZooKeeper state was lost seeds the next epoch above this."""
        claims = self._claims()
        return max(claims) if claims else None

    def _claims(self) -> list[int]:
        try:
            names = os.listdir(epochs_dir(self.partition_dir))
        except FileNotFoundError:
            return []
        return [int(name[: -len(CLAIM_SUFFIX)]) for name in names
                if name.endswith(CLAIM_SUFFIX) and name[: -len(CLAIM_SUFFIX)].isdigit()]

    # ---- the takeover -----------------------------------------------------------------------

    def claim(self, epoch: int, **owner: Any) -> None:
        """Claim `epoch` for this process. Every missing claim below it is created first, lowest
        first, so claims stay contiguous (the first claim of a partition fills from 0). Raises
        FencedLeaderError if `epoch` or a higher one was claimed by anyone else."""
        check_epoch(epoch)
        current = self.current_epoch()
        if current is not None and current >= epoch:
            raise FencedLeaderError(self.partition_dir, epoch, current, "claiming")
        placeholder = _describe(placeholder_for=epoch, **owner)
        for lower in range(0 if current is None else current + 1, epoch):
            create_exclusive(claim_path(self.partition_dir, lower), placeholder)
        if not create_exclusive(claim_path(self.partition_dir, epoch), _describe(**owner)):
            raise FencedLeaderError(self.partition_dir, epoch, self.current_epoch(), "claiming")

    def seal_unstarted(self, below: int) -> EpochHistory:
        """Record "owns nothing" for every claimed epoch below `below` that has no start yet, so no
        leader of an older epoch can record one later; returns the history after that."""
        history = EpochHistory.load(self.partition_dir)
        for epoch in self._claims():
            if epoch < below and epoch not in history.starts:
                create_exclusive(start_path(self.partition_dir, epoch), f"{UNDEFINED_EPOCH_OFFSET}\n".encode())
        return EpochHistory.load(self.partition_dir, history)

    def begin_takeover(self, epoch: int, **owner: Any) -> EpochHistory:
        """Steps 1 of the takeover: claim `epoch`, seal older unstarted epochs, and return the
        history to recover the log with (final for every epoch below `epoch`)."""
        self.claim(epoch, **owner)
        history = self.seal_unstarted(epoch)
        if self.superseded(epoch):
            raise FencedLeaderError(self.partition_dir, epoch, self.current_epoch(), "sealing older epochs")
        return history

    def record_start(self, epoch: int, start_offset: int) -> EpochHistory:
        """Step 3: `epoch` owns the offsets from `start_offset` (the recovered log end). Raises
        FencedLeaderError if the start exists already (a newer leader sealed it). Rewrites Kafka's
        leader-epoch-checkpoint from the history and returns the history."""
        check_epoch(epoch)
        if start_offset < 0:
            raise ValueError(f"a start offset cannot be negative: {start_offset}")
        if not create_exclusive(start_path(self.partition_dir, epoch), f"{start_offset}\n".encode()):
            raise FencedLeaderError(self.partition_dir, epoch, self.current_epoch(), "recording its start")
        history = EpochHistory.load(self.partition_dir)
        write_checkpoint(self.partition_dir, history.entries)
        return history

    def create_segment(self, base_offset: int) -> int:
        """Create an empty segment `.log` that no other process writes: exclusively at
        `base_offset`, or at the next free base offset if a fenced leader took that name (its
        file is left alone: nothing in it is valid). Stale index files of the base that was
        won are removed (only the `.log`'s creator may create its indexes). Returns the base
        offset of the new segment; the caller opens it (LogSegment) and appends there."""
        directory = self.partition_dir
        for base in range(base_offset, base_offset + MAX_SEGMENT_NAME_TRIES):
            try:
                fd = os.open(filenames.log_file(directory, base), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                continue
            os.close(fd)
            for suffix in filenames.INDEX_SUFFIXES:
                filenames.segment_file(directory, base, suffix).unlink(missing_ok=True)
            fsync_dir(directory)
            return base
        raise FencedLeaderError(directory, -1, self.current_epoch(),
                                f"{MAX_SEGMENT_NAME_TRIES} segment names from {base_offset} are taken")


def _describe(**owner: Any) -> bytes:
    """What a claim file says (for people reading the directory; only its existence counts)."""
    info = {"pid": os.getpid(), "hostname": socket.gethostname(), "time_ms": int(time.time() * 1000), **owner}
    return (json.dumps(info, sort_keys=True) + "\n").encode()
