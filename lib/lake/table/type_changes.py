"""Which columns of a Delta table a new schema changes the type of (a registry version that widens
an int field into a long, ...): a commit refuses such a change (delta.py), a rewrite makes it
(widening.py). Types are compared as Delta's JSON schema writes them, without nullability."""

from __future__ import annotations

import json

import pyarrow as pa
from deltalake import DeltaTable, Schema as DeltaSchema


def widened_columns(table: DeltaTable, schema: pa.Schema) -> list[str]:
    """The table's columns whose type `schema` changes; fields it only adds (columns, or fields
    inside a struct) are not changes of type: the run's own commit adds them."""
    have = {f["name"]: f["type"] for f in json.loads(table.schema().to_json())["fields"]}
    want = {f["name"]: f["type"] for f in json.loads(DeltaSchema.from_arrow(schema).to_json())["fields"]}
    return [name for name, kind in want.items()
            if name in have and restricted_to(kind, have[name]) != _plain(have[name])]


def restricted_to(kind, have):
    """`kind` (a Delta type) restricted to the fields `have` holds, nullability left out."""
    if isinstance(kind, dict) and isinstance(have, dict) and kind.get("type") == have.get("type"):
        if kind["type"] == "struct":
            wanted = {f["name"]: f["type"] for f in kind["fields"]}
            return ("struct", tuple((f["name"], restricted_to(wanted[f["name"]], f["type"]) if f["name"] in wanted
                                     else _plain(f["type"])) for f in have["fields"]))
        if kind["type"] == "array":
            return ("array", restricted_to(kind["elementType"], have["elementType"]))
        if kind["type"] == "map":
            return ("map", restricted_to(kind["keyType"], have["keyType"]),
                    restricted_to(kind["valueType"], have["valueType"]))
    return _plain(kind)


def _plain(kind):
    """A Delta type without nullability and field metadata (only the types matter here)."""
    if isinstance(kind, dict):
        if kind.get("type") == "struct":
            return ("struct", tuple((f["name"], _plain(f["type"])) for f in kind["fields"]))
        if kind.get("type") == "array":
            return ("array", _plain(kind["elementType"]))
        if kind.get("type") == "map":
            return ("map", _plain(kind["keyType"]), _plain(kind["valueType"]))
    return kind
