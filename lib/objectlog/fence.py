"""The leader-epoch fence of a partition in the bucket: segments.leader_fence's protocol (claim E,
seal older unstarted epochs, record where E starts, check E+1 before acknowledging) with the
file system's exclusive create replaced by If-None-Match. The history it produces is read with
segments' EpochHistory (epochs.load_history), so the validity rule is the file root's.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from topiclake.segments.errors import TopiclakeError
from topiclake.segments.leader_epochs import CLAIM_SUFFIX, UNDEFINED_EPOCH_OFFSET, EpochHistory, check_epoch
from topiclake.store.errors import ObjectExists
from topiclake.store.objects import CREATE, ObjectStore

from .epochs import load_history
from .keys import PartitionKeys


class LeaderFenced(TopiclakeError):
    """A newer epoch was claimed (or this one was sealed): this leader acknowledges nothing more."""


class BucketFence:
    def __init__(self, store: ObjectStore, keys: PartitionKeys):
        self.store = store
        self.keys = keys

    def superseded(self, epoch: int) -> bool:
        """Whether epoch+1 was claimed (one HEAD; claims are contiguous)."""
        return self.store.head(self.keys.claim(epoch + 1)) is not None

    def check(self, epoch: int) -> None:
        """After a flush object is created and before anything in it is acknowledged."""
        if self.superseded(epoch):
            raise LeaderFenced(f"{self.keys.prefix}: leader epoch {epoch} is fenced by a newer claim")

    def current_epoch(self) -> int | None:
        claims = [int(name[: -len(CLAIM_SUFFIX)]) for name in self._epoch_names()
                  if name.endswith(CLAIM_SUFFIX) and name[: -len(CLAIM_SUFFIX)].isdigit()]
        return max(claims) if claims else None

    def claim(self, epoch: int, **owner: Any) -> None:
        """Claim `epoch`, creating every missing lower claim first (claims stay contiguous).
        LeaderFenced if `epoch` or a higher one is claimed already."""
        check_epoch(epoch)
        current = self.current_epoch()
        if current is not None and current >= epoch:
            raise LeaderFenced(f"{self.keys.prefix}: epoch {current} is claimed, {epoch} cannot be")
        for lower in range(0 if current is None else current + 1, epoch):
            self._create(self.keys.claim(lower), _describe(placeholder_for=epoch, **owner))
        if not self._create(self.keys.claim(epoch), _describe(**owner)):
            raise LeaderFenced(f"{self.keys.prefix}: epoch {epoch} was claimed by another broker")

    def begin_takeover(self, epoch: int, **owner: Any) -> EpochHistory:
        """Claim `epoch`, seal every older epoch that recorded no start, and return the history
        (final below `epoch`) to recover the log with."""
        self.claim(epoch, **owner)
        history = load_history(self.store, self.keys)
        for older in range(0, epoch):
            if older not in history.starts:
                self._create(self.keys.start(older), f"{UNDEFINED_EPOCH_OFFSET}\n".encode())
        history = load_history(self.store, self.keys, history)
        if self.superseded(epoch):
            raise LeaderFenced(f"{self.keys.prefix}: epoch {epoch} was superseded during its takeover")
        return history

    def record_start(self, epoch: int, start_offset: int) -> EpochHistory:
        """`epoch` owns the offsets from `start_offset`; LeaderFenced if a newer leader sealed it."""
        check_epoch(epoch)
        if start_offset < 0:
            raise ValueError(f"a start offset cannot be negative: {start_offset}")
        if not self._create(self.keys.start(epoch), f"{start_offset}\n".encode()):
            raise LeaderFenced(f"{self.keys.prefix}: epoch {epoch} was sealed before it recorded its start")
        return load_history(self.store, self.keys)

    def _create(self, key: str, data: bytes) -> bool:
        try:
            self.store.put(key, data, mode=CREATE)
            return True
        except ObjectExists:
            return False

    def _epoch_names(self) -> list[str]:
        return [info.key.rpartition("/")[2] for info in self.store.list(self.keys.epochs_prefix)]


def _describe(**owner: Any) -> bytes:
    """What a claim says (for people; only its existence counts)."""
    info = {"pid": os.getpid(), "hostname": socket.gethostname(), "time_ms": int(time.time() * 1000), **owner}
    return (json.dumps(info, sort_keys=True) + "\n").encode()
