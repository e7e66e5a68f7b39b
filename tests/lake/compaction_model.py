"""Random compacted-topic workloads written through the segment store's `Log` (real rolls and
indexes), and the MODEL of what a read_committed consumer sees after one Kafka cleaning round.

The model (Kafka's rules, consumer view, first round, delete horizons not yet reached):
- records at or above the round's upper bound U (the active segment's base, or the LSO) stay;
- below U: a record stays iff it has a key, is not aborted, and is the latest committed record
  of its key in [checkpoint, U); tombstones stay (they only get a horizon);
- a second round at or past the horizon (delete.retention.ms=0) also drops the tombstones that
  were below the first round's U.
A read_committed consumer never sees control records nor aborted data (wherever they are).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from topiclake.segments.batch import Record, build_batch, iter_batches
from topiclake.segments.config import LogConfig
from topiclake.segments.control import build_end_txn_marker
from topiclake.segments.log import Log
from topiclake.segments.storage import StorageLayout, TopicRegistry
from topiclake.segments.txn_metadata import AbortedIndex, collect_aborted_txns

COMPACT_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "1200", "index.interval.bytes": "200",
                  "delete.retention.ms": "0", "min.cleanable.dirty.ratio": "0.01"}


@dataclass(frozen=True, slots=True)
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    aborted: bool


def write_workload(root, topic: str, *, seed: int, ops: int = 60, partitions: int = 1,
                   config: dict | None = None, now_ms: int = 1_714_521_600_000) -> list[list[Rec]]:
    """Random keyed data, tombstones, null keys, committed and aborted transactions; returns
    every record per partition (the log as written)."""
    rng = random.Random(seed)
    layout = StorageLayout(root)
    TopicRegistry(layout).create(topic, partitions, {**COMPACT_CONFIG, **(config or {})})
    log_config = TopicRegistry(layout).get(topic).log_config
    out = []
    for p in range(partitions):
        log = Log.open(layout.log_dir(topic, p), log_config, topic=topic, partition=p, now_ms=now_ms)
        written: list[Rec] = []
        open_txn: dict[int, list[int]] = {}
        clock = now_ms
        for _ in range(ops):
            clock += 10
            roll = rng.random()
            if roll < 0.55:
                recs = []
                for _ in range(rng.randint(1, 4)):
                    key = None if rng.random() < 0.08 else f"key-{rng.randint(0, 9)}".encode()
                    value = None if rng.random() < 0.15 else f"v{rng.random():.6f}".encode() * rng.randint(1, 3)
                    recs.append((key, value))
                _append(log, recs, clock, written, aborted=False)
            elif roll < 0.85:
                pid = rng.choice([7001, 7002])
                recs = [(f"key-{rng.randint(0, 9)}".encode(), f"t{pid}-{rng.random():.5f}".encode())
                        for _ in range(rng.randint(1, 3))]
                first = _append(log, recs, clock, written, aborted=False, producer_id=pid)
                open_txn.setdefault(pid, []).extend(range(first, first + len(recs)))
            elif open_txn:
                pid = rng.choice(sorted(open_txn))
                commit = rng.random() < 0.6
                offset = log.log_end_offset
                log.append(build_end_txn_marker(offset=0, timestamp=clock, producer_id=pid, producer_epoch=0,
                                                commit=commit), now_ms=clock)
                if not commit:
                    aborted = set(open_txn[pid])
                    written[:] = [Rec(r.offset, r.key, r.value, True) if r.offset in aborted else r for r in written]
                del open_txn[pid]
                assert log.log_end_offset == offset + 1
        for pid in sorted(open_txn):  # settle every transaction (an open one would hold the LSO)
            log.append(build_end_txn_marker(offset=0, timestamp=clock, producer_id=pid, producer_epoch=0,
                                            commit=True), now_ms=clock)
        log.close()
        out.append(written)
    return out


_SEQUENCES: dict[tuple[int, int], int] = {}


def _append(log: Log, recs, clock, written, *, aborted: bool, producer_id: int = -1) -> int:
    first = log.log_end_offset
    txn = producer_id >= 0
    seq = _SEQUENCES.get((id(log), producer_id), 0)
    batch = build_batch([Record(i, clock, k, v, ()) for i, (k, v) in enumerate(recs)], base_offset=0,
                        producer_id=producer_id, producer_epoch=0 if txn else -1,
                        base_sequence=seq if txn else -1, is_transactional=txn)
    if txn:
        _SEQUENCES[(id(log), producer_id)] = seq + len(recs)
    result = log.append(batch, now_ms=clock)
    written += [Rec(result.first_offset + i, k, v, aborted) for i, (k, v) in enumerate(recs)]
    return result.first_offset


def append_more(root, topic: str, partition: int, count: int, *, now_ms: int) -> list[Rec]:
    """Append `count` records of fresh keys, roll, and append one more (so they become dirty)."""
    layout = StorageLayout(root)
    config = TopicRegistry(layout).get(topic).log_config
    log = Log.open(layout.log_dir(topic, partition), config, topic=topic, partition=partition, now_ms=now_ms)
    written: list[Rec] = []
    for i in range(count):
        _append(log, [(f"fresh-{i % 5}".encode(), f"f{i}".encode())], now_ms + i, written, aborted=False)
    log.roll()
    _append(log, [(b"fresh-last", b"x")], now_ms + count, written, aborted=False)
    log.close()
    return written


def model_round(records: list[Rec], *, upper: int, checkpoint: int = 0,
                drop_tombstones_below: int = -1) -> list[Rec]:
    """What one cleaning round over [checkpoint, upper) keeps; tombstones below
    `drop_tombstones_below` got their delete horizon in an earlier round and it has passed."""
    latest: dict[bytes, int] = {}
    for r in records:
        if checkpoint <= r.offset < upper and r.key is not None and not r.aborted:
            latest[r.key] = r.offset
    kept = []
    for r in records:
        if r.offset >= upper:
            kept.append(r)
        elif r.key is not None and not r.aborted and latest.get(r.key, -1) <= r.offset:
            if r.value is not None or r.offset >= drop_tombstones_below:
                kept.append(r)
    return kept


def committed_view(records: list[Rec]) -> list[tuple[int, bytes | None, bytes | None]]:
    """What a read_committed consumer sees."""
    return [(r.offset, r.key, r.value) for r in records if not r.aborted]


def read_log_records(directory, config: LogConfig | None = None) -> list[tuple[int, bytes | None, bytes | None]]:
    """The committed records of a partition directory, opened (and repaired) by Log.open."""
    log = Log.open(directory, config or LogConfig())
    try:
        batches = []
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            result = log.read(offset, 1 << 20)
            batches += list(iter_batches(result.to_bytes()))
            offset = result.next_offset
        index = AbortedIndex(collect_aborted_txns(batches))
        return [(r.offset, r.key, r.value) for b in batches if not b.is_control and not index.is_aborted(b.header)
                for r in b.records()]
    finally:
        log.close()


def active_base(directory) -> int:
    return max(int(p.name.split(".")[0]) for p in directory.glob("*.log"))
