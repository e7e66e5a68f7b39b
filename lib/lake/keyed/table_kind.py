"""A table's kind: `append` (every record a row) or `upsert` (one row per key, upsert.py).

The kind of a new table, in order: `--kind` on the command line, `kind` in the settings file's
`[tables.<name>]`, else upsert when the value format is debezium (change events only make sense
applied to their rows), else the topics' cleanup.policy (compact, or compact,delete -> upsert;
delete -> append; a multi-topic table needs one answer for all). Likewise the value format
(`--format`, `format`, default raw) and the number of key buckets (`buckets`, default 16): an
upsert table is partitioned by `key_bucket`, its key's stable hash modulo the buckets (keys.py).

The kind, format, key columns, buckets and topics of an upsert table are recorded in the table's
properties when it is created (`topiclake.kind`, `topiclake.valueFormat`, `topiclake.keyColumns`,
`topiclake.buckets`, `topiclake.topics`; see delta.commit for how); a table without them is an
append table (every table made before kinds existed). An existing table keeps its kind: asking
for another one is a one-line error naming `topiclake rebuild TABLE --kind K`, never a silent
change.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import pyarrow as pa

from topiclake.segments.storage import TopicMeta

from ..errors import UsageError
from .changes import DEBEZIUM, FORMATS, RAW, ChangeSpec

APPEND, UPSERT = "append", "upsert"
KEY_BUCKET = "key_bucket"  # an upsert table's partition column: its key's bucket (keys.bucket_of)
KEY_BUCKET_TYPE = pa.int32()
DEFAULT_BUCKETS = 16
KINDS = (APPEND, UPSERT)
CONFIG_KIND, CONFIG_FORMAT = "topiclake.kind", "topiclake.valueFormat"
CONFIG_KEY_COLUMNS, CONFIG_BUCKETS, CONFIG_TOPICS = "topiclake.keyColumns", "topiclake.buckets", "topiclake.topics"


@dataclass(frozen=True, slots=True)
class UpsertSpec:
    """How a table is kept as an upsert table (picklable: it travels with the tasks)."""

    change: ChangeSpec = ChangeSpec()
    buckets: int = DEFAULT_BUCKETS


def upsert_schema(data: pa.Schema) -> pa.Schema:
    """The table schema of an upsert table: its data columns, then the bucket partition column."""
    return data.append(pa.field(KEY_BUCKET, KEY_BUCKET_TYPE))


class KindMismatchError(UsageError):
    """A run asked for another kind (or format) than the table has."""


@dataclass(frozen=True, slots=True)
class TableSettings:
    """`[tables.<name>]` of the settings file."""

    kind: str | None = None
    format: str | None = None
    buckets: int | None = None


def table_settings(settings: Mapping[str, Any]) -> dict[str, TableSettings]:
    """Every `[tables.<name>]` of the parsed settings file, checked."""
    from topiclake.segments.settings import section, section_dataclass

    out = {}
    for name, values in section(settings, "tables").items():
        if not isinstance(values, dict):
            raise UsageError(f"[tables.{name}] in the settings file must be a table")
        parsed = section_dataclass(TableSettings, f"tables.{name}", values)
        check_choice("kind", parsed.kind, KINDS, f"[tables.{name}]")
        check_choice("format", parsed.format, FORMATS, f"[tables.{name}]")
        if parsed.buckets is not None and not 1 <= parsed.buckets <= 4096:
            raise UsageError(f"[tables.{name}] buckets = {parsed.buckets}: choose 1 to 4096")
        out[name] = parsed
    return out


def check_choice(what: str, value: str | None, choices: Sequence[str], where: str) -> None:
    if value is not None and value not in choices:
        raise UsageError(f"{where}: {what} {value!r} is not one of {', '.join(choices)}")


def default_kind(topic_meta: Callable[[str], TopicMeta], topics: Sequence[str]) -> str:
    """From the topics' cleanup.policy (`topic_meta`: a registered topic by name, on either kind
    of root): compacted topics make upsert tables."""
    kinds = {t: UPSERT if topic_meta(t).log_config.compact else APPEND for t in topics}
    if len(set(kinds.values())) > 1:
        listed = ", ".join(f"{t} ({k})" for t, k in sorted(kinds.items()))
        raise UsageError(f"the topics of one table have different cleanup policies: {listed}; "
                         "one table has one kind", hint="pass --kind append or --kind upsert")
    return next(iter(kinds.values()), APPEND)


@dataclass(frozen=True, slots=True)
class Recorded:
    """What a table's configuration says of its kind."""

    kind: str
    spec: UpsertSpec | None
    topics: tuple[str, ...]


