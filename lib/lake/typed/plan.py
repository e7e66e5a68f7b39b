"""Driver side: which registered schemas feed a table, and the table's typed columns.

The registry is read the way the jobs read every other topic: `_schemas` replayed from the
storage root (`topiclake.registry.log_replay`), or, when the settings file names an external
registry (`[registry] url`), its REST API. A topic's subjects:

- TopicNameStrategy: `<topic>-value` and `<topic>-key`;
- TopicRecordNameStrategy: `<topic>-<record full name>` (the subject's schemas name that record);
- RecordNameStrategy: the record names configured for the topic (`[registry.record_subjects]`
  `orders = ["com.acme.Order"]`): such subjects carry no topic, so they must be named.

Every version of those subjects (soft-deleted ones too: their records are still in the log)
becomes a Recipe the executors decode with. The table's typed columns are the table's own
(a column is never dropped: a field a newer version removed fills with null) followed by the
fields each version adds, in version order (Delta schema evolution, in the run's commit).

Columns: `value_schema_id` (int), then the value record's fields as columns (a field named like a
built-in column gets a `value_` prefix), or one `value_decoded` column when a value schema is not
a record; with a key subject, `key_schema_id` and `key_decoded`.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import pyarrow as pa

from topiclake.registry.formats import parse
from topiclake.registry.formats.base import ResolvedReference
from topiclake.registry.records import Key, Record, SchemaValue, SCHEMA, _schema_value
from topiclake.registry.state import RegistryState

from ..errors import LakeError
from ..table.schema import DATA_SCHEMA, PARTITION_COLUMNS
from .columns import Incompatible, merge, nullable
from .recipes import AVRO, JSON, PROTOBUF, Recipe, json_schema_type

log = logging.getLogger(__name__)

VALUE, KEY = "value", "key"
_MAX_REFERENCE_DEPTH = 32
# "key_bucket": keyed.table_kind.KEY_BUCKET, an upsert table's partition column (not imported: the
# keyed tables sit above typed, whose columns they use)
_BUILTIN = set(DATA_SCHEMA.names) | set(PARTITION_COLUMNS) | {"error", "key_bucket"}


@dataclass(frozen=True)
class Side:
    """How one of a record's two halves (value or key) becomes columns."""

    name: str  # VALUE or KEY
    recipes: dict[int, Recipe]  # schema id -> recipe (every id of the subjects)
    allowed: dict[str, frozenset[int]]  # topic -> ids registered under its subjects
    subjects: dict[str, tuple[str, ...]]  # topic -> its subjects (for messages)
    known: frozenset[int]  # every id in the registry: "unknown" vs "not this topic's"
    target: pa.DataType  # the merged type the decoded values are conformed to
    columns: tuple[tuple[str, str], ...] = ()  # (struct field, table column); empty: one column
    column: str | None = None  # the one column (key_decoded / value_decoded) when not spread

    @property
    def id_column(self) -> str:
        return f"{self.name}_schema_id"


@dataclass(frozen=True)
class TypedSpec:
    """What the executors need to decode a table's rows (picklable)."""

    sides: tuple[Side, ...]
    columns: pa.Schema  # the typed columns, in table order

    def to_fields(self) -> list[pa.Field]:
        return list(self.columns)


# ------------------------------------------------------------------------------------------ sources

def load_registry(root: Path, url: str | None = None, *, timeout_s: float = 30.0) -> RegistryState:
    """The registry's state: replayed from `_schemas` in the root, or read from `url`."""
    if url is None:
        from topiclake.registry.log_replay import load_state

        return load_state(root)
    return _load_rest(url.rstrip("/"), timeout_s)


def _load_rest(url: str, timeout_s: float) -> RegistryState:
    def get(path: str):
        try:
            # the registry URL of the settings file (http or https)
            with urllib.request.urlopen(url + path, timeout=timeout_s) as response:  # noqa: S310
                return json.loads(response.read())
        except (OSError, ValueError) as exc:
            raise LakeError(f"schema registry {url}: GET {path} failed ({exc})") from None

    state = RegistryState()
    for subject in get("/subjects?deleted=true"):
        quoted = urllib.parse.quote(subject, safe="")
        for version in get(f"/subjects/{quoted}/versions?deleted=true"):
            body = get(f"/subjects/{quoted}/versions/{version}?deleted=true")
            body.setdefault("subject", subject)
            value = _schema_value(body)
            state.replay(Record(Key(SCHEMA, value.subject, value.version), value))
    return state


# ------------------------------------------------------------------------------------------ planning

def subjects_of(state: RegistryState, topic: str, side: str,
                record_subjects: Sequence[str] = ()) -> list[str]:
    names = [f"{topic}-{side}"] if f"{topic}-{side}" in state.subjects else []
    if side == VALUE:
        prefix = f"{topic}-"
        for subject in sorted(state.subjects):
            rest = subject[len(prefix):] if subject.startswith(prefix) else None
            if rest and rest not in (VALUE, KEY) and any(_record_name(v) == rest
                                                          for v in state.versions(subject, deleted=True)):
                names.append(subject)  # TopicRecordNameStrategy
        names += [s for s in record_subjects if s in state.subjects and s not in names]
    return names


