"""Driver side of CDC tables: the columns of a table fed by Debezium topics, and the ChangeSpec the
executors read its events with (cdc.py).

Where the columns come from, in this order of precedence for each field of `after`:

1. the existing table: a column keeps its type (fields the events no longer carry stay, null);
2. registry Avro (a typed.TypedSpec with the envelope's `after` column): the `Value` record's
   fields as typed.plan merged them across the subject's versions, with Debezium's Connect
   logical names (`connect.name`) making dates and timestamps of their integers;
3. the JSON schema wrapper of the sampled events: Connect types (cdc_types.py), versions merged
   (a field a later version adds is a new column; an int32 widened to int64 is int64);
4. without a wrapper, a declared conf/schemas/<table>.json (values.ValueSchema) for the fields it
   names (timestamp: ISO-8601 text or epoch milliseconds; date: ISO-8601 text or epoch days);
5. else inferred from the sampled values (cdc_types.inferred_type).

The primary key is the record key's fields: the registry key record's, or those of the sampled JSON
keys (the wrapper's payload). A key field that `after` does not have becomes a column too.

Samples: the records of the first and newest task of each partition (`samples_of`), read on the
driver. An event whose `after` has a field the sample did not show is quarantined by its run (the
next run plans from newer events); Debezium writes every column of the row in each event, so a
column appears in the sample unless it was added and dropped again between the sampled tasks.
"""

from __future__ import annotations

import json
import logging
from typing import Iterable, Iterator, Sequence

import pyarrow as pa

from ..errors import LakeError
from ..log.decode import read_task
from ..table.schema import DATA_SCHEMA, PARTITION_COLUMNS
from ..table.values import ValueSchema
from ..typed.columns import Incompatible, merge
from . import cdc_types as types
from .cdc import JSON, REGISTRY, CdcColumn, CdcSpec
from .changes import DEBEZIUM, ChangeSpec
from .table_kind import KEY_BUCKET

log = logging.getLogger(__name__)

_ENVELOPE_IMAGES = ("after", "before")
_KEY_STRUCT = "key_decoded"
_SAMPLE_RECORDS = 10_000  # per sampled task: the newest ones


def plan_cdc(topics: Sequence[str], *, typed=None, value_schema: ValueSchema | None = None,
             samples: Iterable[pa.Table] = (), existing: pa.Schema | None = None,
             key_fields: Sequence[str] | None = None) -> ChangeSpec:
    """The ChangeSpec of a CDC table fed by `topics` (its `cdc.schema`: the table's columns).

    typed: the table's typed.TypedSpec (plan_typed) when its topics' values are registry Avro;
    value_schema: the table's declared conf/schemas (schema-less JSON only); samples: decoded
    records (`key` and `value` columns) to learn the JSON columns and key from; existing: the Delta
    table's schema when it exists; key_fields: the primary key when no sampled record names it."""
    if typed is not None and any(f.name == "after" for f in typed.columns):
        source, planned, key_types = REGISTRY, _registry_columns(typed), _registry_key(typed)
        if key_types is None:  # the key is not in the registry: JSON keys (only then are samples read)
            key_types = _json_key(_non_empty(samples))
    else:
        if typed is not None:
            raise LakeError(f"topics {', '.join(topics)}: the registry's value schema is not a Debezium envelope "
                            "(no `after` field)")
        samples = _non_empty(samples)
        source, planned, key_types = JSON, _json_columns(samples, value_schema), _json_key(samples)
    if key_fields is not None:
        key_types = {f: key_types.get(f, (pa.string(), types.TEXT)) for f in key_fields}
    if not key_types:
        raise LakeError(f"topics {', '.join(topics)}: no record key with the primary key's fields in the sample "
                        "(Debezium keys each change by the row's primary key; name it with key_fields)")
    for f, t in key_types.items():
        planned.setdefault(f, t)
    columns = _with_existing(planned, existing)
    return _spec(source, columns, tuple(key_types))


