"""Row-local expectations judged with Arrow compute, inside the ingest tasks.

great-expectations owns the suites, the merged result and Data Docs (gate.py). What each task
judges on its own rows — the expectations that look at one row at a time, and uniqueness keyed by
(topic, partition, offset) — is evaluated here with Arrow compute on the task's columns, as
great-expectations' pandas engine judges it: nulls are "missing" and never unexpected (except for
the null checks themselves), pair expectations ignore a row where both values are missing,
multicolumn ones a row where all are. The result is the part of great-expectations' SUMMARY result
the driver merges: element, missing and unexpected counts, the first unexpected values in row
order and their counts. tests/lake/test_expectations.py checks every supported form against
great-expectations itself.

Only exactly what is listed here is judged here (`supports`); any other expectation, or a keyword
argument not listed for it, runs through great-expectations instead. That keeps the executors free
of pandas and of great-expectations' import (seconds per Python worker) for the usual suites.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections import Counter
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

#: How many unexpected values a result keeps, as great-expectations' SUMMARY format does.
PARTIAL_UNEXPECTED = 20

#: Keyword arguments that never change the verdict of a task (mostly = 1 only: see `supports`).
_NEUTRAL = frozenset({"mostly", "result_format", "catch_exceptions", "include_config", "meta", "batch_id"})

# Per type: how it treats nulls — "column" (nulls are missing), "not_null"/"null" (nulls are the
# subject), "pair" (ignore_row_if over two columns), "multi" (ignore_row_if over a column list) —
# its required keyword arguments and its optional ones.
_KINDS: dict[str, tuple[str, frozenset[str], frozenset[str]]] = {
    "expect_column_values_to_not_be_null": ("not_null", frozenset({"column"}), frozenset()),
    "expect_column_values_to_be_null": ("null", frozenset({"column"}), frozenset()),
    "expect_column_values_to_be_in_set": ("column", frozenset({"column", "value_set"}), frozenset()),
    "expect_column_values_to_not_be_in_set": ("column", frozenset({"column", "value_set"}), frozenset()),
    "expect_column_values_to_be_between": ("column", frozenset({"column"}),
                                           frozenset({"min_value", "max_value", "strict_min", "strict_max"})),
    "expect_column_value_lengths_to_be_between": ("column", frozenset({"column"}),
                                                  frozenset({"min_value", "max_value", "strict_min", "strict_max"})),
    "expect_column_value_lengths_to_equal": ("column", frozenset({"column", "value"}), frozenset()),
    "expect_column_values_to_be_unique": ("column", frozenset({"column"}), frozenset()),
    "expect_column_pair_values_to_be_equal": ("pair", frozenset({"column_A", "column_B"}),
                                              frozenset({"ignore_row_if"})),
    "expect_column_pair_values_a_to_be_greater_than_b": ("pair", frozenset({"column_A", "column_B"}),
                                                         frozenset({"or_equal", "ignore_row_if"})),
    "expect_compound_columns_to_be_unique": ("multi", frozenset({"column_list"}), frozenset({"ignore_row_if"})),
}
_BOUNDED = frozenset({"expect_column_values_to_be_between", "expect_column_value_lengths_to_be_between"})
_PAIR_IGNORE = {"both_values_are_missing", "either_value_is_missing", "neither"}
_MULTI_IGNORE = {"all_values_are_missing", "any_value_is_missing", "never"}


def supports(expectation: dict, schema: pa.Schema | None = None) -> bool:
    """True when this module judges `expectation` exactly as great-expectations would (on a table
    of `schema`, when given: value sets and bounds must fit the column's type)."""
    kind = _KINDS.get(expectation.get("type"))
    if kind is None:
        return False
    nulls, required, optional = kind
    kwargs = expectation.get("kwargs") or {}
    if kwargs.get("mostly", 1) != 1 or not required <= set(kwargs) <= required | optional | _NEUTRAL:
        return False
    if nulls == "pair" and kwargs.get("ignore_row_if", "both_values_are_missing") not in _PAIR_IGNORE:
        return False
    if nulls == "multi" and (kwargs.get("ignore_row_if", "all_values_are_missing") not in _MULTI_IGNORE
                             or not isinstance(kwargs["column_list"], (list, tuple))
                             or len(kwargs["column_list"]) < 2):  # great-expectations refuses one column
        return False
    if expectation["type"] in _BOUNDED and kwargs.get("min_value") is None and kwargs.get("max_value") is None:
        return False  # great-expectations refuses it; let it say so
    if schema is not None:
        try:
            _check_types(expectation["type"], kwargs, schema)
        except (KeyError, TypeError, ValueError, pa.ArrowException):
            return False
    return True


def _check_types(kind: str, kwargs: dict, schema: pa.Schema) -> None:
    """Raises when a column is absent or an argument does not fit the column's type."""
    columns = ([kwargs[k] for k in ("column", "column_A", "column_B") if k in kwargs]
               + list(kwargs.get("column_list", ())))
    types = [schema.field(c).type for c in columns]  # KeyError: no such column
    if kind.endswith("_in_set"):
        _value_set(kwargs["value_set"], types[0])
    elif kind == "expect_column_values_to_be_between":
        if not (pa.types.is_integer(types[0]) or pa.types.is_floating(types[0])):
            raise TypeError("bounds are judged here on numeric columns only")
        for bound in (kwargs.get("min_value"), kwargs.get("max_value")):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, (int, float))):
                raise TypeError("numeric bounds only")
    if kind in _BOUNDED and None not in (kwargs.get("min_value"), kwargs.get("max_value")) and \
            kwargs["min_value"] > kwargs["max_value"]:
        raise ValueError("great-expectations reports min_value > max_value as an error")
    elif kind.startswith("expect_column_value_lengths"):
        if not (pa.types.is_string(types[0]) or pa.types.is_large_string(types[0])):
            raise TypeError("lengths of strings only")
        for key in ("min_value", "max_value", "value"):
            if kwargs.get(key) is not None and (isinstance(kwargs[key], bool) or not isinstance(kwargs[key], int)):
                raise TypeError("whole-number lengths only")
    elif kind.startswith("expect_column_pair"):
        if kwargs["column_A"] == kwargs["column_B"]:
            raise ValueError("a column paired with itself is left to great-expectations (pandas pairs it oddly)")
        if types[0] != types[1] or not (pa.types.is_integer(types[0]) or pa.types.is_floating(types[0])
                                        or pa.types.is_string(types[0]) or pa.types.is_timestamp(types[0])):
            raise TypeError("pairs of one comparable type only")
    if any(pa.types.is_nested(t) for t in types):
        raise TypeError("nested columns are judged by great-expectations")
    for flag in ("strict_min", "strict_max", "or_equal"):
        if not isinstance(kwargs.get(flag, False), (bool, type(None))):
            raise TypeError("flags are booleans")