def plan_typed(state: RegistryState, topics: Sequence[str], *, existing: pa.Schema | None = None,
               record_subjects: Mapping[str, Sequence[str]] | None = None) -> TypedSpec | None:
    """The spec of a table fed by `topics`; None when none of them has a subject (a plain table).
    `existing`: the table's current schema, whose typed columns stay as they are."""
    record_subjects = record_subjects or {}
    have = [f for f in (existing or pa.schema([])) if f.name not in _BUILTIN]
    parser = _Parser(state)
    sides = []
    for side in (VALUE, KEY):
        subjects = {t: tuple(subjects_of(state, t, side, record_subjects.get(t, ()))) for t in topics}
        if not any(subjects.values()):
            continue
        values = _versions(state, [s for t in topics for s in subjects[t]])
        recipes = {v.id: parser.recipe(v) for v in values}
        allowed = {t: frozenset(v.id for v in _versions(state, subjects[t])) for t in topics}
        sides.append(_side(side, recipes, allowed, subjects, frozenset(state._keys_by_id), have))
    if not sides:
        return None
    columns = [f for f in have]
    named = {f.name for f in columns}
    for side in sides:
        for f in _side_fields(side):
            if f.name in named:
                columns[[c.name for c in columns].index(f.name)] = f
            else:
                columns.append(f)
                named.add(f.name)
    return TypedSpec(tuple(sides), pa.schema(columns))


def _versions(state: RegistryState, subjects: Sequence[str]) -> list[SchemaValue]:
    """Every version of the subjects, live and soft-deleted, in version order; each id once."""
    seen, out = set(), []
    for subject in subjects:
        for value in state.versions(subject, deleted=True):
            if value.id not in seen:
                seen.add(value.id)
                out.append(value)
    return out


def _side(name: str, recipes: dict[int, Recipe], allowed, subjects, known, have: list[pa.Field]) -> Side:
    table = {f.name: f.type for f in have}
    single = f"{name}_decoded"
    spread = name == VALUE and single not in table and all(
        r.error is not None or pa.types.is_struct(r.arrow_type) for r in recipes.values())
    if spread:  # the table's columns that came from value fields, as one struct to merge into
        target = pa.struct([pa.field(c, t) for c, t in table.items() if c not in (f"{VALUE}_schema_id",) and
                            not c.startswith(f"{KEY}_")])
        fixed = {f.name for f in target}
    else:
        target = table.get(single)
        fixed = {single} if target is not None else set()
    out: dict[int, Recipe] = {}
    for schema_id, recipe in recipes.items():
        if recipe.error is not None:
            out[schema_id] = recipe
            continue
        rtype = _renamed(recipe.arrow_type, name) if spread else recipe.arrow_type
        try:
            if target is None:
                target = rtype
            elif spread:
                target = _merge_struct(target, rtype, fixed)
            else:
                target = merge(target, rtype, fixed=bool(fixed), where=single)
        except Incompatible as exc:
            out[schema_id] = _with_error(recipe, f"{recipe.label} is incompatible with the table: {exc}")
            continue
        out[schema_id] = recipe
    columns = tuple((_field_of(f.name, name), f.name) for f in target) if spread else ()
    return Side(name, out, allowed, subjects, known, target if target is not None else pa.null(),
                columns=columns, column=None if spread else single)


def _merge_struct(target: pa.StructType, new: pa.StructType, fixed: set[str]) -> pa.DataType:
    fields = {f.name: f.type for f in target}
    for f in new:
        fields[f.name] = (merge(fields[f.name], f.type, fixed=f.name in fixed, where=f.name) if f.name in fields
                          else f.type)
    return pa.struct([pa.field(n, t) for n, t in fields.items()])


def _renamed(t: pa.StructType, side: str) -> pa.StructType:
    """Value fields as table columns: a name taken by a built-in column gets the side's prefix."""
    return pa.struct([pa.field(f"{side}_{f.name}" if f.name in _BUILTIN or f.name.startswith(f"{KEY}_") else f.name,
                               f.type) for f in t])


def _field_of(column: str, side: str) -> str:
    prefix = f"{side}_"
    if column.startswith(prefix) and (column[len(prefix):] in _BUILTIN or column[len(prefix):].startswith(f"{KEY}_")):
        return column[len(prefix):]
    return column


def _side_fields(side: Side) -> list[pa.Field]:
    fields = [pa.field(side.id_column, pa.int32())]
    if side.column is not None:
        return fields + [pa.field(side.column, nullable(side.target))]
    return fields + [pa.field(column, nullable(t)) for column, t in zip([c for _, c in side.columns],
                                                                        [f.type for f in side.target])]


