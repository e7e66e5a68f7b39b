"""Arrow types across schema versions: merging them into the table's columns, and conforming a
version's decoded array to them.

A later version may add fields (new nullable columns, or new fields inside a struct). While a
column is new, the versions seen together may widen it the way Avro promotes (int -> long ->
float -> double). A column already in the table widens where Delta's type widening allows the
change (`delta_widens`: byte/short/int -> long or double, float -> double, a decimal with more
digits on both sides of the point); the table is rewritten with the wider type before the run
commits (topiclake.lake.table.widening). A version whose field cannot become the table's type (long ->
double, int -> float, any narrowing, another kind) is incompatible, and its rows go to quarantine
with the reason.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

_WIDENING = [pa.int32(), pa.int64(), pa.float32(), pa.float64()]


class Incompatible(ValueError):
    """A version's type that the table's column cannot hold."""


def nullable(t: pa.DataType) -> pa.DataType:
    """The type with every nested field nullable (topic tables take any writer's files)."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, nullable(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(pa.field(t.value_field.name, nullable(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(t.key_type, nullable(t.item_type))
    return t


_INTEGERS = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]


def delta_widens(have: pa.DataType, new: pa.DataType) -> bool:
    """True when Delta's type widening changes a column of type `have` to `new` (its documented
    changes for these types: integers to a wider integer or to double, float to double, decimal
    (p, s) to (p', s') with s' >= s and p' - s' >= p - s)."""
    if have in _INTEGERS:  # long -> double would lose digits: Delta does not widen it
        return (new in _INTEGERS and _INTEGERS.index(new) > _INTEGERS.index(have)) \
            or (new == pa.float64() and have != pa.int64())
    if have == pa.float32():
        return new == pa.float64()
    if pa.types.is_decimal(have) and pa.types.is_decimal(new):
        return new.scale >= have.scale and new.precision - new.scale >= have.precision - have.scale \
            and not new.equals(have)
    return False


def merge(have: pa.DataType, new: pa.DataType, *, fixed: bool, where: str) -> pa.DataType:
    """The column type holding both; `fixed`: `have` is already in the table (it widens only
    where Delta's type widening allows)."""
    if have.equals(new):
        return have
    if pa.types.is_struct(have) and pa.types.is_struct(new):
        fields = {f.name: f.type for f in have}
        for f in new:
            fields[f.name] = merge(fields[f.name], f.type, fixed=fixed, where=f"{where}.{f.name}") \
                if f.name in fields else f.type
        return pa.struct([pa.field(name, t) for name, t in fields.items()])
    if pa.types.is_list(have) and pa.types.is_list(new):
        return pa.list_(merge(have.value_type, new.value_type, fixed=fixed, where=f"{where}[]"))
    if pa.types.is_map(have) and pa.types.is_map(new) and have.key_type.equals(new.key_type):
        return pa.map_(have.key_type, merge(have.item_type, new.item_type, fixed=fixed, where=f"{where}{{}}"))
    if have in _WIDENING and new in _WIDENING:
        if _WIDENING.index(new) <= _WIDENING.index(have):
            return have
        if not fixed:
            return new
    if fixed and delta_widens(have, new):
        return new
    if fixed:
        raise Incompatible(f"column {where} is {have} in the table, {new} in this schema (Delta cannot widen "
                           f"{have} to {new})")
    raise Incompatible(f"column {where} is {have} in the table, {new} in this schema")


def conform(array: pa.Array, target: pa.DataType) -> pa.Array:
    """`array` as `target` (a merge of its type): missing struct fields filled with nulls,
    numbers widened."""
    if array.type.equals(target):
        return array
    if pa.types.is_struct(target):
        have = {f.name for f in array.type}
        children = [conform(array.field(f.name), f.type) if f.name in have else pa.nulls(len(array), f.type)
                    for f in target]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=_null_mask(array))
    if pa.types.is_list(target):
        values = conform(array.values, target.value_type)
        return pa.ListArray.from_arrays(array.offsets, values, type=target, mask=_null_mask(array))
    if pa.types.is_map(target):
        items = conform(array.items, target.item_type)
        return pa.MapArray.from_arrays(array.offsets, array.keys, items, type=target, mask=_null_mask(array))
    return array.cast(target)


def _null_mask(array: pa.Array) -> pa.Array | None:
    return pc.is_null(array) if array.null_count else None