def plan_table(topics: Sequence[str], table, recorded: ChangeSpec, *, typed=None,
               value_schema: ValueSchema | None = None, samples: Iterable[pa.Table] = ()) -> ChangeSpec:
    """plan_cdc for the Delta table `table` (None: one this run creates): an existing table keeps
    its columns and the primary key it recorded (`recorded`: its table_kind spec), so a run whose
    sample holds no key (only new columns, or nothing new) still plans the same key."""
    existing = pa.schema(table.schema().to_arrow()) if table is not None else None
    key_fields = [types.field_of(c) for c in recorded.key_columns] if table is not None else None
    return plan_cdc(topics, typed=typed, value_schema=value_schema, samples=samples, existing=existing,
                    key_fields=key_fields)


def samples_of(plans, *, limit: int = _SAMPLE_RECORDS) -> Iterator[pa.Table]:
    """The newest `limit` records of the first and the last task of each partition plan (plan.py's
    PartitionPlan), read on the driver when plan_cdc needs them (lazily: registry Avro with a
    registered key reads none): what plan_cdc learns JSON columns and keys from."""
    for plan in plans:
        yield from task_samples(plan.tasks, limit=limit)


def task_samples(tasks: Sequence, *, limit: int = _SAMPLE_RECORDS) -> Iterator[pa.Table]:
    """samples_of for one partition's tasks (plan.py's PlannedTask): its first and last."""
    for task in tasks[:1] + tasks[1:][-1:]:
        records, _ = read_task(task.as_dict())
        yield records.select(["key", "value"]).slice(max(0, records.num_rows - limit))


def _non_empty(samples: Iterable[pa.Table]) -> list[pa.Table]:
    return [s for s in samples if s.num_rows]


def _spec(source: str, columns: dict[str, tuple[pa.DataType, str]], key: tuple[str, ...]) -> ChangeSpec:
    cdc = CdcSpec(source, tuple(CdcColumn(f, types.column_of(f), t, conversion)
                                for f, (t, conversion) in columns.items()), key)
    return ChangeSpec(format=DEBEZIUM, key_columns=cdc.key_columns, cdc=cdc)


def _with_existing(planned: dict[str, tuple[pa.DataType, str]], existing: pa.Schema | None):
    """The table's own columns first, with their types; then the planned fields it lacks."""
    if existing is None:
        return planned
    ours = set(DATA_SCHEMA.names) | set(PARTITION_COLUMNS) | {KEY_BUCKET} | set(types.METADATA.names)
    out = {}
    for f in existing:
        if f.name in ours:
            continue
        field = types.field_of(f.name)
        out[field] = (f.type, _conversion_into(f.type, planned.get(field)))
    for field, t in planned.items():
        out.setdefault(field, t)
    return out


def _conversion_into(column: pa.DataType, planned: tuple[pa.DataType, str] | None) -> str:
    """How an event's value becomes the existing column's type. The plan's conversion is for the
    plan's type: it holds where that is the column's kind of type (a Connect Date into a date
    column); otherwise (a sample whose values look like text, say one "lots" among integers, for a
    bigint column) the column's own conversion, so that only the values that do not fit it are
    quarantined, not every event of the run."""
    if planned is not None and _same_kind(planned[0], column):
        return planned[1]
    return types.declared_conversion(column)


def _same_kind(planned: pa.DataType, column: pa.DataType) -> bool:
    kinds = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal, pa.types.is_timestamp,
             pa.types.is_date, pa.types.is_boolean, pa.types.is_binary, _is_text)
    return planned.equals(column) or any(kind(planned) and kind(column) for kind in kinds)


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


# ------------------------------------------------------------------------------------ registry

def _registry_columns(typed) -> dict[str, tuple[pa.DataType, str]]:
    after = typed.columns.field("after").type
    if not pa.types.is_struct(after):
        raise LakeError("the registry's Debezium envelope has an `after` that is not a record")
    schemas = _avro_value_fields(typed)
    return {f.name: types.avro_type(schemas.get(f.name), f.type) for f in after}


def _avro_value_fields(typed) -> dict[str, object]:
    """field -> its Avro schema in the envelope's Value record (newest version last: it wins)."""
    out: dict[str, object] = {}
    for side in typed.sides:
        if side.name != "value":
            continue
        for recipe in side.recipes.values():
            if recipe.schema is None:
                continue
            record = _value_record(json.loads(recipe.schema))
            for f in (record or {}).get("fields", []):
                out[f["name"]] = f["type"]
    return out


