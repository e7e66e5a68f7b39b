"""The Arrow evaluator of per-task expectations against great-expectations itself: for random
rows (nulls, NaNs, duplicates) and random arguments, every supported expectation gives the
verdict, the counts and the sample great-expectations' pandas engine gives on the same rows."""

from __future__ import annotations

import datetime as dt
import json
import math

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topiclake.lake.quality import expectations as arrow_expectations
from topiclake.lake.quality import gate

UTC = dt.timezone.utc

ints = st.one_of(st.none(), st.integers(-3, 3))
floats = st.one_of(st.none(), st.floats(-3, 3, allow_nan=False, width=32), st.just(math.nan))
strings = st.one_of(st.none(), st.text("ab", max_size=3))
stamps = st.one_of(st.none(), st.integers(0, 3).map(lambda s: dt.datetime(2024, 5, 1, 0, 0, s, tzinfo=UTC)))


@st.composite
def tables(draw) -> pa.Table:
    n = draw(st.integers(1, 12))
    column = lambda values: draw(st.lists(values, min_size=n, max_size=n))  # noqa: E731
    return pa.table({
        "topic": pa.array(column(st.sampled_from(["t", "u"])), pa.string()),
        "partition": pa.array(column(st.integers(0, 1)), pa.int32()),
        "offset": pa.array(column(st.one_of(st.none(), st.integers(0, 4))), pa.int64()),
        "i": pa.array(column(ints), pa.int64()),
        "j": pa.array(column(ints), pa.int64()),
        "f": pa.array(column(floats), pa.float64()),
        "s": pa.array(column(strings), pa.string()),
        "ts": pa.array(column(stamps), pa.timestamp("us", tz="UTC")),
        "ts2": pa.array(column(stamps), pa.timestamp("us", tz="UTC")),
        "ok": pa.array(column(st.booleans()), pa.bool_()),
    })


NUMERIC = ["i", "j", "f"]
bound = st.one_of(st.none(), st.integers(-3, 3), st.sampled_from([-1.5, 0.5, 2.5]))
ignore_pair = st.sampled_from([{}, {"ignore_row_if": "both_values_are_missing"},
                               {"ignore_row_if": "either_value_is_missing"}, {"ignore_row_if": "neither"}])
ignore_multi = st.sampled_from([{}, {"ignore_row_if": "all_values_are_missing"},
                                {"ignore_row_if": "any_value_is_missing"}, {"ignore_row_if": "never"}])


@st.composite
def expectations(draw) -> dict:
    kind = draw(st.sampled_from(sorted(arrow_expectations._KINDS)))
    if kind in ("expect_column_values_to_not_be_null", "expect_column_values_to_be_null",
                "expect_column_values_to_be_unique"):
        kwargs = {"column": draw(st.sampled_from(["offset", "i", "f", "s", "ts"]))}
    elif kind.endswith("in_set"):
        column = draw(st.sampled_from(["i", "f", "s", "ok"]))
        values = {"i": st.integers(-3, 3), "f": st.sampled_from([-1.0, 0.0, 1.5, 2.0]), "s": st.text("ab", max_size=2),
                  "ok": st.booleans()}[column]
        kwargs = {"column": column, "value_set": draw(st.lists(values, max_size=3))}
    elif kind == "expect_column_values_to_be_between":
        low, high = draw(bound), draw(bound)
        if low is None and high is None:
            low = 0
        if low is not None and high is not None and low > high:
            low, high = high, low
        kwargs = {"column": draw(st.sampled_from(NUMERIC)), "min_value": low, "max_value": high,
                  "strict_min": draw(st.booleans()), "strict_max": draw(st.booleans())}
    elif kind == "expect_column_value_lengths_to_be_between":
        low = draw(st.integers(0, 2))
        kwargs = {"column": "s", "min_value": low, "max_value": draw(st.one_of(st.none(), st.integers(low, 3)))}
    elif kind == "expect_column_value_lengths_to_equal":
        kwargs = {"column": "s", "value": draw(st.integers(0, 3))}
    elif kind.startswith("expect_column_pair"):
        pair = draw(st.sampled_from([("i", "j"), ("ts", "ts2"), ("j", "i")]))
        kwargs = {"column_A": pair[0], "column_B": pair[1], **draw(ignore_pair)}
        if kind.endswith("greater_than_b"):
            kwargs["or_equal"] = draw(st.booleans())
    else:
        columns = draw(st.sampled_from([["topic", "partition", "offset"], ["i", "j"], ["offset", "f"], ["s", "i"]]))
        kwargs = {"column_list": columns, **draw(ignore_multi)}
    return {"type": kind, "kwargs": kwargs}


