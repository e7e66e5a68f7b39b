"""A partition directory after takeovers, built the way the broker builds one (PartitionFence +
Log.open(epochs=..., create_segment=...) + record_start + take_over), with everything a fenced
leader can leave behind for readers to ignore: late batches in its old active segment, and
segment files it created after the takeover (squatters), one of them last by name.

    leader A (epoch 1)  0.log   a0..a9 (offsets 0-9), then late k1@10 (epoch 1, invalid)
    leader B (epoch 2) 10.log   b10@10
    A's squatter       11.log   late k2@11          (B's roll to 11 found it taken: B went to 12)
    B                  12.log   b12@12, b13@13
    A's squatter       13.log   late k0@13
    B (active)         14.log   b14@14
    A's squatter       15.log   late k4@15          (the last .log by name)

The late batches carry keys of valid records, so a reader that counted them would drop or shadow
valid data (compaction's offset map, a floor lookup, the "active segment" of retention).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from topiclake.segments import filenames
from topiclake.segments.batch import Record, build_batch, iter_batches
from topiclake.segments.config import LogConfig
from topiclake.segments.leader_fence import PartitionFence
from topiclake.segments.log import Log

BASE_TS = 1_714_521_600_000  # 2024-05-01T00:00:00Z
CONFIG = LogConfig(segment_bytes=1 << 20)


def batch(first_ts: int, *records: tuple[bytes, bytes]) -> bytes:
    return build_batch([Record(i, first_ts + i * 1000, key, value) for i, (key, value) in enumerate(records)])


def lead(directory: Path, epoch: int, config: LogConfig = CONFIG) -> Log:
    """A takeover as the broker runs it: claim, load with the history, record the start, roll."""
    fence = PartitionFence(directory)
    history = fence.begin_takeover(epoch)
    log = Log.open(directory, config, epochs=history, create_segment=fence.create_segment)
    log.epochs = fence.record_start(epoch, log.log_end_offset)
    log.take_over()
    return log


def log_records(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record the broker's Log serves, from its log start offset."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        result = log.read(offset, 1 << 20)
        if result.size == 0:
            break
        out += [(r.offset, r.key, r.value) for b in iter_batches(result.to_bytes()) for r in b.records()]
        offset = result.next_offset
    return out


@dataclass(frozen=True)
class FencedPartition:
    directory: Path
    valid: tuple[tuple[int, bytes, bytes], ...]  # (offset, key, value) of every record of the log
    late: tuple[tuple[int, bytes, bytes], ...]  # what the fenced leader wrote after the takeover
    squatters: tuple[int, ...]  # base offsets of the fenced leader's segment files
    segments: tuple[int, ...]  # base offsets of the log's segments (the last one is B's active)
    leader: Log  # B, still leading (epoch 2)
    fenced: Log  # A

    def squatter_files(self) -> dict[int, tuple[int, int, bytes]]:
        """base -> (inode, size, bytes) of each squatter's .log: to prove nobody touched them."""
        out = {}
        for base in self.squatters:
            path = filenames.log_file(self.directory, base)
            out[base] = (path.stat().st_ino, path.stat().st_size, path.read_bytes())
        return out

    def close(self) -> None:
        self.fenced.close_handlers()
        self.leader.close_handlers()


def build(directory: Path) -> FencedPartition:
    directory.mkdir(parents=True, exist_ok=True)
    ts = BASE_TS
    a = lead(directory, 1)
    a_values = [(f"k{i % 5}".encode(), f"a{i}".encode()) for i in range(10)]
    a.append(batch(ts, *a_values[:5]), leader_epoch=1)
    a.append(batch(ts + 5000, *a_values[5:]), leader_epoch=1)
    a.flush()

    b = lead(directory, 2)  # A is paused, not dead: its Log stays open
    late = []

    def a_late(key: bytes) -> None:
        result = a.append(batch(ts + 60_000, (key, b"late")), leader_epoch=1)
        a.flush()
        late.append((result.first_offset, key, b"late"))

    a_late(b"k1")  # offset 10, in A's old segment 0
    b.append(batch(ts + 10_000, (b"kb0", b"b10")), leader_epoch=2)
    assert b.active_segment.base_offset == 10  # B's first append made its own segment
    a.roll()  # A creates 11 (free), a squatter
    a_late(b"k2")
    b.roll()  # 11 is taken: B continues at 12
    assert b.active_segment.base_offset == 12
    b.append(batch(ts + 12_000, (b"kb1", b"b12"), (b"k3", b"b13")), leader_epoch=2)
    a.roll()  # A's end is 12: taken, so 13
    a_late(b"k0")
    b.roll()
    assert b.active_segment.base_offset == 14
    b.append(batch(ts + 14_000, (b"k4", b"b14")), leader_epoch=2)
    a.roll()  # A's end is 14: taken, so 15, the last name
    a_late(b"k4")
    b.flush()
    valid = tuple((i, k, v) for i, (k, v) in enumerate(a_values)) + (
        (10, b"kb0", b"b10"), (12, b"kb1", b"b12"), (13, b"k3", b"b13"), (14, b"k4", b"b14"))
    assert [o for o, _k, _v in late] == [10, 11, 13, 15]
    return FencedPartition(directory, valid, tuple(late), (11, 13, 15), (0, 10, 12, 14), b, a)
