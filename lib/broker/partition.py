"""One partition as the broker serves it: its `Log`, the producer and transaction state the
broker checks each produce against, its leader epoch and fence, and the futures of fetches waiting
for its next append. The manager of all partitions (opening, the writer thread, topics) is
`partitions.PartitionManager`."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from topiclake.segments.batch import BatchHeader
from topiclake.segments.config import LogConfig
from topiclake.segments.leader_epochs import EpochEntry, EpochHistory
from topiclake.segments.leader_fence import FencedLeaderError, PartitionFence
from topiclake.segments.log import AppendResult
from topiclake.segments.read_constants import MAX_TIMESTAMP
from topiclake.segments.time_index import TimestampOffset
from topiclake.segments.txn_metadata import AbortedTxn

from .constants import LEADER_EPOCH, NO_LEADER_EPOCH
from .errors import FencedLeaderEpoch, UnknownLeaderEpoch
from .partition_snapshot import Replay, load_state, take_snapshot
from .partition_txns import PartitionTxns, scan_log
from .producer_state import ProducerState

log = logging.getLogger(__name__)


class Partition:
    def __init__(self, topic: str, index: int, log_: Any, config: LogConfig):
        self.topic = topic
        self.index = index
        self.log = log_
        self.config = config
        self.producers = ProducerState(topic, index)
        self.txns = PartitionTxns(f"{topic}-{index}")  # open/aborted transactions: LSO, read_committed
        self.replay: Replay | None = None  # how load_state found the state
        log_.on_roll = self._on_roll  # Kafka snapshots producer state on every roll
        self._waiters: list[asyncio.Future] = []
        # Cluster mode: the epoch this broker leads at and the fence it checks before anything it
        # wrote counts (acknowledged, visible below the high watermark); see leader_fence.
        self.leader_epoch = LEADER_EPOCH
        self.fence: PartitionFence | None = None
        self.on_fenced: Callable[[], None] = lambda: None  # told (on the I/O thread) when the fence moved
        self._confirmed_end = 0  # cluster mode's high watermark: the log end at the last passed fence check
        # A bucket root: the partition's flushes and seals (bucket.tail); its high watermark is the
        # end of the last flush that passed the fence.
        self.tail: Any = None
        self.bucket_epoch: int | None = None  # the epoch claimed in the bucket, stamped on batches
        self.bucket_history: EpochHistory | None = None  # the bucket's epochs as the takeover recorded them
        # A bucket root whose takeover restored only the tail: the closed segments below the local
        # log's start, read from the bucket (bucket.closed.ClosedSegments); None: all is local.
        self.closed: Any = None
        # The log directory's mtime (ns) when a periodic refresh last looked at it, once older than
        # REFRESH_SETTLED_NS then: a maintenance job's change renames files in it, so while the
        # mtime stays this, the next rounds skip it (PartitionManager.refresh_all). None: look.
        self.refreshed_mtime_ns: int | None = None
        # Client traffic, as plain ints bumped on the event loop and read at scrape time (metrics.py):
        # records and bytes appended by Produce, record bytes sent by Fetch and ShareFetch.
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index})"

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def history_start_offset(self) -> int:
        """The whole log's first offset: on a bucket whose takeover restored only the tail, the
        closed segments' start (the manifest's), below the cache's (`log_start_offset`)."""
        start = self.log.log_start_offset
        return start if self.closed is None else min(start, self.closed.log_start_offset)

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        # One replica: everything appended is committed (in cluster mode: once the fence held).
        return self.log.log_end_offset if self.fence is None and self.tail is None else self._confirmed_end

    @property
    def stamp_epoch(self) -> int:
        """The leader epoch stamped on appended batches: the bucket's epoch on a bucket root (its
        fence decides which batches count), else the leader epoch clients are told."""
        return self.leader_epoch if self.bucket_epoch is None else self.bucket_epoch

    def confirmed(self, end: int) -> None:
        """Offsets below `end` passed the fence (a bucket root's flush, any thread)."""
        self._confirmed_end = max(self._confirmed_end, end)

    def read_closed(self, offset: int, max_bytes: int, min_one: bool, bound: int | None,
                    committed: bool) -> tuple[bytes, list[AbortedTxn] | None, int]:
        """Reader thread, below the cache's start of a bucket partition: whole batches of its
        closed segments from `offset` by ranged GETs (bucket.closed), none at or past `bound`,
        for Fetch and ShareFetch alike. (records, with `committed` the aborted transactions
        overlapping them: the closed segments' and, where their search did not complete, the
        cache's; the offset after them). No records: (b"", None, where the cache can answer
        from, the closed end where no closed batch is at or above `offset`)."""
        if bound is not None and offset >= bound:
            return b"", None, offset
        records, upper = self.closed.read(offset, max_bytes, min_one, bound)
        if not committed or not records:
            return records, None, upper
        aborted, complete = self.closed.aborted_between(offset, upper)
        if not complete:
            aborted = sorted(set(aborted) | set(self.txns.aborted_between(offset, upper)))
        return records, aborted, upper

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The whole log's first record with a timestamp >= `timestamp`, or with MAX_TIMESTAMP the
        first record holding its largest timestamp (KIP-734); None when no record qualifies. On a
        bucket partition the closed segments below the cache count too (ranged GETs: call it on a
        bucket reader thread then); the cache answers for the offsets it holds."""
        cached = self.log.offset_for_timestamp(timestamp)
        if self.closed is None:
            return cached
        if timestamp == MAX_TIMESTAMP:
            closed = self.closed.max_timestamp()
            # the larger timestamp wins, the lower offset among equals (the cache may hold sealed offsets too)
            candidates = [found for found in (closed, cached) if found is not None]
            return min(candidates, key=lambda found: (-found.timestamp, found.offset), default=None)
        closed = self.closed.offset_for_timestamp(timestamp)
        # a closed hit the cache also holds is the cache's, or the cache has an earlier one
        return closed if closed is not None and closed.offset < self.log.log_start_offset else cached

    def check_leader_epoch(self, requested: int) -> None:
        """A request's current_leader_epoch (KIP-320; NO_LEADER_EPOCH: not given) against this
        leader's: older is FENCED_LEADER_EPOCH (the client's leader moved on), newer
        UNKNOWN_LEADER_EPOCH (this broker has not caught up yet)."""
        if requested == NO_LEADER_EPOCH or requested == self.leader_epoch:
            return
        if requested < self.leader_epoch:
            raise FencedLeaderEpoch(f"{self}: epoch {requested} is older than the leader's {self.leader_epoch}")
        raise UnknownLeaderEpoch(f"{self}: epoch {requested} is newer than the leader's {self.leader_epoch}")

    def epoch_end_offset(self, epoch: int) -> EpochEntry:
        """OffsetForLeaderEpoch (`EpochHistory.end_offset_for`) over the bucket's history, the
        shared root's (cluster mode), or one epoch owning all (a broker alone on a file root)."""
        history = self.bucket_history or self.log.epochs or EpochHistory({self.leader_epoch: 0})
        return history.end_offset_for(epoch, self.log.log_end_offset)

    def lead(self, epoch: int, fence: PartitionFence) -> None:
        """Cluster mode: serve as the leader of `epoch` (its takeover is done: `fence` was claimed,
        the log recovered and continued in a segment of this broker's own)."""
        self.leader_epoch, self.fence = epoch, fence
        self._confirmed_end = self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        # Kafka: min(first offset of an undecided transaction, high watermark).
        return self.txns.last_stable_offset(self.high_watermark)

    def append_batch(self, data: bytes, header: BatchHeader, leader_epoch: int | None = None, *,
                     confirm: bool = True, validated: bool = False) -> AppendResult:
        """Append one producer's batch (I/O thread; every data append, Produce's or a
        coordinator's) and apply it to the producer state and the open transactions. A
        transaction's first batch holds the LSO before `log.append` moves the high watermark past
        it: a read_committed fetch in between would otherwise return it undecided. In cluster mode
        the batch is fsynced and the fence checked before it counts (FencedLeaderError: a newer
        leader took over). `leader_epoch`: stamped on the batch (default: the partition's).
        `confirm=False`: the caller confirms later (PartitionManager.confirm_appends).
        `validated`: Produce checked the batch's size, CRC and record count (`Log.append_validated`)."""
        opened = self.txns.on_data(header, self.log.log_end_offset)  # the offset the append assigns
        epoch = self.stamp_epoch if leader_epoch is None else leader_epoch
        try:
            if validated:
                result = self.log.append_validated(data, header, leader_epoch=epoch)
            else:
                result = self.log.append(data, leader_epoch=epoch)
        except BaseException:
            if opened:
                self.txns.cancel(header.producer_id)
            raise
        self.producers.observe(header, result.first_offset, result.last_offset, result.max_timestamp)
        if self.tail is not None:
            self.tail.appended(result.size)
        if confirm and (self.tail is not None or self.fence is not None):  # else confirm() has nothing to do
            self.confirm()
        return result

    def confirm(self) -> None:
        """Cluster mode, after an append (I/O thread): fsync, then check the fence; only then is
        what was written acknowledged and below the high watermark (leader_fence, step 5).
        On a bucket root: flushed to an object and fenced at once (bucket.tail)."""
        if self.tail is not None:
            self.tail.confirm()
            return
        if self.fence is None:
            return
        self.log.flush(indexes=False)
        try:
            self.fence.check(self.leader_epoch)
        except FencedLeaderError:
            self.on_fenced()
            raise
        self._confirmed_end = self.log.log_end_offset

    def confirm_through(self, last_offset: int) -> None:
        """Cluster mode, before answering a retried batch with its original offsets (I/O thread):
        they count only below the confirmed end. A batch whose own fence check failed is still in
        this leader's producer state until it resigns; its retry must get NOT_LEADER_OR_FOLLOWER,
        never an acknowledgement of bytes no reader will ever see."""
        if self.fence is not None and last_offset >= self._confirmed_end:
            self.confirm()

    def changed(self) -> asyncio.Future:
        self.watch(fut := asyncio.get_running_loop().create_future())
        return fut

    def watch(self, fut: asyncio.Future) -> None:
        """Resolve `fut` at the next append (a fetch shares one over all its partitions)."""
        if len(self._waiters) >= 64:  # long polls of an idle partition cancel theirs: drop those
            self._waiters = [w for w in self._waiters if not w.done()]
        self._waiters.append(fut)

    def notify(self) -> None:
        if not self._waiters:  # after every append: most have no fetch waiting
            return
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def load_state(self, *, now_ms: int | None = None, expiration_ms: int | None = None,
                   names: frozenset[str] | None = None) -> Replay:
        """Producer and transaction state from the newest producer snapshot plus the batches
        after it, or from the whole log (I/O thread; at open). See partition_snapshot.py."""
        self.replay = load_state(self, now_ms=now_ms, expiration_ms=expiration_ms, names=names)
        return self.replay

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget producers idle for `expiration_ms` with no open transaction here (I/O thread:
        the same thread checks and appends). Returns their ids."""
        expired = self.producers.remove_expired(now_ms, expiration_ms, self.txns.ongoing())
        if expired:
            log.info("%s: expired %d idle producer ids", self, len(expired))
        return expired

    def _on_roll(self, base_offset: int, *, sync_dir: bool = True) -> None:
        """Log.on_roll: the state now is the state after every batch below `base_offset`."""
        if self.tail is not None:
            self.tail.seal_requested = True  # Kafka's roll rules decide when a bucket tail seals too
        try:
            take_snapshot(self, base_offset, sync_dir=sync_dir)
        except OSError:
            log.exception("%s: writing the producer snapshot at %d failed", self, base_offset)

    def close(self, *, mark_clean: bool = True) -> None:
        """Clean close (I/O thread, or a close helper it waits for): a producer snapshot at the
        log end offset, then the log, whose directory fsync makes the snapshot's rename durable
        too. `mark_clean=False`: the clean-shutdown marker is left to `Log.mark_clean_shutdown`."""
        self.log.flush()
        self._on_roll(self.log.log_end_offset, sync_dir=False)
        self.log.close(mark_clean=mark_clean)

    def refresh(self) -> bool:
        """Log.refresh (I/O thread), keeping the aborted-transaction index in step: retention
        deleting old segments only drops entries; a compaction swap may have removed aborted data
        and markers, so the index is rebuilt. Partitions without aborted transactions skip this.
        False: a maintenance job holds the partition (nothing looked at; try later)."""
        if not self.txns.aborted():
            return self.log.refresh()
        before = [(s.base_offset, s.size) for s in self.log.segments()[:-1]]
        if not self.log.refresh():
            return False
        after = [(s.base_offset, s.size) for s in self.log.segments()[:-1]]
        only_deleted = len(after) <= len(before) and after == before[len(before) - len(after):]
        if only_deleted:  # unchanged, or a prefix gone
            self.txns.forget_before(self.log.log_start_offset)
        else:
            self.rebuild_txn_state()
        return True

    def rebuild_txn_state(self) -> None:
        """Open and aborted transactions from the whole log's batch headers (I/O thread; at open)."""
        self.txns = PartitionTxns(f"{self.topic}-{self.index}")
        scan_log([info.path for info in self.log.segments()], self.txns)
        self.txns.forget_before(self.log.log_start_offset)