def _value_set(values, type_: pa.DataType) -> pa.Array:
    if not isinstance(values, (list, tuple, set)):
        raise TypeError("value_set must be a list")
    if pa.types.is_boolean(type_) and not all(isinstance(v, bool) for v in values):
        raise TypeError("booleans only")
    if (pa.types.is_integer(type_) or pa.types.is_floating(type_)) and \
            any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in values):
        raise TypeError("numbers only")  # pandas would compare 1 == True, Arrow would refuse
    if (pa.types.is_string(type_) or pa.types.is_large_string(type_)) and not all(isinstance(v, str) for v in values):
        raise TypeError("strings only")
    if not (pa.types.is_boolean(type_) or pa.types.is_integer(type_) or pa.types.is_floating(type_)
            or pa.types.is_string(type_) or pa.types.is_large_string(type_)):
        raise TypeError("value sets of booleans, numbers and strings only")
    if pa.types.is_integer(type_) and any(isinstance(v, float) and not v.is_integer() for v in values):
        return pa.array(list(values), pa.float64())  # 1.5 is in no integer column, yet a valid member
    return pa.array(list(values), type_ if not pa.types.is_integer(type_) else pa.int64())


def evaluate(rows: pa.Table, expectation: dict) -> dict:
    """The expectation's verdict on `rows`, as great-expectations' SUMMARY result (the part the
    driver merges). `supports(expectation, rows.schema)` must be true."""
    kind = expectation["type"]
    kwargs = expectation.get("kwargs") or {}
    nulls = _KINDS[kind][0]
    n = rows.num_rows
    if nulls in ("not_null", "null", "column"):
        column = rows.column(kwargs["column"])
        if nulls == "not_null":
            considered, unexpected = _all(n), pc.invert(_present(column))
        elif nulls == "null":
            considered, unexpected = _all(n), _present(column)
        else:
            considered = _present(column)
            unexpected = pc.and_(considered, _COLUMN_RULES[kind](column, kwargs, rows))
        values = lambda mask: _values(column, mask)  # noqa: E731
    elif nulls == "pair":
        a, b = rows.column(kwargs["column_A"]), rows.column(kwargs["column_B"])
        ignore = kwargs.get("ignore_row_if", "both_values_are_missing")
        considered = _pair_considered(a, b, ignore)
        unexpected = pc.and_(considered, pc.fill_null(pc.invert(_PAIR_RULES[kind](a, b, kwargs)), True))
        values = lambda mask: [list(v) for v in zip(_values(a, mask), _values(b, mask))]  # noqa: E731
    else:
        names = list(kwargs["column_list"])
        ignore = kwargs.get("ignore_row_if", "all_values_are_missing")
        considered = _multi_considered([rows.column(c) for c in names], ignore, n)
        unexpected = pc.and_(considered, _duplicated(rows.select(names), considered))
        values = lambda mask: [dict(zip(names, v)) for v in zip(*(_values(rows.column(c), mask) for c in names))]  # noqa: E731
    unexpected_count = _count(unexpected)
    first = _first_true(unexpected, PARTIAL_UNEXPECTED)
    sample = values(first) if unexpected_count else []
    result: dict[str, Any] = {"element_count": n, "unexpected_count": unexpected_count,
                              "partial_unexpected_list": sample,
                              "partial_unexpected_counts": _counts(sample)}
    if nulls not in ("not_null", "null"):  # great-expectations reports no missing count for these
        result["missing_count"] = n - _count(considered)
    return {"success": unexpected_count == 0, "result": result,
            "exception_info": {"raised_exception": False, "exception_message": None, "exception_traceback": None}}


