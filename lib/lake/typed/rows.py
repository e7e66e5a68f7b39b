"""Executor side: a task's rows -> the same rows with their typed columns, and the rows that
cannot have them (for the quarantine table, with the reason).

Per side (value, key): the wire-format prefix of every row is read with numpy (wire.py); the
rows are grouped by schema id (and, for Protobuf, message index path) and each group is decoded
in ONE call of its decoder (recipes.py); the decoded arrays are conformed to the table's merged
type (columns.py) and put back in row order with a take. Nothing runs per record in Python
except for rows that fail (their reasons), and the Protobuf index walk of unusual prefixes.

A row goes to quarantine when a side with subjects cannot decode it: not in the wire format
(magic byte), shorter than the prefix, an unknown schema id, an id registered under another
topic's subjects, a schema incompatible with the table, or a payload that is not a datum of its
schema. A null value (a tombstone) or key keeps the row, with null typed columns.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import wire
from .columns import conform, nullable
from .plan import Side, TypedSpec
from .recipes import PROTOBUF, decoder_for

ERROR_COLUMN = "error"


def decode_rows(spec: TypedSpec, table: pa.Table, topic: str) -> tuple[pa.Table, pa.Table]:
    """(rows with the typed columns, rows that go to quarantine with ERROR_COLUMN)."""
    n = table.num_rows
    errors: dict[int, str] = {}
    columns: dict[str, pa.Array] = {}
    for side in spec.sides:
        decoded, ids = _decode_side(side, table.column(side.name).combine_chunks(), topic, errors)
        columns[side.id_column] = pa.array(ids, pa.int32(), mask=ids < 0)
        if side.column is not None:
            columns[side.column] = decoded
        else:
            for i, (_, column) in enumerate(side.columns):
                columns[column] = decoded.field(i)
    ok = np.ones(n, dtype=bool)
    if errors:
        ok[list(errors)] = False
    good = table
    for f in spec.columns:  # a column no side fills (a field of a schema no longer used) is null
        column = columns.get(f.name)
        good = good.append_column(f, column.cast(f.type) if column is not None else pa.nulls(n, f.type))
    if not errors:
        return good, _quarantine(table.slice(0, 0), [])
    mask = pa.array(ok)
    bad_rows = np.flatnonzero(~ok)
    return good.filter(mask), _quarantine(table.take(pa.array(bad_rows)), [errors[int(i)] for i in bad_rows])


def _quarantine(rows: pa.Table, reasons: list[str]) -> pa.Table:
    return rows.append_column(pa.field(ERROR_COLUMN, pa.string()), pa.array(reasons, pa.string()))


def _decode_side(side: Side, values: pa.Array, topic: str, errors: dict[int, str]) -> tuple[pa.Array, np.ndarray]:
    n = len(values)
    target = nullable(side.target)
    if not side.subjects.get(topic):  # a topic of the table with no subjects on this side: left as it is
        return pa.nulls(n, target), np.full(n, wire.NULL, dtype=np.int64)
    ids = wire.split(values)
    allowed = side.allowed.get(topic, frozenset())
    pieces: list[pa.Array] = []
    positions: list[np.ndarray] = []
    short = np.flatnonzero(ids == wire.SHORT)
    for i in short:
        errors.setdefault(int(i), f"{side.name}: truncated: shorter than the 5-byte wire-format prefix")
    bad_magic = np.flatnonzero(ids == wire.BAD_MAGIC)
    if len(bad_magic):
        first = wire.first_bytes(values.take(pa.array(bad_magic)))
        for i, byte in zip(bad_magic, first):
            errors.setdefault(int(i), f"{side.name}: not in the schema registry's wire format "
                                      f"(magic byte 0x{int(byte):02x}, expected 0x00)")
    for schema_id in np.unique(ids[ids >= 0]):
        rows = np.flatnonzero(ids == schema_id)
        reason = _refusal(side, int(schema_id), allowed, topic)
        if reason is not None:
            for i in rows:
                errors.setdefault(int(i), reason)
            continue
        recipe = side.recipes[int(schema_id)]
        group = values if len(rows) == n else values.take(pa.array(rows))  # one schema: no copy
        for skip, message, subset in _groups(recipe, group, side, errors, rows):
            decoder = decoder_for(recipe, message)
            decoded, mask, failures = decoder.decode(group.take(pa.array(subset)) if subset is not None else group,
                                                     skip)
            where = rows if subset is None else rows[subset]
            for row, why in failures:
                errors.setdefault(int(where[row]), f"{side.name}: {recipe.label}: {_failure(recipe, why)}")
            if side.column is None:
                decoded = _renamed(decoded, side)
            pieces.append(conform(decoded, target))
            positions.append(where[mask])
    return _scatter(pieces, positions, n, target), ids


def _refusal(side: Side, schema_id: int, allowed: frozenset[int], topic: str) -> str | None:
    if schema_id not in side.known:
        return f"{side.name}: unknown schema id {schema_id} (not in the registry)"
    if schema_id not in allowed:
        subjects = ", ".join(side.subjects.get(topic, ())) or "none"
        return f"{side.name}: schema id {schema_id} is not registered under topic {topic}'s subjects ({subjects})"
    error = side.recipes[schema_id].error
    return f"{side.name}: {error}" if error is not None else None


def _groups(recipe, group: pa.Array, side: Side, errors: dict[int, str], rows: np.ndarray):
    """(bytes to skip, Protobuf message, row subset or None) per decoder call; Protobuf rows of
    another message than the table's, or with malformed indexes, get their reason in `errors`."""
    if recipe.schema_type != PROTOBUF:
        yield wire.PREFIX, None, None
        return
    index, other, starts = wire.message_indexes(group)
    path = next(p for p, name in recipe.messages if name == recipe.message)
    if len(path) == 1:
        mine = index == path[0]
    else:
        mine = np.zeros(len(group), dtype=bool)
        mine[[i for i, p in other.items() if p == path]] = True
    names = dict(recipe.messages)
    for i in np.flatnonzero(~mine):
        found = other.get(int(i), (int(index[i]),))
        why = ("malformed Protobuf message indexes after the schema id" if found is None else
               f"the record is a {names.get(found, f'message at index {list(found)} (none)')}, the table's "
               f"columns come from {recipe.message}")
        errors.setdefault(int(rows[i]), f"{side.name}: {recipe.label}: {why}")
    for skip in np.unique(starts[mine]):
        subset = np.flatnonzero(mine & (starts == skip))
        yield int(skip), recipe.message, (None if len(subset) == len(group) else subset)