def _value(v):
    """A sample value as both sides mean it: pandas shows a missing value as NaN or NaT, and a
    timestamp inside a pair without its zone."""
    if isinstance(v, list):
        return [_value(x) for x in v]
    if isinstance(v, dict):
        return {k: _value(x) for k, x in v.items()}
    if (isinstance(v, float) and math.isnan(v)) or v == "NaT":
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)  # pandas holds an integer column with nulls as floats
    if isinstance(v, str) and len(v) >= 19 and v[4] == "-" and v[10] == "T":
        stamp = dt.datetime.fromisoformat(v)
        return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).isoformat()
    return v


def _comparable(result: dict) -> dict:
    """The part the driver merges."""
    body = result["result"]
    return {"success": result["success"], "element_count": body["element_count"],
            "unexpected_count": body["unexpected_count"], "missing_count": body.get("missing_count"),
            "partial_unexpected_list": _value(json.loads(json.dumps(body.get("partial_unexpected_list", [])))),
            "partial_unexpected_counts": _counts(body.get("partial_unexpected_counts", []))}


def _counts(entries: list[dict]) -> dict:
    """Counts by value (pandas' NaN never equals itself, so its counts may come split)."""
    out: dict[str, int] = {}
    for entry in json.loads(json.dumps(entries)):
        key = json.dumps(_value(entry["value"]))
        out[key] = out.get(key, 0) + entry["count"]
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(), expectations())
def test_arrow_verdicts_equal_great_expectations(rows, expectation):
    assert arrow_expectations.supports(expectation, rows.schema), expectation
    ours = arrow_expectations.evaluate(rows, expectation)
    [theirs] = gate._validate_with_gx(rows, [expectation], table="t")
    assert not gate._exception_messages(theirs["exception_info"]), theirs["exception_info"]
    mine, expected = _comparable(ours), _comparable(theirs)
    if "partial_unexpected_counts" not in theirs["result"]:
        # pandas' NaNs split the counts into ties it then fails to sort: great-expectations gives none
        mine.pop("partial_unexpected_counts"), expected.pop("partial_unexpected_counts")
    assert mine == expected, (expectation, rows.to_pydict())


def test_default_suite_runs_without_great_expectations_in_tasks(monkeypatch):
    """The default suite is all Arrow: a task never builds great-expectations' validator."""
    monkeypatch.setattr(gate, "_task_validator", lambda: pytest.fail("great-expectations used in a task"))
    rows = pa.table({"topic": ["t"] * 3, "partition": pa.array([0] * 3, pa.int32()),
                     "offset": pa.array([5, 6, 6], pa.int64()),
                     "timestamp": pa.array([1, None, 3], pa.timestamp("ms", tz="UTC"))})
    outcome = json.loads(gate.validate_rows(rows, gate.Suite(tuple(gate.DEFAULT_SUITE["expectations"]),
                                                                   "default").task_document(),
                                               table="t", min_offset=5, max_offset=5))
    unique, offset_set, partition_set, timestamp_set, in_range = outcome["results"]
    assert outcome["rows"] == 3
    assert (unique["success"], unique["result"]["unexpected_count"]) == (False, 2)
    assert offset_set["success"] and partition_set["success"]
    assert (timestamp_set["success"], timestamp_set["result"]["unexpected_count"]) == (False, 1)
    assert (in_range["success"], in_range["result"]["unexpected_count"]) == (False, 2)  # 6 is past max_offset


