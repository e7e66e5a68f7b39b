"""Arrow types across schema versions: merging them into the table's columns, and conforming a
version's decoded array to them.

A table column keeps the type it was created with (Delta here has no type widening): a later
version may add fields (new nullable columns, or new fields inside a struct), never change one.
While a column is new, the versions seen together may widen it the way Avro promotes
(int -> long -> float -> double); a version whose field cannot become the table's type is
incompatible, and its rows go to quarantine with the reason.
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


def merge(have: pa.DataType, new: pa.DataType, *, fixed: bool, where: str) -> pa.DataType:
    """The column type holding both; `fixed`: `have` is already in the table (no widening)."""
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