def _failure(recipe, why: str) -> str:
    if recipe.schema_type == PROTOBUF or why.startswith("JSON"):
        return why
    return f"corrupt {recipe.schema_type.capitalize()} payload: {why}"


def _renamed(decoded: pa.Array, side: Side) -> pa.Array:
    """The decoded struct with the field names of the table's columns (built-in names prefixed)."""
    names = dict(side.columns)
    fields = [pa.field(names.get(f.name, f.name), f.type) for f in decoded.type]
    if [f.name for f in fields] == [f.name for f in decoded.type]:
        return decoded
    return pa.StructArray.from_arrays([decoded.field(i) for i in range(decoded.type.num_fields)], fields=fields,
                                      mask=pc.is_null(decoded) if decoded.null_count else None)


def _scatter(pieces: list[pa.Array], positions: list[np.ndarray], n: int, target: pa.DataType) -> pa.Array:
    """One array of n rows: pieces[k][j] at row positions[k][j], null elsewhere."""
    if not pieces:
        return pa.nulls(n, target)
    values = pa.concat_arrays(pieces) if len(pieces) > 1 else pieces[0]
    where = np.concatenate(positions)
    if len(where) == n and (n == 0 or np.all(where[1:] > where[:-1])):
        return values
    index = np.full(n, -1, dtype=np.int64)
    index[where] = np.arange(len(where))
    return values.take(pa.array(index, mask=index < 0))
