"""A log to clean and a model of Kafka's cleaner rules, for the cleaner's tests (test_cleaner).

The model (`model_clean`) restates Kafka's cleaner globally rather than as the cleaner's stream of
state: a transaction is a producer's data batches up to its marker, a marker may go iff its
transaction has no data batch in the log, the map is "latest offset per key over the dirty
committed data".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from topiclake.segments.batch import NO_TIMESTAMP, Record, RecordBatch, TimestampType, build_batch, iter_batches
from topiclake.segments.compression import Compression
from topiclake.segments.control import ControlRecordType, build_end_txn_marker, parse_control_key
from topiclake.segments.log_summary import LogSummary, SegmentData, SegmentSummary


T0 = 1_700_000_000_000
TOPIC = "t"


# ---------------------------------------------------------------------------------------------
# A log to clean: segments of real batch bytes, appended to like a broker would


@dataclass
class LogBuilder:
    segments: list[tuple[int, bytes]] = field(default_factory=lambda: [(0, b"")])
    next_offset: int = 0
    clock: int = T0
    epochs: dict[int, int] = field(default_factory=dict)
    sequences: dict[int, int] = field(default_factory=dict)
    open_txns: dict[int, int] = field(default_factory=dict)  # producer -> first offset

    def _append(self, data: bytes) -> None:
        base, blob = self.segments[-1]
        self.segments[-1] = (base, blob + data)

    def data(self, records: list[tuple[bytes | None, bytes | None]], *, producer_id: int = -1,
             transactional: bool = False, compression: Compression = Compression.NONE, dt: int = 10,
             log_append_time: bool = False) -> int:
        self.clock += dt
        first = self.next_offset
        recs = [Record(first + i, self.clock + i, k, v, ((("h", b"x"),) if i % 2 else ())) for i, (k, v) in
                enumerate(records)]
        seq = -1
        if producer_id >= 0:
            seq = self.sequences.get(producer_id, 0)
            self.sequences[producer_id] = seq + len(records)
            if transactional:
                self.open_txns.setdefault(producer_id, first)
        ts_type = TimestampType.LOG_APPEND_TIME if log_append_time else TimestampType.CREATE_TIME
        if log_append_time:
            recs = [dataclasses.replace(r, timestamp=self.clock) for r in recs]
        self._append(build_batch(recs, base_offset=first, compression=compression, timestamp_type=ts_type,
                                 producer_id=producer_id, producer_epoch=self.epochs.get(producer_id, 0)
                                 if producer_id >= 0 else -1, base_sequence=seq, is_transactional=transactional,
                                 partition_leader_epoch=3, max_timestamp=self.clock if log_append_time else None))
        self.next_offset += len(records)
        return first

    def marker(self, producer_id: int, *, commit: bool, bump_epoch: bool = False, dt: int = 10) -> int:
        self.clock += dt
        if bump_epoch:  # the coordinator fencing the producer aborts with a new epoch
            self.epochs[producer_id] = self.epochs.get(producer_id, 0) + 1
        offset = self.next_offset
        self._append(build_end_txn_marker(offset=offset, timestamp=self.clock, producer_id=producer_id,
                                          producer_epoch=self.epochs.get(producer_id, 0), commit=commit,
                                          partition_leader_epoch=3))
        self.open_txns.pop(producer_id, None)
        self.next_offset += 1
        return offset

    def roll(self) -> None:
        if self.segments[-1][1]:
            self.segments.append((self.next_offset, b""))

    # -- views
    def segment_data(self) -> list[SegmentData]:
        return [SegmentData(base, blob) for base, blob in self.segments]

    def batches(self) -> list[RecordBatch]:
        return [b for _base, blob in self.segments for b in iter_batches(blob)]

    def summary(self) -> LogSummary:
        summaries = []
        for base, blob in self.segments:
            stamps = [b.header.max_timestamp for b in iter_batches(blob)]
            summaries.append(SegmentSummary(base, len(blob), max(stamps, default=0), stamps[0] if stamps else -1))
        lso = min(self.open_txns.values(), default=self.next_offset)
        return LogSummary(TOPIC, 0, tuple(summaries), self.segments[0][0], self.next_offset,
                          last_stable_offset=lso)

    def apply(self, result) -> None:
        replaced = {b for g in result.groups for b in g.replaces}
        kept = [(b, d) for b, d in self.segments if b not in replaced]
        self.segments = sorted([(g.base_offset, g.data) for g in result.groups] + kept)


# ---------------------------------------------------------------------------------------------
# The model


@dataclass(frozen=True)
class Expected:
    base_offset: int
    last_offset_delta: int
    offsets: tuple[int, ...]
    horizon: int | None
    identical: bool
    empty: bool


def _kind(batch: RecordBatch) -> ControlRecordType | None:
    records = batch.records()
    return parse_control_key(records[0].key)[0] if records else None


def model_clean(batches: list[RecordBatch], *, first_dirty: int, upper: int, now: int,
                delete_retention_ms: int) -> tuple[list[Expected], int]:
    if first_dirty >= upper:
        return [], first_dirty  # nothing dirty: no round
    # Transactions: a producer's transactional data batches, closed by its next COMMIT/ABORT.
    txn_of: dict[int, dict] = {}  # batch index -> its transaction
    open_txn: dict[int, dict] = {}
    for i, b in enumerate(batches):
        h = b.header
        if not h.is_transactional:
            continue
        if not h.is_control:
            txn = open_txn.setdefault(h.producer_id, {"data": [], "kind": None})
            txn["data"].append(i)
            txn_of[i] = txn
        elif _kind(b) in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            txn = open_txn.pop(h.producer_id, {"data": [], "kind": None})
            txn["kind"] = _kind(b)
            txn_of[i] = txn

    def aborted(i: int) -> bool:
        return not batches[i].is_control and i in txn_of and txn_of[i]["kind"] is ControlRecordType.ABORT

    def marker_discardable(i: int) -> bool:
        kind = _kind(batches[i])
        if kind is None:
            return True
        if kind in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            return not txn_of[i]["data"]
        return False

    # Producers' last data offset / epoch.
    last: dict[int, tuple[int | None, int]] = {}
    for b in batches:
        h = b.header
        if h.producer_id < 0:
            continue
        data_off, epoch = last.get(h.producer_id, (None, h.producer_epoch))
        if epoch != h.producer_epoch:
            data_off = None
        last[h.producer_id] = (data_off if h.is_control else h.last_offset, h.producer_epoch)

    # Map: latest offset per key over the committed / plain data in [first_dirty, upper).
    latest_of: dict[bytes, int] = {}
    for i, b in enumerate(batches):
        if b.is_control or aborted(i):
            continue
        for r in b.records():
            if r.key is not None and first_dirty <= r.offset < upper:
                latest_of[r.key] = max(latest_of.get(r.key, -1), r.offset)
    end = upper
    latest = end - 1

    out = []
    for i, b in enumerate(batches):
        h = b.header
        if h.base_offset >= end:
            break
        discardable = marker_discardable(i) if h.is_control else aborted(i)
        horizon = h.delete_horizon
        drop_all = discardable and (not h.is_control or (horizon is not None and horizon <= now))
        lr = last.get(h.producer_id)
        producers_last = lr is not None and (h.last_offset == lr[0] if lr[0] is not None else
                                             (h.is_control and h.producer_epoch == lr[1]))
        keep_empty = (h.producer_id >= 0 and producers_last) or h.next_offset == upper
        records = b.records()
        if drop_all:
            kept = []
        elif h.is_control:
            kept = records
        else:
            kept = [r for r in records if r.offset > latest or (
                r.key is not None and r.offset >= latest_of.get(r.key, -1)
                and (r.value is not None or horizon is None or now < horizon))]
        if kept:
            new_horizon = (any(r.value is None for r in kept) or (h.is_control and discardable)) and horizon is None
            out.append(Expected(h.base_offset, h.last_offset_delta, tuple(r.offset for r in kept),
                                now + delete_retention_ms if new_horizon else horizon,
                                len(kept) == len(records) and not new_horizon, False))
        elif keep_empty:
            out.append(Expected(h.base_offset, h.last_offset_delta, (), None, False, True))
    return out, end


def check_against_model(log: LogBuilder, result, expected: list[Expected], checkpoint: int) -> None:
    before = {b.base_offset: b for b in log.batches()}
    assert result.checkpoint == checkpoint
    got = [b for g in result.groups for b in iter_batches(g.data, validate=True)]  # CRCs checked
    assert [(b.base_offset, tuple(r.offset for r in b.records())) for b in got] == \
           [(e.base_offset, e.offsets) for e in expected]
    for g in result.groups:
        batches = list(iter_batches(g.data))
        assert all(g.base_offset <= b.base_offset for b in batches)
        assert g.next_offset == (batches[-1].next_offset if batches else g.base_offset)
    for b, e in zip(got, expected):
        h, orig = b.header, before[b.base_offset]
        o = orig.header
        assert h.last_offset_delta == e.last_offset_delta
        assert (h.producer_id, h.producer_epoch, h.base_sequence) == (o.producer_id, o.producer_epoch, o.base_sequence)
        assert (h.is_transactional, h.is_control, h.partition_leader_epoch, h.timestamp_type) == \
               (o.is_transactional, o.is_control, o.partition_leader_epoch, o.timestamp_type)
        assert h.delete_horizon == e.horizon
        if e.identical:
            assert bytes(b.data) == bytes(orig.data)
        if e.empty:
            assert h.records_count == 0 and h.compression is Compression.NONE
            assert h.base_timestamp == NO_TIMESTAMP and h.max_timestamp == o.max_timestamp
            assert not h.has_delete_horizon
        else:
            assert h.compression is o.compression
            by_offset = {r.offset: r for r in orig.records()}
            assert b.records() == [by_offset[r.offset] for r in b.records()]
            if h.timestamp_type is TimestampType.CREATE_TIME:
                assert h.max_timestamp == max(r.timestamp for r in b.records())
            else:
                assert h.max_timestamp == o.max_timestamp