def recorded(table) -> Recorded | None:
    """None for no table; an append table when the configuration names no kind (and its creating
    commit does not either: see delta.commit)."""
    if table is None:
        return None
    config = table.metadata().configuration or {}
    if CONFIG_KIND not in config and KEY_BUCKET in table.metadata().partition_columns:
        config = creation_config(table)  # killed between creating the table and recording its kind
    kind = config.get(CONFIG_KIND) or APPEND
    topics = tuple(json.loads(config[CONFIG_TOPICS])) if config.get(CONFIG_TOPICS) else ()
    if kind != UPSERT:
        return Recorded(APPEND, None, topics)
    change = ChangeSpec(format=config.get(CONFIG_FORMAT) or RAW,
                        key_columns=tuple(json.loads(config.get(CONFIG_KEY_COLUMNS) or '["key"]')))
    return Recorded(UPSERT, UpsertSpec(change, int(config.get(CONFIG_BUCKETS) or DEFAULT_BUCKETS)), topics)


def resolve(topic_meta: Callable[[str], TopicMeta], name: str, topics: Sequence[str], table, *, kind: str | None = None,
            value_format: str | None = None, settings: TableSettings | None = None) -> UpsertSpec | None:
    """The table's upsert spec, or None for an append table. Raises KindMismatchError when the
    table exists with another kind or format than asked. `name`: as `topiclake rebuild` takes it
    (a name under <root>/tables, else the table's path or URI), for the error's advice."""
    settings = settings or TableSettings()
    asked_kind = kind or settings.kind
    asked_format = value_format or settings.format
    check_choice("kind", asked_kind, KINDS, "--kind")
    check_choice("format", asked_format, FORMATS, "--format")
    if asked_kind == APPEND and asked_format and asked_format != RAW:  # before any hint could suggest it
        raise UsageError(f"table {name}: format {asked_format} needs an upsert table", hint="add --kind upsert")
    have = recorded(table)
    if have is not None:
        have_format = have.spec.change.format if have.spec is not None else RAW
        if (asked_kind and asked_kind != have.kind) or (asked_format and asked_format != have_format):
            want = asked_kind or (UPSERT if asked_format == DEBEZIUM else have.kind)
            rebuild = f"--kind {want}" + (f" --format {asked_format}" if asked_format else "")
            advice = (f"run `topiclake rebuild {name} {rebuild}` to rebuild it from the log" if "://" not in name else
                      f"rebuild swaps local directories only: ingest into a new table (--table) with {rebuild}")
            raise KindMismatchError(
                f"table {name} is an {have.kind} table (format {have_format}); this run asks for "
                f"{want} (format {asked_format or have_format}); a table never changes kind on its own: {advice}")
        return have.spec
    chosen = asked_kind or (UPSERT if asked_format == DEBEZIUM else default_kind(topic_meta, topics))
    if chosen == APPEND:
        return None
    return UpsertSpec(ChangeSpec(format=asked_format or RAW), settings.buckets or DEFAULT_BUCKETS)


def with_typed_key(spec: UpsertSpec | None, typed_spec) -> UpsertSpec | None:
    """A new raw upsert table whose topic has a key subject in the registry keys its rows by the
    decoded key columns, not the key bytes: a key written under a later schema version (another
    schema id in its bytes) is still the same row."""
    if spec is None or spec.change.format != RAW or typed_spec is None:
        return spec
    side = next((s for s in typed_spec.sides if s.name == "key"), None)
    if side is None:
        return spec
    columns = tuple(column for _, column in side.columns) or ((side.column,) if side.column else ())
    if not columns:
        return spec
    return dataclasses.replace(spec, change=dataclasses.replace(spec.change, key_columns=columns))


def creation_config(table) -> dict[str, str]:
    """The table properties the creating commit's commitInfo carries (`topiclake.table`)."""
    from ..table.delta import table_files

    fs, base = table_files(table.table_uri)
    try:
        with fs.open_input_stream(f"{base.rstrip('/')}/_delta_log/{0:020d}.json") as f:
            lines = f.read().decode().splitlines()
    except (OSError, FileNotFoundError):
        return {}
    for line in lines:
        info = json.loads(line).get("commitInfo")
        if info is not None:
            return dict((info.get("topiclake") or {}).get("table") or {})
    return {}


def heal(table, spec: UpsertSpec | None, topics: Sequence[str]) -> None:
    """Record an upsert table's properties if a crash left only its creating commit naming them."""
    if spec is not None and table is not None and CONFIG_KIND not in (table.metadata().configuration or {}):
        from ..table.delta import set_properties

        set_properties(table.table_uri, configuration(spec, topics))


def configuration(spec: UpsertSpec | None, topics: Sequence[str]) -> dict[str, str]:
    """The properties a new table is created with: none for an append table (the kind of a table
    without them), the kind, format, key columns, buckets and topics of an upsert table."""
    if spec is None:
        return {}
    return {CONFIG_KIND: UPSERT, CONFIG_TOPICS: json.dumps(sorted(topics)), CONFIG_FORMAT: spec.change.format,
            CONFIG_KEY_COLUMNS: json.dumps(list(spec.change.key_columns)), CONFIG_BUCKETS: str(spec.buckets)}