# -- the rules: True where a considered value is unexpected -----------------------------------

def _in_set(column, kwargs, _rows):
    return pc.invert(pc.is_in(_comparable(column, kwargs["value_set"]), value_set=_value_set_for(column, kwargs)))


def _not_in_set(column, kwargs, _rows):
    return pc.is_in(_comparable(column, kwargs["value_set"]), value_set=_value_set_for(column, kwargs))


def _comparable(column, value_set):
    """Integer columns against a set holding fractions compare as floats, as pandas does."""
    if pa.types.is_integer(column.type) and any(isinstance(v, float) and not v.is_integer() for v in value_set):
        return pc.cast(column, pa.float64())
    if pa.types.is_integer(column.type):
        return pc.cast(column, pa.int64())
    if pa.types.is_floating(column.type):
        return pc.add(column, 0.0)  # -0.0 + 0.0 is 0.0: hashing would tell -0.0 from 0.0, pandas does not
    return column


def _value_set_for(column, kwargs):
    values = _value_set(kwargs["value_set"], column.type)
    if pa.types.is_integer(column.type):
        return values.cast(_comparable(column, kwargs["value_set"]).type)
    return pc.add(values, 0.0) if pa.types.is_floating(column.type) else values


def _between(values, kwargs, _rows=None):
    low, high = kwargs.get("min_value"), kwargs.get("max_value")
    out = _none(values)
    if low is not None:
        out = pc.or_(out, (pc.less_equal if kwargs.get("strict_min") else pc.less)(values, low))
    if high is not None:
        out = pc.or_(out, (pc.greater_equal if kwargs.get("strict_max") else pc.greater)(values, high))
    return out


def _lengths_between(column, kwargs, _rows):
    return _between(pc.utf8_length(column), kwargs)


def _lengths_equal(column, kwargs, _rows):
    return pc.not_equal(pc.utf8_length(column), kwargs["value"])


def _unique(column, _kwargs, _rows):
    return _duplicated(pa.table({"v": column}), _present(column))


_COLUMN_RULES: dict[str, Callable] = {
    "expect_column_values_to_be_in_set": _in_set,
    "expect_column_values_to_not_be_in_set": _not_in_set,
    "expect_column_values_to_be_between": _between,
    "expect_column_value_lengths_to_be_between": _lengths_between,
    "expect_column_value_lengths_to_equal": _lengths_equal,
    "expect_column_values_to_be_unique": _unique,
}

_PAIR_RULES: dict[str, Callable] = {  # True where the pair is as expected; null: unexpected
    "expect_column_pair_values_to_be_equal": lambda a, b, kw: pc.equal(a, b),
    "expect_column_pair_values_a_to_be_greater_than_b":
        lambda a, b, kw: (pc.greater_equal if kw.get("or_equal") else pc.greater)(a, b),
}


# -- helpers ----------------------------------------------------------------------------------

def _all(n: int) -> pa.Array:
    return pa.repeat(pa.scalar(True), n)


def _none(column) -> pa.ChunkedArray | pa.Array:
    return pa.repeat(pa.scalar(False), len(column))


def _present(column):
    """Not missing: pandas holds a null as NaN, so a NaN is missing too."""
    if pa.types.is_floating(column.type):
        return pc.and_(pc.is_valid(column), pc.invert(pc.fill_null(pc.is_nan(column), True)))
    return pc.is_valid(column)


def _pair_considered(a, b, ignore: str):
    if ignore == "both_values_are_missing":
        return pc.or_(_present(a), _present(b))
    if ignore == "either_value_is_missing":
        return pc.and_(_present(a), _present(b))
    return _all(len(a))


