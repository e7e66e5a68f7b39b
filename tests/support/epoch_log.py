"""A minimal partition log over real segment files and real v2 batches, for the leader-epoch tests:
a leader that takes over, appends (write, fsync, fence check, acknowledge) and rolls, and a
reader that applies the epoch rules the way the broker's fetch, recovery and Spark's decode will.

It also runs as a process (`python -m tests.support.epoch_log leader DIR EPOCH ...`) so tests can
SIGSTOP, SIGCONT and kill a leader that shares the directory with another.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from topiclake.segments import filenames
from topiclake.segments.batch import HEADER_SIZE, Record, build_batch, iter_batches, read_header
from topiclake.segments.errors import CorruptRecordError
from topiclake.segments.leader_epochs import EpochHistory
from topiclake.segments.leader_fence import FencedLeaderError, PartitionFence


@dataclass(frozen=True)
class ReadBatch:
    base_offset: int
    next_offset: int
    epoch: int
    values: tuple[bytes, ...]


def _segment_bases(directory: Path) -> list[int]:
    bases = []
    for name in os.listdir(directory):
        parsed = filenames.parse_name(name)
        if parsed is not None and not parsed.transient and parsed.kind == filenames.LOG_SUFFIX:
            bases.append(parsed.base_offset)
    return sorted(bases)


def _first_header(path: Path):
    with open(path, "rb") as f:
        head = f.read(HEADER_SIZE)
    try:
        return read_header(head) if len(head) == HEADER_SIZE else None
    except CorruptRecordError:
        return None


def read_log(directory: Path, history: EpochHistory, *, with_values: bool = True) -> list[ReadBatch]:
    """Every valid batch, in offset order: segments that count (first batch valid), each read
    from its start to a torn tail or the next counted segment's base, invalid batches skipped."""
    counted = []
    for base in _segment_bases(directory):
        header = _first_header(filenames.log_file(directory, base))
        if header is not None and history.counts_segment(header.base_offset, header.partition_leader_epoch):
            counted.append(base)
    out: list[ReadBatch] = []
    for index, base in enumerate(counted):
        limit = counted[index + 1] if index + 1 < len(counted) else None
        data = filenames.log_file(directory, base).read_bytes()
        try:
            for batch in iter_batches(data, allow_partial_tail=True):
                if limit is not None and batch.base_offset >= limit:
                    break
                if history.is_valid(batch.base_offset, batch.header.partition_leader_epoch, batch.last_offset):
                    values = tuple(r.value for r in batch.records()) if with_values else ()
                    out.append(ReadBatch(batch.base_offset, batch.next_offset,
                                         batch.header.partition_leader_epoch, values))
        except CorruptRecordError:
            pass  # a torn write in the middle of a stale leader's tail: the segment ends here
    return out


def recovered_end(directory: Path, history: EpochHistory) -> int:
    batches = read_log(directory, history, with_values=False)
    return batches[-1].next_offset if batches else 0


class Leader:
    """One leader of one epoch over `directory` (the broker's Log, reduced to what fencing needs)."""

    def __init__(self, directory: Path, epoch: int, broker_id: int = 0):
        self.directory = Path(directory)
        self.epoch = epoch
        self.fence = PartitionFence(directory)
        self.broker_id = broker_id
        self.next_offset = 0
        self.segment_fd: int | None = None
        self.acked: list[int] = []

    def take_over(self, after_recovery=None) -> int:
        """Claim, seal, recover, record the start, roll: returns the first segment's base.
        `after_recovery(end)` runs between the recovery and recording the start."""
        history = self.fence.begin_takeover(self.epoch, broker_id=self.broker_id)
        end = recovered_end(self.directory, history)
        if after_recovery is not None:
            after_recovery(end)
        self.fence.record_start(self.epoch, end)
        return self.roll(end)

    def roll(self, base: int) -> int:
        if self.segment_fd is not None:
            os.close(self.segment_fd)
        base = self.fence.create_segment(base)
        self.segment_fd = os.open(filenames.log_file(self.directory, base), os.O_WRONLY | os.O_APPEND)
        self.next_offset = base
        return base

    def write(self, value: bytes) -> int:
        """Append one single-record batch stamped with this epoch and fsync it: not yet acked."""
        offset = self.next_offset
        batch = build_batch([Record(offset, int(time.time() * 1000), None, value)], base_offset=offset,
                            partition_leader_epoch=self.epoch)
        os.write(self.segment_fd, batch)
        os.fsync(self.segment_fd)
        self.next_offset = offset + 1
        return offset

    def acknowledge(self, offset: int) -> None:
        """The fence check between the fsync and the answer to the producer."""
        self.fence.check(self.epoch)
        self.acked.append(offset)


def _leader_main(args) -> int:
    """Take over, then append --count records; report each ack as a JSON line on stdout.
    --stop-before-start: SIGSTOP itself after recovering, before recording its start.
    --stop-before-check N: SIGSTOP itself after the fsync of record N, before its fence check
    (the worst moment to be paused)."""
    leader = Leader(Path(args.dir), args.epoch, broker_id=args.epoch)

    def pause(end: int) -> None:
        print(json.dumps({"recovered": end, "stopping": True}), flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)

    try:
        base = leader.take_over(pause if args.stop_before_start else None)
    except FencedLeaderError as exc:
        print(json.dumps({"fenced": str(exc), "at": "takeover"}), flush=True)
        return 3
    print(json.dumps({"leading": args.epoch, "base": base}), flush=True)
    for number in range(args.count):
        value = f"e{args.epoch}-{number}"
        offset = leader.write(value.encode())
        if number == args.stop_before_check:
            print(json.dumps({"written": offset, "stopping": True}), flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
        try:
            leader.acknowledge(offset)
        except FencedLeaderError as exc:
            # A real leader stops here; this one also writes `--late` more records (as a paused
            # process's queued writes would land) to prove nobody ever reads them.
            for _ in range(args.late):
                leader.write(b"late")
            print(json.dumps({"fenced": str(exc), "at": offset}), flush=True)
            return 3
        print(json.dumps({"acked": offset, "value": value}), flush=True)
        if args.interval:
            time.sleep(args.interval)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    leader = commands.add_parser("leader")
    leader.add_argument("dir")
    leader.add_argument("epoch", type=int)
    leader.add_argument("--count", type=int, default=10)
    leader.add_argument("--interval", type=float, default=0.0)
    leader.add_argument("--stop-before-check", type=int, default=-1)
    leader.add_argument("--late", type=int, default=3)
    leader.add_argument("--stop-before-start", action="store_true")
    args = parser.parse_args(argv)
    return _leader_main(args)


if __name__ == "__main__":
    sys.exit(main())