def _with_error(recipe: Recipe, error: str) -> Recipe:
    from dataclasses import replace

    return replace(recipe, error=error)


def _record_name(value: SchemaValue) -> str | None:
    """The full name of an Avro record / Protobuf first message / JSON title, for subject names."""
    try:
        if value.schema_type == AVRO:
            data = json.loads(value.schema)
            if isinstance(data, dict) and data.get("name"):
                name, namespace = data["name"], data.get("namespace")
                return name if "." in name or not namespace else f"{namespace}.{name}"
        elif value.schema_type == JSON:
            data = json.loads(value.schema)
            return data.get("title") if isinstance(data, dict) else None
    except ValueError:
        return None
    if value.schema_type == PROTOBUF:
        import re

        package = re.search(r"^\s*package\s+([\w.]+)\s*;", value.schema, re.M)
        message = re.search(r"^\s*message\s+(\w+)", value.schema, re.M)
        if message:
            return f"{package.group(1)}.{message.group(1)}" if package else message.group(1)
    return None


class _Parser:
    """Registered schemas parsed once, with their references resolved (as the registry does)."""

    def __init__(self, state: RegistryState):
        self.state = state
        self.parsed: dict[int, object] = {}

    def parse(self, value: SchemaValue, depth: int = 0):
        if value.id not in self.parsed:
            if depth > _MAX_REFERENCE_DEPTH:
                raise ValueError("references nest too deeply")
            refs = []
            for ref in value.references:
                target = (self.state.latest(ref.subject) if ref.version == -1
                          else self.state.subjects.get(ref.subject, {}).get(ref.version))
                if target is None:
                    raise ValueError(f"reference {ref.subject} version {ref.version} is not registered")
                refs.append(ResolvedReference(ref.name, ref.subject, target.version, self.parse(target, depth + 1)))
            self.parsed[value.id] = parse(value.schema_type, value.schema, refs)
        return self.parsed[value.id]

    def recipe(self, value: SchemaValue) -> Recipe:
        label = f"schema id {value.id} ({value.subject} version {value.version})"
        base = Recipe(value.id, value.schema_type, label)
        try:
            parsed = self.parse(value)
            return _recipe(value, parsed, label)
        except Exception as exc:  # noqa: BLE001  (any schema this reader cannot use: its rows wait in quarantine)
            message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            return _with_error(base, f"{label} cannot be decoded into columns: {message}")


def _recipe(value: SchemaValue, parsed, label: str) -> Recipe:
    from dataclasses import replace

    base = Recipe(value.id, value.schema_type, label)
    if value.schema_type == AVRO:
        recipe = replace(base, schema=json.dumps(parsed.data),
                         dependencies=tuple(json.dumps(d) for d in parsed.dependencies))
        from .recipes import AvroRecipeDecoder

        return replace(recipe, arrow_type=AvroRecipeDecoder(recipe).arrow_type)
    if value.schema_type == JSON:
        t = json_schema_type(parsed.data)
        if t is None or not pa.types.is_struct(t):
            raise ValueError("only JSON Schemas of objects with declared property types become columns")
        return replace(base, arrow_type=t)
    files, messages = _protobuf_files(parsed)
    message = _main_message(parsed.file)
    recipe = replace(base, files=files, messages=messages, message=message)
    from .recipes import ProtobufRecipeDecoder

    return replace(recipe, arrow_type=ProtobufRecipeDecoder(recipe, message).arrow_type)


def _protobuf_files(parsed) -> tuple[tuple[bytes, ...], tuple]:
    from google.protobuf import descriptor_pb2

    out: dict[str, bytes] = {}

    def add(name: str) -> None:
        if name in out:
            return
        descriptor = parsed.pool.FindFileByName(name)
        for dep in descriptor.dependencies:
            add(dep.name)
        proto = descriptor_pb2.FileDescriptorProto()
        descriptor.CopyToProto(proto)
        out[name] = proto.SerializeToString()

    add(parsed.file.name)
    package = parsed.file.package
    messages = []

    def walk(types, path: tuple[int, ...], prefix: str) -> None:
        for i, m in enumerate(types):
            full = f"{prefix}.{m.name}" if prefix else m.name
            messages.append((path + (i,), full))
            walk(m.nested_type, path + (i,), full)

    walk(parsed.file.message_type, (), package)
    return tuple(out.values()), tuple(messages)


def _main_message(file) -> str:
    """The message the table's columns come from: the file's first top-level message that no other
    message of the file uses as a field type (a file often declares its parts first)."""
    package = file.package
    full = [f"{package}.{m.name}" if package else m.name for m in file.message_type]
    if not full:
        raise ValueError("the Protobuf schema declares no message")
    used = {f.type_name.lstrip(".") for m in file.message_type for f in _all_fields(m)}
    return next((name for name in full if name not in used), full[0])


def _all_fields(message):
    yield from message.field
    for nested in message.nested_type:
        yield from _all_fields(nested)
