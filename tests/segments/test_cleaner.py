"""The log cleaner against a model of Kafka's rules (cleaner_model), plus the rules one by one.

Hypothesis builds logs (keys, tombstones, keyless records, several producers'
committed and aborted transactions, epoch bumps, codecs, segments) and cleans them over two
rounds; every output batch must be what the model expects, CRC-valid, with its offsets and
lastOffsetDelta preserved, byte-identical when untouched.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from topiclake.segments.batch import Record, TimestampType, build_batch, iter_batches
from topiclake.segments.cleanable import (calculate_cleanable_bytes, cleanable_offsets, filthiest, log_to_clean,
                                          max_compaction_delay, rank_cleanable)
from topiclake.segments import arrow, arrow_encode, cleaner
from topiclake.segments.cleaner import clean_log, group_segments_by_size, rewrite_log
from topiclake.segments.compression import Compression
from topiclake.segments.config import LogConfig
from topiclake.segments.errors import CorruptRecordError
from topiclake.segments.leader_epochs import EpochHistory
from topiclake.segments.log_summary import InvalidLogStateError, LogSummary, SegmentData, SegmentSummary
from topiclake.segments import offset_map
from topiclake.segments.offset_map import (OffsetMap, build_offset_map, key_digest, key_digests, offset_map_entries,
                                            task_offset_map)
from topiclake.segments.txn_metadata import (AbortedIndex, AbortedTxn, LastRecord, collect_aborted_txns,
                                             producer_last_records)

from .cleaner_model import T0, TOPIC, Expected, LogBuilder, check_against_model, model_clean


# ---------------------------------------------------------------------------------------------
# Hypothesis workloads

_key = st.one_of(st.sampled_from([b"a", b"b", b"c", b"d", b""]), st.none())
_value = st.one_of(st.none(), st.binary(min_size=1, max_size=6))
_records = st.lists(st.tuples(_key, _value), min_size=1, max_size=4)
_codec = st.sampled_from([Compression.NONE, Compression.NONE, Compression.GZIP, Compression.LZ4])
_dt = st.integers(1, 400)
_op = st.one_of(
    st.tuples(st.just("plain"), _records, _codec, _dt, st.booleans()),
    st.tuples(st.just("idempotent"), _records, _codec, _dt, st.integers(10, 11)),
    st.tuples(st.just("txn"), _records, _codec, _dt, st.integers(0, 2)),
    st.tuples(st.just("end"), st.integers(0, 2), st.booleans(), st.integers(0, 5), _dt),
    st.tuples(st.just("roll")),
)


def apply_ops(log: LogBuilder, ops) -> None:
    for op in ops:
        if op[0] == "plain":
            log.data(op[1], compression=op[2], dt=op[3], log_append_time=op[4])
        elif op[0] == "idempotent":
            log.data(op[1], producer_id=op[4], compression=op[2], dt=op[3])
        elif op[0] == "txn":
            log.data(op[1], producer_id=op[4], transactional=True, compression=op[2], dt=op[3])
        elif op[0] == "end":
            if op[1] in log.open_txns:
                log.marker(op[1], commit=op[2], bump_epoch=op[3] == 0, dt=op[4])
        else:
            log.roll()


def before_control(log: LogBuilder, e: Expected) -> bool:
    return next(b for b in log.batches() if b.base_offset == e.base_offset).is_control


def clean_round(log: LogBuilder, *, checkpoint, config: LogConfig, now: int):
    ltc = log_to_clean(log.summary(), checkpoint, config, now)
    expected, end = model_clean(log.batches(), first_dirty=ltc.first_dirty_offset,
                                upper=ltc.first_uncleanable_offset, now=now,
                                delete_retention_ms=config.delete_retention_ms)
    result = clean_log(log.segment_data(), first_dirty_offset=ltc.first_dirty_offset,
                       first_uncleanable_offset=ltc.first_uncleanable_offset, config=config, now_ms=now,
                       topic=TOPIC, partition=0)
    check_against_model(log, result, expected, end)
    stats = result.stats
    for name in ("batches_copied", "batches_rebuilt", "batches_emptied"):
        if getattr(stats, name):
            event(name)
    if any(e.horizon is not None for e in expected):
        event("delete horizon")
    if stats.batches_read > len(expected):
        event("batches deleted")
    markers_in = sum(1 for b in log.batches() if b.is_control and b.base_offset < end)
    if markers_in > sum(1 for e in expected if before_control(log, e)):
        event("markers deleted")
    if collect_aborted_txns(log.batches()):
        event("aborted transactions")
    log.apply(result)
    return result


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops1=st.lists(_op, min_size=3, max_size=30), ops2=st.lists(_op, max_size=20), data=st.data())
def test_cleaner_matches_model_over_two_rounds(ops1, ops2, data):
    log = LogBuilder()
    apply_ops(log, ops1)
    if data.draw(st.booleans()):  # otherwise open transactions hold the last stable offset back
        for pid in list(log.open_txns):
            log.marker(pid, commit=data.draw(st.booleans()))
    log.roll()
    config = LogConfig(cleanup_policy=("compact",), delete_retention_ms=data.draw(st.integers(0, 3000)),
                       segment_bytes=data.draw(st.integers(100, 4000)),
                       min_compaction_lag_ms=data.draw(st.sampled_from([0, 0, 500])))
    checkpoint = data.draw(st.one_of(st.none(), st.none(), st.integers(0, log.next_offset + 3)))
    now = log.clock + data.draw(st.integers(0, 1000))
    first = clean_round(log, checkpoint=checkpoint, config=config, now=now)
    apply_ops(log, ops2)
    log.roll()
    log.clock = max(log.clock, now)
    clean_round(log, checkpoint=first.checkpoint, config=config, now=log.clock + data.draw(st.integers(0, 5000)))


@contextlib.contextmanager
def python_twins():
    """The cleaner without its native kernels (decoder, digests, record encoder)."""
    with mock.patch.object(arrow, "HAS_NATIVE", False), \
            mock.patch.object(offset_map, "digest_bytes", offset_map.digest_bytes_reference), \
            mock.patch.object(cleaner, "_encode_sections", arrow_encode.encode_sections_reference):
        yield


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(_op, min_size=3, max_size=30), data=st.data())
def test_native_and_python_twins_write_the_same_bytes(ops, data):
    log = LogBuilder()
    apply_ops(log, ops)
    log.roll()
    config = LogConfig(cleanup_policy=("compact",), delete_retention_ms=data.draw(st.integers(0, 3000)),
                       segment_bytes=data.draw(st.integers(100, 4000)))
    now = log.clock + data.draw(st.integers(0, 4000))
    max_entries = data.draw(st.one_of(st.none(), st.integers(0, 8)))

    def clean():
        ltc = log_to_clean(log.summary(), None, config, now)
        r = clean_log(log.segment_data(), first_dirty_offset=ltc.first_dirty_offset,
                      first_uncleanable_offset=ltc.first_uncleanable_offset, config=config, now_ms=now,
                      max_map_entries=max_entries, topic=TOPIC, partition=0)
        return [(g.base_offset, g.data, g.stats) for g in r.groups], r.checkpoint, r.offset_map_entries

    native = clean()
    with python_twins():
        assert clean() == native


def test_record_encoder_twins_agree_on_headers_nulls_slices_and_wild_timestamps():
    records = [Record(100 + i, ts, key, value, headers) for i, (ts, key, value, headers) in enumerate([
        (T0, b"k", b"v", ()), (-(2**63), None, None, (("h", None), ("\u00e9", b""))),
        (2**63 - 1, b"", b"x" * 300, (("a", b"1"),)), (T0 + 5, b"k2", None, ())])]
    table = arrow.decode_record_batches(list(iter_batches(build_batch(records, base_offset=100))))
    batch = table.to_batches()[0]
    for piece in (batch, batch.slice(1)):
        rows = np.array([0, 2, 1, 0][: piece.num_rows], np.int64)
        args = (piece, rows, np.array([0, 1, len(rows)], np.int64), np.array([100, 90], np.int64),
                np.array([2**62, -(2**62)], np.int64))
        expected = arrow_encode.encode_sections_reference(*args)
        if offset_map.HAS_NATIVE:
            assert arrow_encode.encode_sections_native(*args) == expected
    if offset_map.HAS_NATIVE:
        with pytest.raises(ValueError, match="row"):
            arrow_encode.encode_sections_native(batch, np.array([7], np.int64), np.array([0, 1], np.int64),
                                                np.array([0], np.int64), np.array([0], np.int64))


# ---------------------------------------------------------------------------------------------
# Rules, one by one


def _offsets(result) -> list[int]:
    return [r.offset for g in result.groups for b in iter_batches(g.data) for r in b.records()]


def _clean(log: LogBuilder, *, now: int, checkpoint=None, config=None, **kwargs):
    config = config or LogConfig(cleanup_policy=("compact",), delete_retention_ms=1000)
    ltc = log_to_clean(log.summary(), checkpoint, config, now)
    result = clean_log(log.segment_data(), first_dirty_offset=ltc.first_dirty_offset,
                       first_uncleanable_offset=ltc.first_uncleanable_offset, config=config, now_ms=now,
                       topic=TOPIC, partition=0, **kwargs)
    log.apply(result)
    return result


def test_latest_value_per_key_wins_and_keyless_records_go():
    log = LogBuilder()
    log.data([(b"a", b"1"), (b"b", b"1"), (None, b"x")])
    log.data([(b"a", b"2")])
    log.roll()
    log.data([(b"c", b"1")])  # active segment: never cleaned
    result = _clean(log, now=log.clock)
    assert _offsets(result) == [1, 3]
    assert result.checkpoint == 4
    assert [b.base_offset for b in log.batches()] == [0, 3, 4]


def test_tombstones_go_in_two_passes():
    log = LogBuilder()
    log.data([(b"k", b"v")])
    log.data([(b"k", None)])
    log.data([(b"other", b"v")])
    log.roll()
    now = log.clock
    first = _clean(log, now=now)
    (tomb,) = [b for b in log.batches() if b.base_offset == 1]
    assert tomb.header.has_delete_horizon and tomb.header.delete_horizon == now + 1000
    assert [r.value for r in tomb.records()] == [None]
    assert tomb.records()[0].timestamp == T0 + 20  # the record keeps its timestamp under the new base

    # A cleaning before the horizon keeps it (byte for byte: nothing changes in that batch).
    log.data([(b"x", b"1")])
    log.roll()
    before = bytes(tomb.data)
    second = _clean(log, now=now + 999, checkpoint=first.checkpoint)
    (tomb2,) = [b for b in log.batches() if b.base_offset == 1]
    assert bytes(tomb2.data) == before

    # At the horizon it is gone.
    log.data([(b"y", b"1")])
    log.roll()
    _clean(log, now=now + 1000, checkpoint=second.checkpoint)
    assert 1 not in [r.offset for b in log.batches() for r in b.records()]


def test_aborted_data_goes_and_markers_follow_in_later_rounds():
    log = LogBuilder()
    log.data([(b"a", b"1")])
    log.data([(b"a", b"aborted")], producer_id=0, transactional=True)
    log.marker(0, commit=False)
    log.data([(b"b", b"1")], producer_id=1, transactional=True)
    log.marker(1, commit=True)
    log.data([(b"z", b"1")])  # keep the producers' batches from being their last ones
    log.data([(b"z2", b"1")], producer_id=0, transactional=True)
    log.marker(0, commit=True)
    log.data([(b"z3", b"1")], producer_id=1, transactional=True)
    log.marker(1, commit=True)
    log.roll()
    now = log.clock
    first = _clean(log, now=now)
    kept = {b.base_offset: b for b in log.batches()}
    assert 1 not in kept  # aborted data, and not the producer's last data batch
    assert [r.offset for r in kept[0].records()] == [0]  # "a"=1 survives: the aborted "a" never entered the map
    assert kept[2].is_control and not kept[2].header.has_delete_horizon  # ABORT kept: its data was seen
    assert kept[4].is_control and not kept[4].header.has_delete_horizon  # COMMIT kept: data traversed

    log.data([(b"q", b"1")])
    log.roll()
    second = _clean(log, now=now + 10, checkpoint=first.checkpoint)
    kept = {b.base_offset: b for b in log.batches()}
    assert kept[2].header.delete_horizon == now + 10 + 1000  # nothing of its txn left: horizon first
    assert kept[4].header.delete_horizon is None  # its data is still there

    log.data([(b"r", b"1")])
    log.roll()
    third = _clean(log, now=now + 10 + 999, checkpoint=second.checkpoint)
    assert 2 in {b.base_offset for b in log.batches()}  # horizon not reached
    log.data([(b"s", b"1")])
    log.roll()
    _clean(log, now=now + 10 + 1000, checkpoint=third.checkpoint)  # deleteHorizon <= now: gone
    assert 2 not in {b.base_offset for b in log.batches()}


def test_producers_last_batch_and_round_end_are_kept_empty():
    log = LogBuilder()
    log.data([(b"a", b"1")], producer_id=10)  # idempotent producer's last batch, superseded below
    log.data([(b"a", b"2")])
    log.data([(b"b", b"1")])
    log.data([(b"b", b"2")])  # round's last batch (kept: latest for b)
    log.roll()
    _clean(log, now=log.clock)
    by_base = {b.base_offset: b for b in log.batches()}
    assert by_base[0].header.records_count == 0 and by_base[0].header.producer_id == 10
    assert by_base[0].header.base_sequence == 0 and by_base[0].header.last_offset_delta == 0
    assert 2 not in by_base

    log2 = LogBuilder()
    log2.data([(b"a", b"1")])
    log2.data([(b"a", b"2"), (b"b", b"1")])
    log2.data([(b"a", b"3"), (b"b", b"2")])
    log2.data([(b"a", b"4"), (None, b"keyless")])  # offsets 5-6, next offset = round's upper bound
    log2.roll()
    log2.data([(b"a", b"5")])
    # round end: the last batch keeps its offsets [5, 6] even though only offset 5 survives
    _clean(log2, now=log2.clock)
    last = [b for b in log2.batches() if b.base_offset == 5][0]
    assert [r.offset for r in last.records()] == [5] and last.last_offset == 6


def test_producer_with_no_data_offset_keeps_its_current_epoch_marker():
    log = LogBuilder()
    log.data([(b"a", b"1")], producer_id=0, transactional=True)
    marker = log.marker(0, commit=False, bump_epoch=True)  # fenced: epoch 1, no data offset
    log.data([(b"z", b"1")])
    log.roll()
    assert producer_last_records(log.batches())[0] == LastRecord(None, 1)
    first = _clean(log, now=log.clock)
    checkpoint, now = first.checkpoint, log.clock
    for _round in range(3):  # 2nd round: horizon set; 3rd: records go, batch stays; 4th: still there
        log.data([(b"y", b"1")])
        log.roll()
        now += 10_000
        checkpoint = _clean(log, now=now, checkpoint=checkpoint).checkpoint
    (m,) = [b for b in log.batches() if b.base_offset == marker]
    assert m.is_control and m.header.records_count == 0 and m.header.producer_epoch == 1


def test_rebuilt_batches_keep_codec_and_log_append_time():
    log = LogBuilder()
    log.data([(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], compression=Compression.ZSTD)
    log.data([(b"a", b"1"), (b"b", b"1")], log_append_time=True)
    log.data([(b"a", b"2")])
    log.roll()
    _clean(log, now=log.clock)
    b0, b3 = [b for b in log.batches() if b.base_offset in (0, 3)]
    assert b0.compression is Compression.ZSTD and [r.offset for r in b0.records()] == [2]
    assert b0.header.last_offset_delta == 2
    assert b3.header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.offset for r in b3.records()] == [4] and b3.header.max_timestamp == T0 + 20


def test_offset_map_stops_when_full_and_round_stops_there():
    log = LogBuilder()
    log.data([(b"a", b"1")])
    log.roll()
    log.data([(b"b", b"1"), (b"c", b"1"), (b"a", b"2"), (b"c", b"2")])  # offsets 1-4
    log.roll()
    log.data([(b"b", b"2")])
    log.roll()
    log.data([(b"z", b"1")])
    result = _clean(log, now=log.clock, max_map_entries=2)
    # full when "c"@2 arrives: the map holds a@0, b@1 and covers offsets up to 1
    assert result.checkpoint == 2 and result.offset_map_entries == 2
    # segments 0 and 1 are rewritten; above offset 1 nothing is judged (c@2 and a@3 stay);
    # segment 5 (b@5) is beyond the round, so b@1 stays too
    assert [g.replaces for g in result.groups] == [(0, 1)]
    assert _offsets(result) == [0, 1, 2, 3, 4]


def test_dirty_range_starts_at_checkpoint():
    log = LogBuilder()
    log.data([(b"a", b"1")])
    log.roll()
    log.data([(b"a", b"2")])
    log.roll()
    log.data([(b"z", b"1")])
    # the map covers [1, 2): "a"@1 supersedes "a"@0 in the clean part as well
    result = _clean(log, now=log.clock, checkpoint=1)
    assert _offsets(result) == [1] and result.checkpoint == 2


# ---------------------------------------------------------------------------------------------
# Transactions and the offset map


def test_collect_aborted_txns_and_index():
    log = LogBuilder()
    log.data([(b"a", b"1")], producer_id=0, transactional=True)  # 0
    log.data([(b"a", b"1")], producer_id=1, transactional=True)  # 1
    log.data([(b"a", b"1")], producer_id=0, transactional=True)  # 2
    log.marker(0, commit=False)  # 3
    log.marker(1, commit=True)  # 4
    log.data([(b"a", b"1")], producer_id=0, transactional=True)  # 5, still open
    aborted = collect_aborted_txns(log.batches())
    assert aborted == (AbortedTxn(0, 0, 3),)
    index = AbortedIndex(aborted)
    assert [index.is_aborted(b.header) for b in log.batches()] == [True, False, True, False, False, False]


def test_offset_map_of_digests_sharing_their_first_word():
    words = np.array([[5, 9], [5, 2], [1, 7], [5, 9], [5, 2]], np.uint64)
    built = OffsetMap.from_words(words, np.array([0, 1, 2, 3, 4]), latest_offset=4)
    assert built.words.tolist() == [[1, 7], [5, 2], [5, 9]] and built.offsets.tolist() == [2, 4, 3]
    queries = np.array([[5, 2], [5, 9], [5, 3], [1, 7], [0, 0]] * 300, np.uint64)  # searched in sorted order
    assert built.lookup(queries).tolist() == [4, 3, -1, 2, -1] * 300


def test_offset_map_built_by_the_first_word_equals_the_full_sort():
    rng = np.random.default_rng(7)
    distinct = rng.integers(0, 2**64, size=(3000, 2), dtype=np.uint64)
    words = distinct[rng.integers(0, len(distinct), 20_000)]
    offsets = rng.permutation(20_000).astype(np.int64)  # shares merge in any order
    built = OffsetMap.from_words(words, offsets, latest_offset=20_000)
    assert built == OffsetMap._from_words_lexsorted(words, offsets, 20_000) and len(built) <= 3000
    queries = np.concatenate([words[:5000], rng.integers(0, 2**64, size=(5000, 2), dtype=np.uint64)])
    expected = [int(built.offsets[i]) if i < len(built) and (built.words[i] == q).all() else -1
                for q, i in zip(queries, np.searchsorted(built.words[:, 0], queries[:, 0]))]
    assert built.lookup(queries).tolist() == expected


def test_offset_map_leaves_out_a_fenced_leaders_batch():
    # Cluster mode: epoch 2 starts at offset 1, so the epoch-1 batch at offset 1 (a fenced leader's
    # late append) is no part of the log; its key must not shadow the valid record at offset 0.
    history = EpochHistory({1: 0, 2: 1})
    old = build_batch([Record(0, T0, b"a", b"valid")], partition_leader_epoch=1)
    late = build_batch([Record(1, T0, b"a", b"late")], partition_leader_epoch=1)
    new = build_batch([Record(1, T0, b"b", b"new")], partition_leader_epoch=2)
    segments = [SegmentData(0, old + late), SegmentData(1, new)]
    built = build_offset_map(segments, start=0, end=2, aborted=(), epochs=history)
    assert built.get(b"a") == 0 and built.get(b"b") == 1 and built.latest_offset == 1
    assert build_offset_map(segments, start=0, end=2, aborted=()).get(b"a") == 1  # what the filter prevents


def test_offset_map_from_outside_matches_the_builder():
    log = LogBuilder()
    log.data([(b"a", b"1"), (b"b", b"1")])
    log.data([(b"a", b"x")], producer_id=0, transactional=True)
    log.marker(0, commit=False)
    log.data([(b"b", b"2"), (None, b"k")])
    log.roll()
    aborted = collect_aborted_txns(log.batches())
    built = build_offset_map(log.segment_data(), start=0, end=6, aborted=aborted)
    entries = offset_map_entries(log.batches(), start=0, end=6, aborted=aborted)
    outside = OffsetMap.from_table(entries, latest_offset=5)
    assert outside == built and outside.latest_offset == 5 and len(outside) == 2
    assert outside.get(b"a") == 0 and outside.get(b"b") == 4 and outside.get(b"nope") == -1
    digests = outside.to_table().column("digest")
    as_bytes = np.frombuffer(b"".join(digests.to_pylist()), dtype=np.uint8).reshape(-1, 16)
    for form in (digests, as_bytes, digests.to_pylist(), outside.words):
        assert OffsetMap.from_arrays(form, outside.offsets, latest_offset=5) == outside
    assert OffsetMap.from_table(outside.to_table(), latest_offset=5) == outside
    assert key_digests(pa.array([b"a", None], pa.binary())).to_pylist() == [key_digest(b"a"), None]
    # the Spark shape: tasks' pre-aggregated shares merged on the driver
    shares = [task_offset_map(log.batches(), start=s, end=e, aborted=aborted) for s, e in ((0, 3), (3, 6))]
    assert OffsetMap.merge(shares, latest_offset=5) == outside


def test_offset_map_keeps_the_max_offset_and_finds_digests_sharing_a_word():
    words = np.array([[5, 9], [5, 1], [5, 9], [2, 7], [5, 4]], np.uint64)
    m = OffsetMap.from_words(words, np.array([10, 11, 3, 12, 13], np.int64), latest_offset=20)
    assert m.words.tolist() == [[2, 7], [5, 1], [5, 4], [5, 9]] and m.offsets.tolist() == [12, 11, 13, 10]
    queries = np.array([[5, 4], [5, 9], [5, 5], [2, 7], [9, 9], [0, 0]], np.uint64)
    assert m.lookup(queries).tolist() == [13, 10, -1, 12, -1, -1]
    assert OffsetMap.empty().lookup(queries).tolist() == [-1] * 6


def test_native_digests_equal_hashlib():
    keys = pa.array([b"", b"a", None, b"x" * 55, b"y" * 56, b"z" * 64, bytes(range(256)) * 9, None], pa.binary())
    expected = b"".join(bytes(16) if k is None else hashlib.md5(k).digest() for k in keys.to_pylist())
    assert offset_map.digest_bytes_reference(keys) == expected
    if offset_map.HAS_NATIVE:
        assert offset_map.digest_bytes_native(keys) == expected
        sliced = pa.chunked_array([keys.slice(1, 3), keys.slice(4)])
        assert offset_map.digest_bytes_native(sliced) == expected[16:64] + expected[64:]


def test_rewrite_with_an_outside_map_equals_clean_log():
    log = LogBuilder()
    for i in range(12):
        log.data([(bytes([97 + i % 3]), str(i).encode())])
        if i % 4 == 3:
            log.roll()
    config = LogConfig(cleanup_policy=("compact",))
    ltc = log_to_clean(log.summary(), None, config, log.clock)
    entries = offset_map_entries(log.batches(), start=ltc.first_dirty_offset, end=ltc.first_uncleanable_offset,
                                 aborted=())
    m = OffsetMap.from_table(entries, latest_offset=ltc.first_uncleanable_offset - 1)
    a = rewrite_log(log.segment_data(), m, first_uncleanable_offset=ltc.first_uncleanable_offset, config=config,
                    now_ms=log.clock, topic=TOPIC, partition=0)
    b = clean_log(log.segment_data(), first_dirty_offset=ltc.first_dirty_offset,
                  first_uncleanable_offset=ltc.first_uncleanable_offset, config=config, now_ms=log.clock)
    assert [g.data for g in a.groups] == [g.data for g in b.groups] and a.checkpoint == b.checkpoint == 12


def test_corrupt_segment_names_partition_and_segment():
    log = LogBuilder()
    log.data([(b"a", b"1")])
    log.roll()
    base, blob = log.segments[0]
    log.segments[0] = (base, blob[:-1] + bytes([blob[-1] ^ 1]))
    with pytest.raises(CorruptRecordError, match="t-0 segment 0.*CRC mismatch in batch at offset 0"):
        clean_log(log.segment_data(), first_dirty_offset=0, first_uncleanable_offset=1,
                  config=LogConfig(cleanup_policy=("compact",)), now_ms=log.clock, topic=TOPIC, partition=0)


# ---------------------------------------------------------------------------------------------
# Grouping


def _seg(base: int, size: int, index: int = 0) -> SegmentData:
    return SegmentData(base, b"\0" * size, offset_index_bytes=index, time_index_bytes=index)


def test_group_segments_by_size():
    segs = [_seg(0, 40), _seg(10, 40), _seg(20, 40), _seg(30, 10)]
    groups = group_segments_by_size(segs, max_size=100, max_index_size=1000, first_uncleanable_offset=40)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 10], [20, 30]]
    groups = group_segments_by_size(segs, max_size=1000, max_index_size=15, first_uncleanable_offset=40)
    assert len(groups) == 1
    segs_idx = [_seg(0, 1, 8), _seg(10, 1, 8)]
    assert len(group_segments_by_size(segs_idx, max_size=1000, max_index_size=15, first_uncleanable_offset=20)) == 2


def test_group_offset_span_must_fit_int32():
    big = 2**31
    segs = [_seg(0, 1), _seg(100, 1), _seg(big + 50, 1)]
    groups = group_segments_by_size(segs, max_size=1000, max_index_size=1000, first_uncleanable_offset=big + 60)
    # segment 100's last offset is bounded by big+49: too far from base 0
    assert [[s.base_offset for s in g] for g in groups] == [[0], [100, big + 50]]
    # an empty segment never breaks a group on offsets
    segs = [_seg(0, 1), _seg(100, 0), _seg(big + 50, 1)]
    groups = group_segments_by_size(segs, max_size=1000, max_index_size=1000, first_uncleanable_offset=big + 60)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 100], [big + 50]]


# ---------------------------------------------------------------------------------------------
# Choosing the log and the cleanable range


def _summary(sizes_and_stamps, *, leo, lso=None, start=0):
    bases = [b for b, *_ in sizes_and_stamps]
    segs = tuple(SegmentSummary(b, size, ts, first) for b, size, ts, first in sizes_and_stamps)
    return LogSummary(TOPIC, 0, segs, start, leo, last_stable_offset=lso)


def test_cleanable_offsets_bounds():
    log = _summary([(0, 100, 1000, 900), (10, 100, 2000, 1900), (20, 100, 3000, 2900), (30, 0, 0, -1)], leo=30)
    cfg = LogConfig(cleanup_policy=("compact",))
    assert cleanable_offsets(log, None, cfg, 5000).first_uncleanable_dirty_offset == 30  # active segment
    assert cleanable_offsets(log, 10, cfg, 5000).first_dirty_offset == 10
    bad = cleanable_offsets(log, 99, cfg, 5000)
    assert bad.first_dirty_offset == 0 and bad.force_update_checkpoint
    lagged = dataclasses.replace(cfg, min_compaction_lag_ms=2500)  # segments newer than 2500 wait
    assert cleanable_offsets(log, None, lagged, 5000).first_uncleanable_dirty_offset == 20
    lso_log = _summary([(0, 100, 1000, 900), (10, 100, 2000, 1900), (20, 0, 0, -1)], leo=20, lso=15)
    offsets = cleanable_offsets(lso_log, None, cfg, 5000)
    assert offsets.first_uncleanable_dirty_offset == 15
    assert calculate_cleanable_bytes(lso_log, 0, 15) == (10, 100)  # rounded down to the segment base


def test_ratio_eligibility_and_ranking():
    cfg = LogConfig(cleanup_policy=("compact",))
    log = _summary([(0, 100, 1000, 900), (10, 100, 2000, 1900), (20, 100, 3000, 2900), (30, 0, 0, -1)], leo=30)
    half = log_to_clean(log, 10, cfg, 5000)  # wait: clean 100, dirty 200
    assert (half.clean_bytes, half.cleanable_bytes) == (100, 200)
    assert half.cleanable_ratio == pytest.approx(2 / 3) and half.eligible
    exactly_half = log_to_clean(log, 10, dataclasses.replace(cfg, min_cleanable_dirty_ratio=2 / 3), 5000)
    assert not exactly_half.eligible  # strictly greater than the ratio
    overdue = log_to_clean(log, 20, dataclasses.replace(cfg, max_compaction_lag_ms=1000), 5000)
    assert overdue.need_compaction_now and overdue.eligible and overdue.cleanable_ratio < 0.5
    assert max_compaction_delay(log, 20, dataclasses.replace(cfg, max_compaction_lag_ms=1000), 5000) == 5000 - 1000 - 2900
    not_compact = log_to_clean(log, 10, LogConfig(), 5000)
    assert not not_compact.eligible
    assert rank_cleanable([overdue, half, not_compact]) == [half, overdue]
    assert filthiest([not_compact]) is None


def test_log_summary_validates_and_names_partition():
    with pytest.raises(InvalidLogStateError, match="t-0"):
        LogSummary(TOPIC, 0, (SegmentSummary(10, 1), SegmentSummary(5, 1)), 0, 20)
    with pytest.raises(InvalidLogStateError, match="t-0"):
        LogSummary(TOPIC, 0, (SegmentSummary(0, 1),), 0, 20, high_watermark=10, last_stable_offset=12)