def _multi_considered(columns: list, ignore: str, n: int):
    if ignore == "never" or not columns:
        return _all(n)
    valid = [_present(c) for c in columns]
    combine = pc.or_ if ignore == "all_values_are_missing" else pc.and_
    out = valid[0]
    for v in valid[1:]:
        out = combine(out, v)
    return out


def _duplicated(keys: pa.Table, considered) -> pa.Array:
    """True for each considered row whose key occurs in more than one considered row (every
    occurrence, as pandas' duplicated(keep=False)), where a null equals a null and a NaN a NaN."""
    n = keys.num_rows
    considered = _flat(pc.fill_null(considered, False))
    if _ordered_distinct(keys, considered):
        return _none(considered)
    exact = not any(pa.types.is_floating(t) for t in keys.schema.types)
    if exact:  # hash grouping (nulls form one group): the usual answer, "no duplicate", at once
        candidates = keys.filter(considered)
        distinct = candidates.group_by(keys.column_names, use_threads=False).aggregate([])
        if distinct.num_rows == candidates.num_rows:
            return _none(considered)
    # Sort, compare each row with the one before; a row not considered gets a key of its own.
    own = pc.if_else(considered, pa.scalar(None, pa.int64()), pa.array(range(n), pa.int64()))
    keys = keys.append_column("__own", own)
    order = pc.sort_indices(keys, sort_keys=[(c, "ascending") for c in keys.column_names])
    ordered = keys.take(order)
    same = pa.repeat(pa.scalar(True), max(n - 1, 0))
    for name in ordered.column_names:
        col = _flat(ordered.column(name))
        if pa.types.is_floating(col.type):  # NaN is pandas' null
            col = pc.if_else(pc.fill_null(pc.is_nan(col), False), pa.scalar(None, col.type), col)
        a, b = col.slice(1), col.slice(0, n - 1)
        same = pc.and_(same, pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(pc.is_null(a), pc.is_null(b))))
    before = pa.concat_arrays([pa.array([False]), same])  # row i equals row i-1
    after = pa.concat_arrays([same, pa.array([False])])  # row i equals row i+1
    repeated = pc.or_(before, after)
    return pc.and_(pc.take(repeated, pc.sort_indices(order)), considered)


def _ordered_distinct(keys: pa.Table, considered) -> bool:
    """True when the considered rows' keys are distinct by their order alone: every key column
    but one holds one value (no null), and that one is an integer column, without nulls, strictly
    increasing. (A task's (topic, partition, offset): milliseconds instead of a hash of every row.)"""
    if _count(considered) < keys.num_rows:
        keys = keys.filter(considered)
    if keys.num_rows < 2:
        return True
    varying = []
    for name in keys.column_names:
        column = keys.column(name)
        if column.null_count:
            return False
        if pa.types.is_floating(column.type):
            return False
        low_high = pc.min_max(column)
        if low_high["min"] != low_high["max"]:
            varying.append(column)
    if len(varying) != 1 or not pa.types.is_integer(varying[0].type):
        return False
    values = _flat(varying[0])
    return bool(pc.all(pc.greater(values.slice(1), values.slice(0, len(values) - 1))).as_py())


def _flat(array):
    return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array


def _count(mask) -> int:
    return int(pc.sum(pc.cast(pc.fill_null(mask, False), pa.int64())).as_py() or 0)


def _first_true(mask, limit: int) -> pa.Array:
    """The row numbers of the first `limit` true values of `mask`."""
    if isinstance(mask, pa.ChunkedArray):
        mask = mask.combine_chunks()
    return pc.indices_nonzero(pc.fill_null(mask, False)).slice(0, limit)


def _values(column, rows: pa.Array) -> list:
    return [_jsonable(v) for v in pc.take(column, rows).to_pylist()]


def _jsonable(value):
    """A sample value as great-expectations serialises it (its results travel as JSON)."""
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, bytes):
        return str(value)
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value


def _order(value):
    """A sort key for sample values of mixed kinds (None first, then by type, then by value)."""
    if isinstance(value, tuple):
        return tuple(_order(v) for v in value)
    return (0, "", 0) if value is None else (1, type(value).__name__ if not isinstance(value, (int, float)) else "",
                                              value)


def _counts(sample: list) -> list[dict]:
    """great-expectations' partial_unexpected_counts: the sample's values by count, then value."""
    hashable = [tuple(v.values()) if isinstance(v, dict) else tuple(v) if isinstance(v, list) else v for v in sample]
    common = sorted(Counter(hashable).most_common(PARTIAL_UNEXPECTED), key=lambda x: (-x[1], _order(x[0])))
    return [{"value": list(k) if isinstance(k, tuple) else k, "count": c} for k, c in common]
