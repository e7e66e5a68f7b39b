"""Segment retention (UnifiedLog.deleteOldSegments) rule by rule, plus properties of any plan."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from topiclake.segments.config import LogConfig
from topiclake.segments.log_summary import LogSummary, SegmentSummary
from topiclake.segments.retention import DeletionReason, deletable_segments

NOW = 1_000_000
DELETE = LogConfig(retention_ms=-1)  # policy delete, no time limit unless a test sets one


def log_of(*segments: tuple[int, int, int], leo: int, start: int | None = None, hw: int | None = None) -> LogSummary:
    """segments: (base offset, size, largest timestamp)."""
    segs = tuple(SegmentSummary(b, size, ts) for b, size, ts in segments)
    return LogSummary("events", 3, segs, segs[0].base_offset if start is None else start, leo, high_watermark=hw)


FOUR = log_of((0, 100, NOW - 5000), (10, 100, NOW - 4000), (20, 100, NOW - 3000), (30, 50, NOW - 10), leo=35)


def test_retention_ms_uses_largest_timestamp_and_stops_at_first_young_segment():
    plan = deletable_segments(FOUR, LogConfig(retention_ms=3500), NOW)
    assert plan.base_offsets == (0, 10)
    assert {d.reason for d in plan.deletions} == {DeletionReason.RETENTION_MS_BREACH}
    assert plan.log_start_offset == 20 and not plan.roll_required
    # strictly greater: a segment exactly retention.ms old stays
    assert deletable_segments(FOUR, LogConfig(retention_ms=4000), NOW).base_offsets == (0,)
    # a young segment stops the walk even if older ones follow
    mixed = log_of((0, 1, NOW), (10, 1, NOW - 9999), (20, 1, NOW), leo=21)
    assert deletable_segments(mixed, LogConfig(retention_ms=10), NOW).base_offsets == ()
    assert deletable_segments(FOUR, DELETE, NOW).base_offsets == ()


def test_retention_bytes_never_goes_below_the_limit():
    # size 350, limit 250: diff 100 -> only the first segment (100 - 100 >= 0), then 0 - 100 < 0
    plan = deletable_segments(FOUR, LogConfig(retention_ms=-1, retention_bytes=250), NOW)
    assert plan.base_offsets == (0,) and plan.deletions[0].reason is DeletionReason.RETENTION_SIZE_BREACH
    assert deletable_segments(FOUR, LogConfig(retention_ms=-1, retention_bytes=249), NOW).base_offsets == (0,)
    assert deletable_segments(FOUR, LogConfig(retention_ms=-1, retention_bytes=150), NOW).base_offsets == (0, 10)
    assert deletable_segments(FOUR, LogConfig(retention_ms=-1, retention_bytes=351), NOW).base_offsets == ()
    assert deletable_segments(FOUR, LogConfig(retention_ms=-1, retention_bytes=-1), NOW).base_offsets == ()


def test_log_start_offset_breach_under_every_policy():
    log = log_of((0, 100, NOW), (10, 100, NOW), (20, 100, NOW), leo=25, start=20)
    for config in (DELETE, LogConfig(cleanup_policy=("compact",), retention_ms=1)):
        plan = deletable_segments(log, config, NOW)
        assert plan.base_offsets == (0, 10)
        assert {d.reason for d in plan.deletions} == {DeletionReason.LOG_START_OFFSET_BREACH}
        assert plan.log_start_offset == 20
    # a log start offset inside a segment keeps that segment
    assert deletable_segments(log_of((0, 1, NOW), (10, 1, NOW), leo=15, start=12), DELETE, NOW).base_offsets == (0,)
    # compact only: time and size do not apply
    old = log_of((0, 100, 0), (10, 100, 0), leo=15)
    assert deletable_segments(old, LogConfig(cleanup_policy=("compact",), retention_ms=1), NOW).base_offsets == ()
    assert deletable_segments(old, LogConfig(cleanup_policy=("compact", "delete"), retention_ms=1),
                              NOW).base_offsets == (0, 10)


def test_passes_run_in_kafka_order_each_on_what_is_left():
    log = log_of((0, 100, NOW - 9000), (10, 100, NOW - 9000), (20, 100, NOW - 9000), (30, 100, NOW), leo=35, start=10)
    plan = deletable_segments(log, LogConfig(retention_ms=5000, retention_bytes=250), NOW)
    assert [(d.base_offset, d.reason) for d in plan.deletions] == [
        (0, DeletionReason.LOG_START_OFFSET_BREACH),  # size left 300, diff 50: nothing by size
        (10, DeletionReason.RETENTION_MS_BREACH),
        (20, DeletionReason.RETENTION_MS_BREACH),
    ]
    assert plan.log_start_offset == 30


def test_never_past_the_high_watermark():
    log = log_of((0, 100, 0), (10, 100, 0), (20, 100, 0), leo=25, hw=15)
    assert deletable_segments(log, LogConfig(retention_ms=1), NOW).base_offsets == (0,)
    log = log_of((0, 100, 0), (10, 100, 0), (20, 100, 0), leo=25, hw=20)
    assert deletable_segments(log, LogConfig(retention_ms=1), NOW).base_offsets == (0, 10)


def test_everything_deletable_needs_a_roll_and_an_empty_last_segment_stays():
    log = log_of((0, 100, 0), (10, 100, 0), leo=17)
    plan = deletable_segments(log, LogConfig(retention_ms=1), NOW)
    assert plan.base_offsets == (0, 10) and plan.roll_required and plan.log_start_offset == 17
    rolled = log_of((0, 100, 0), (10, 0, -1), leo=10)
    plan = deletable_segments(rolled, LogConfig(retention_ms=1), NOW)
    assert plan.base_offsets == (0,) and not plan.roll_required and plan.log_start_offset == 10
    # an empty non-last segment is deletable by size even at diff 0 (0 - 0 >= 0)
    gap = log_of((0, 0, NOW), (10, 100, NOW), (20, 0, -1), leo=20)
    assert deletable_segments(gap, LogConfig(retention_ms=-1, retention_bytes=100), NOW).base_offsets == (0,)


def test_protected_groups_hold_segments_back():
    log = log_of((0, 100, 0), (10, 100, 0), (20, 100, 0), (30, 100, NOW), leo=35)
    config = LogConfig(retention_ms=1000)
    plan = deletable_segments(log, config, NOW, protect_offsets={"etl": 25, "audit": 12, "fast": 35})
    assert plan.base_offsets == (0,)  # segment 10 ends at 20 > audit's 12
    assert [d.base_offset for d in plan.held_back] == [10, 20]
    assert plan.blocking_groups == ("audit",) and plan.protect_offset == 12
    assert plan.log_start_offset == 10
    plan = deletable_segments(log, config, NOW, protect_offsets=20)
    assert plan.base_offsets == (0, 10) and [d.base_offset for d in plan.held_back] == [20]
    plan = deletable_segments(log, config, NOW, protect_offsets={})
    assert plan.base_offsets == (0, 10, 20) and plan.held_back == () and plan.protect_offset is None
    # a group exactly at a segment's end lets it go
    assert deletable_segments(log, config, NOW, protect_offsets={"g": 30}).base_offsets == (0, 10, 20)


_segment = st.tuples(st.integers(1, 20), st.integers(0, 200), st.integers(NOW - 10_000, NOW + 100))


@settings(max_examples=200, deadline=None)
@given(segs=st.lists(_segment, min_size=1, max_size=8), data=st.data())
def test_any_plan_is_a_safe_prefix(segs, data):
    bases, base = [], data.draw(st.integers(0, 50))
    for span, _size, _ts in segs:
        bases.append(base)
        base += span
    leo = base if segs[-1][1] else bases[-1]
    summaries = tuple(SegmentSummary(b, size, ts) for b, (_span, size, ts) in zip(bases, segs))
    if summaries[-1].size == 0:
        summaries = summaries[:-1] + (SegmentSummary(bases[-1], 0, -1),)
    hw = data.draw(st.integers(bases[-1], leo))
    start = data.draw(st.integers(bases[0], hw))
    log = LogSummary("t", 0, summaries, start, leo, high_watermark=hw)
    config = LogConfig(retention_ms=data.draw(st.integers(-1, 12_000)),
                       retention_bytes=data.draw(st.integers(-1, 1000)))
    protect = data.draw(st.one_of(st.none(), st.integers(0, leo + 5)))
    plan = deletable_segments(log, config, NOW, protect_offsets=protect)
    n = len(plan.deletions)
    assert plan.base_offsets == tuple(bases[:n])  # only a prefix, oldest first
    bound = hw if protect is None else min(hw, protect)
    assert all(d.upper_bound <= bound for d in plan.deletions)
    assert plan.roll_required == (n == len(bases))
    expected_start = leo if plan.roll_required else max(start, bases[n])
    assert plan.log_start_offset == expected_start <= hw
    if config.retention_bytes >= 0 and not plan.roll_required:
        size_deleted = sum(d.size for d in plan.deletions if d.reason is DeletionReason.RETENTION_SIZE_BREACH)
        before = sum(s.size for s in summaries) - sum(d.size for d in plan.deletions
                                                      if d.reason is DeletionReason.LOG_START_OFFSET_BREACH)
        assert size_deleted == 0 or before - size_deleted >= config.retention_bytes