@pytest.mark.parametrize("expectation", [
    {"type": "expect_column_values_to_match_regex", "kwargs": {"column": "s", "regex": "^a"}},
    {"type": "expect_column_values_to_be_in_set", "kwargs": {"column": "s", "value_set": ["a"], "mostly": 0.5}},
    {"type": "expect_column_values_to_be_in_set", "kwargs": {"column": "s"}},  # no value_set
    {"type": "expect_column_values_to_be_in_set", "kwargs": {"column": "i", "value_set": ["a"]}},  # type mismatch
    {"type": "expect_column_values_to_be_between", "kwargs": {"column": "s", "min_value": 1}},
    {"type": "expect_column_values_to_be_between", "kwargs": {"column": "i"}},
    {"type": "expect_column_values_to_be_between", "kwargs": {"column": "i", "min_value": 2, "max_value": 1}},
    {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "missing"}},
    {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "i", "unknown_argument": 1}},
    {"type": "expect_column_pair_values_to_be_equal", "kwargs": {"column_A": "i", "column_B": "i"}},
    {"type": "expect_compound_columns_to_be_unique", "kwargs": {"column_list": ["i"]}},
])
def test_anything_else_is_left_to_great_expectations(expectation):
    schema = pa.schema([("s", pa.string()), ("i", pa.int64())])
    assert not arrow_expectations.supports(expectation, schema)


def test_mixed_suite_keeps_each_result_in_its_place():
    """great-expectations returns a suite's results grouped its own way; each lands at its own
    expectation (a regex one runs through great-expectations, the rest through Arrow)."""
    rows = pa.table({"topic": ["t"] * 4, "partition": pa.array([0] * 4, pa.int32()),
                     "offset": pa.array([0, 1, 2, 3], pa.int64()), "s": ["a", None, "bb", "a"],
                     "n": pa.array([1, 2, None, 9], pa.int64())})
    exps = [{"type": "expect_column_values_to_match_regex", "kwargs": {"column": "s", "regex": "^b"}},
            {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "n"}},
            {"type": "expect_column_values_to_match_regex", "kwargs": {"column": "s", "regex": "^a"}},
            {"type": "expect_column_values_to_be_between", "kwargs": {"column": "n", "max_value": 5}}]
    outcome = json.loads(gate.validate_rows(rows, json.dumps({"expectations": exps}), table="t",
                                               min_offset=0, max_offset=3))
    counts = [r["result"]["unexpected_count"] for r in outcome["results"]]
    assert counts == [2, 1, 1, 1]
    assert outcome["results"][0]["result"]["partial_unexpected_list"] == ["a", "a"]
    assert outcome["results"][2]["result"]["partial_unexpected_list"] == ["bb"]


@pytest.mark.parametrize("offsets, unexpected", [
    ([5, 6, 7, 9], 0),  # strictly increasing: distinct by their order alone
    ([5, 6, 6, 9], 2),  # a repeat beside its twin
    ([9, 7, 6, 5], 0),  # not increasing: hashed
    ([5, 9, 5, 7], 2),
    ([5, None, 7, 8], 0),  # a null offset in a row with topic and partition is still a row to judge
])
def test_task_keys_by_offset_order(offsets, unexpected):
    rows = pa.table({"topic": ["t"] * 4, "partition": pa.array([3] * 4, pa.int32()),
                     "offset": pa.array(offsets, pa.int64())})
    expectation = {"type": "expect_compound_columns_to_be_unique", "kwargs": {"column_list": ["topic", "partition",
                                                                                               "offset"]}}
    ours = arrow_expectations.evaluate(rows, expectation)
    [theirs] = gate._validate_with_gx(rows, [expectation], table="t")
    assert ours["result"]["unexpected_count"] == theirs["result"]["unexpected_count"] == unexpected