def _value_record(envelope: dict) -> dict | None:
    for f in envelope.get("fields", []):
        if f.get("name") in _ENVELOPE_IMAGES:
            for member in f["type"] if isinstance(f["type"], list) else [f["type"]]:
                if isinstance(member, dict) and member.get("type") == "record":
                    return member
    return None


def _registry_key(typed) -> dict[str, tuple[pa.DataType, str]] | None:
    names = typed.columns.names
    if _KEY_STRUCT not in names or not pa.types.is_struct(typed.columns.field(_KEY_STRUCT).type):
        return None
    return {f.name: (f.type, types.PLAIN) for f in typed.columns.field(_KEY_STRUCT).type}


# ---------------------------------------------------------------------------------------- JSON

def _json_columns(samples: list[pa.Table], declared: ValueSchema | None) -> dict[str, tuple[pa.DataType, str]]:
    connect: dict[str, tuple[pa.DataType, str]] = {}
    seen: dict[str, list] = {}  # schema-less: field -> sampled values
    for sample in samples:
        for raw in sample.column("value").to_pylist():
            if raw is None:
                continue
            envelope, schema = _sampled_event(raw)
            if envelope is None:
                continue
            image_schema = _image_schema(schema)
            if image_schema is not None:
                for f in image_schema.get("fields", []):
                    _merge_into(connect, f["field"], types.connect_type(f))
                continue
            for image in _ENVELOPE_IMAGES:
                if isinstance(envelope.get(image), dict):
                    for name, value in envelope[image].items():
                        seen.setdefault(name, []).append(value)
    out = dict(connect)
    for f in (declared.arrow if declared is not None else []):
        out.setdefault(f.name, (f.type, types.declared_conversion(f.type)))
    for name, values in seen.items():
        out.setdefault(name, types.inferred_type(values))
    return out


def _sampled_event(raw: bytes) -> tuple[dict | None, dict | None]:
    """(the envelope, the schema wrapper's schema or None); (None, None) for a value that is not an
    event (the executors quarantine it)."""
    try:
        event = json.loads(raw)
    except ValueError:
        return None, None
    schema = None
    if isinstance(event, dict) and "payload" in event and "schema" in event:
        event, schema = event["payload"], event["schema"]
    if not isinstance(event, dict) or "op" not in event:
        return None, None
    return event, schema


def _image_schema(schema: dict | None) -> dict | None:
    """The Connect schema of the envelope's row image (the `after`, else the `before` field)."""
    if not isinstance(schema, dict):
        return None
    fields = {f.get("field"): f for f in schema.get("fields", []) if isinstance(f, dict)}
    for image in _ENVELOPE_IMAGES:
        if isinstance(fields.get(image), dict) and fields[image].get("type") == "struct":
            return fields[image]
    return None


def _merge_into(columns: dict[str, tuple[pa.DataType, str]], name: str, new: tuple[pa.DataType, str]) -> None:
    if name not in columns:
        columns[name] = new
        return
    (have, conversion), (t, new_conversion) = columns[name], new
    try:
        columns[name] = (merge(have, t, fixed=False, where=name), new_conversion)
    except Incompatible as exc:  # the first type stays: the other version's values that do not fit are quarantined
        log.warning("CDC column %s: %s", name, exc)
        columns[name] = (have, conversion)


def _json_key(samples: list[pa.Table]) -> dict[str, tuple[pa.DataType, str]]:
    """The primary key's fields and types: from the first sampled key that is a JSON object."""
    for sample in samples:
        for raw in sample.column("key").to_pylist():
            try:
                key = json.loads(raw) if raw is not None else None
            except ValueError:
                continue
            if isinstance(key, dict) and set(key) == {"schema", "payload"} and isinstance(key["payload"], dict):
                schemas = {f.get("field"): f for f in (key["schema"] or {}).get("fields", [])}
                return {name: types.connect_type(schemas[name]) if name in schemas else
                        types.inferred_type([value]) for name, value in key["payload"].items()}
            if isinstance(key, dict) and key:
                return {name: types.inferred_type([value]) for name, value in key.items()}
    return {}
