"""The registry's operations: each REST call is answered from the replayed state, and each change
is planned as `_schemas` records, appended to the store, and read back through the one replay
path before the call answers (so an answer never reports what the log does not hold).

Writes are serialised by one lock. The store refuses an append when the log moved since the
state was replayed (another writer, e.g. a client producing to `_schemas`); the write then
replays what arrived and plans again. Parsing and compatibility checks run in a worker thread
(a `.proto` text compiles with protoc), never on the event loop the broker shares.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import Any, Protocol

from . import errors as E
from . import records as rec
from .compatibility import incompatibilities, validate_level
from .formats import SCHEMA_TYPES, parse
from .formats.base import ParsedSchema, ResolvedReference
from .records import Reference, SchemaValue
from .state import RegistryState

log = logging.getLogger(__name__)

MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
LATEST = "latest"
MAX_VERSION = 2**31 - 1
_WRITE_ATTEMPTS = 10
_MAX_REFERENCE_DEPTH = 32


class SchemaStore(Protocol):
    """Where `_schemas` lives: the broker's partition, or a broker reached over Kafka."""

    async def read(self, from_offset: int) -> tuple[list[tuple[int, bytes | None, bytes | None]], int]:
        """Records at offsets >= `from_offset` up to the current end, and the offset after them."""

    async def append(self, records: list[tuple[bytes, bytes | None]], *, expected_end: int) -> int:
        """Append durably (as acks=all) and return the first record's offset. A store that can
        tell raises StoreConflict when the log's end is not `expected_end`."""

    async def end_offset(self) -> int:
        """The log end offset now (cheap)."""


@dataclass(frozen=True, slots=True)
class SchemaRequest:
    """A schema in a request body: POST /subjects/{s}/versions, /subjects/{s}, /compatibility/..."""

    schema: str
    schema_type: str
    references: tuple[Reference, ...]
    id: int | None = None
    version: int | None = None
    metadata: Any = None
    rule_set: Any = None

    @classmethod
    def from_body(cls, body: Any) -> "SchemaRequest":
        if not isinstance(body, dict):
            raise E.bad_request("the request body must be a JSON object")
        schema = body.get("schema")
        if not isinstance(schema, str) or not schema.strip():
            raise E.invalid_schema("the request has no schema (\"schema\": a string)")
        schema_type = (body.get("schemaType") or "AVRO")
        if not isinstance(schema_type, str) or schema_type.upper() not in SCHEMA_TYPES:
            raise E.invalid_schema(f"unknown schemaType {schema_type!r}; the registry knows {', '.join(SCHEMA_TYPES)}")
        refs = []
        for ref in body.get("references") or ():
            try:
                refs.append(Reference(str(ref["name"]), str(ref["subject"]), int(ref["version"])))
            except (KeyError, TypeError, ValueError):
                raise E.invalid_schema(f"a reference needs name, subject and version: {ref!r}") from None
        return cls(schema, schema_type.upper(), tuple(refs), _optional_int(body, "id"), _optional_int(body, "version"),
                   body.get("metadata"), body.get("ruleSet"))


def _optional_int(body: dict, name: str) -> int | None:
    value = body.get(name)
    if value is None or value == -1:  # Confluent's clients send -1 for "not given"
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise E.bad_request(f"{name} must be a non-negative integer, not {value!r}")
    return value


def parse_version(text: str | int, *, allow_latest: bool = True):
    """A version path parameter: 1..2^31-1, or "latest" (also -1)."""
    if allow_latest and str(text) in (LATEST, "-1"):
        return LATEST
    try:
        version = int(text)
    except (TypeError, ValueError):
        raise E.invalid_version(str(text)) from None
    if not 1 <= version <= MAX_VERSION:
        raise E.invalid_version(str(text))
    return version


def check_subject(subject: str) -> str:
    if not subject or any(ord(c) < 0x20 for c in subject):
        raise E.invalid_subject(subject)
    return subject


def version_json(value: SchemaValue, schema_text: str | None = None) -> dict:
    out: dict[str, Any] = {"subject": value.subject, "version": value.version, "id": value.id}
    out.update(_schema_fields(value, schema_text))
    return out


def _schema_fields(value: SchemaValue, schema_text: str | None = None) -> dict:
    out: dict[str, Any] = {}
    if value.schema_type != rec.AVRO:
        out["schemaType"] = value.schema_type
    if value.references:
        out["references"] = [r.to_json() for r in value.references]
    if value.metadata is not None:
        out["metadata"] = value.metadata
    if value.rule_set is not None:
        out["ruleSet"] = value.rule_set
    out["schema"] = value.schema if schema_text is None else schema_text
    return out


class SchemaRegistry:
    def __init__(self, store: SchemaStore, *, read_only: bool = False):
        self.store = store
        self.read_only = read_only  # a standalone registry told not to write
        self.state = RegistryState()
        self._lock = asyncio.Lock()
        self._parsed: dict[int, ParsedSchema] = {}  # by schema id (an id's schema never changes)

    # ================================================================ log
    async def load(self) -> None:
        async with self._lock:
            await self._catch_up()
        log.info("schema registry loaded %d subjects, %d schema ids (up to id %d) from _schemas [0, %d)",
                 len(self.state.subjects), len(self._ids()), self.state.max_id, self.state.next_offset)

    def _ids(self) -> set[int]:
        return {v.id for versions in self.state.subjects.values() for v in versions.values()}

    async def sync(self) -> None:
        """Replay what other writers appended since (reads see them too)."""
        if await self.store.end_offset() > self.state.next_offset:
            async with self._lock:
                await self._catch_up()

    async def _catch_up(self) -> set[int]:
        """Replay every record after the state (under the lock); the offsets replay skipped."""
        records, end = await self.store.read(self.state.next_offset)
        rejected = set()
        for offset, key, value in records:
            if offset >= self.state.next_offset and not self.state.replay_bytes(offset, key, value):
                rejected.add(offset)
        self.state.next_offset = max(self.state.next_offset, end)
        return rejected

    async def _write(self, plan) -> Any:
        """Plan (in a worker thread) from the replayed state, append, replay; again if the log moved."""
        if self.read_only:
            raise E.operation_not_permitted("this registry is read-only (started with --read-only)")
        async with self._lock:
            for _ in range(_WRITE_ATTEMPTS):
                await self._catch_up()
                result, records = await asyncio.to_thread(plan)
                if not records:
                    return result
                try:
                    first = await self.store.append([r.encode() for r in records], expected_end=self.state.next_offset)
                except E.StoreConflict:
                    continue
                rejected = await self._catch_up()
                if not rejected.intersection(range(first, first + len(records))):
                    return result
                log.warning("_schemas: our records at %d.. lost to a concurrent writer; planning again", first)
            raise E.store_error("the _schemas log kept changing under this write (another registry writing?)")

    # ============================================================ parsing
    def _parsed_value(self, value: SchemaValue, depth: int = 0) -> ParsedSchema:
        parsed = self._parsed.get(value.id)
        if parsed is None:
            parsed = parse(value.schema_type, value.schema, self._resolve(value.references, depth))
            self._parsed[value.id] = parsed
        return parsed

    def _resolve(self, references: tuple[Reference, ...], depth: int = 0) -> list[ResolvedReference]:
        if depth > _MAX_REFERENCE_DEPTH:
            raise E.invalid_schema(f"references nest deeper than {_MAX_REFERENCE_DEPTH} (a cycle?)")
        resolved = []
        for ref in references:
            versions = self.state.subjects.get(ref.subject, {})
            value = versions.get(ref.version) if ref.version != -1 else self.state.latest(ref.subject)
            if value is None:
                raise E.invalid_schema(f"reference {ref.name!r} names {ref.subject} version {ref.version}, "
                                       "which is not registered")
            resolved.append(ResolvedReference(ref.name, ref.subject, value.version,
                                              self._parsed_value(value, depth + 1)))
        return resolved

    def _parse_request(self, request: SchemaRequest) -> ParsedSchema:
        return parse(request.schema_type, request.schema, self._resolve(request.references))

    async def formatted(self, value: SchemaValue, fmt: str | None) -> str:
        if not fmt or value.schema_type != "PROTOBUF":
            return value.schema
        parsed = await asyncio.to_thread(self._parsed_value, value)
        return parsed.formatted(fmt)

    # ============================================================ reads
    def schema_types(self) -> list[str]:
        return list(SCHEMA_TYPES)

    def subjects(self, *, deleted: bool = False, prefix: str = "") -> list[str]:
        return self.state.subject_names(deleted=deleted, prefix=prefix)

    def _subject_versions(self, subject: str, *, deleted: bool) -> list[SchemaValue]:
        versions = self.state.versions(subject, deleted=deleted)
        if not versions:
            raise E.subject_not_found(subject)
        return versions

    def versions(self, subject: str, *, deleted: bool = False) -> list[int]:
        return [v.version for v in self._subject_versions(subject, deleted=deleted)]

    def version(self, subject: str, version, *, deleted: bool = False) -> SchemaValue:
        versions = self._subject_versions(subject, deleted=True)
        if version == LATEST:
            live = [v for v in versions if deleted or not v.deleted]
            if not live:
                raise E.subject_not_found(subject)
            return live[-1]
        value = next((v for v in versions if v.version == version), None)
        if value is None or (value.deleted and not deleted):
            raise E.version_not_found(version)
        return value

    def referenced_by(self, subject: str, version) -> list[int]:
        value = self.version(subject, version, deleted=True)
        return self.state.referenced_by(subject, value.version)

    def schema_by_id(self, schema_id: int) -> SchemaValue:
        value = self.state.schema_by_id(schema_id)
        if value is None:
            raise E.schema_not_found(schema_id)
        return value

    def schema_json(self, value: SchemaValue, schema_text: str) -> dict:
        return _schema_fields(value, schema_text)

    def subjects_of(self, schema_id: int, *, deleted: bool = False) -> list[str]:
        self.schema_by_id(schema_id)
        return sorted({v.subject for v in self.state.registrations_of(schema_id, deleted=deleted)})

    def versions_of(self, schema_id: int, *, deleted: bool = False) -> list[dict]:
        self.schema_by_id(schema_id)
        return [{"subject": v.subject, "version": v.version}
                for v in self.state.registrations_of(schema_id, deleted=deleted)]

    def schemas(self, *, prefix: str = "", deleted: bool = False, latest_only: bool = False) -> list[dict]:
        out = []
        for subject in self.state.subject_names(deleted=deleted, prefix=prefix):
            versions = self.state.versions(subject, deleted=deleted)
            out.extend(version_json(v) for v in (versions[-1:] if latest_only else versions))
        return out

    def get_config(self, subject: str | None, *, default_to_global: bool = False) -> dict:
        if subject is None:
            return {"compatibilityLevel": self.state.compatibility(None)}
        level = self.state.compatibility(subject, fallback=default_to_global)
        if level is None:
            raise E.subject_compatibility_not_configured(subject)
        return {"compatibilityLevel": level}

    def get_mode(self, subject: str | None, *, default_to_global: bool = False) -> dict:
        if subject is None:
            return {"mode": self.state.mode(None)}
        mode = self.state.mode(subject, fallback=default_to_global)
        if mode is None:
            raise E.subject_mode_not_configured(subject)
        return {"mode": mode}

    # ============================================================ lookup / compatibility (no writes)
    async def lookup(self, subject: str, request: SchemaRequest, *, normalize: bool = False,
                     deleted: bool = False) -> SchemaValue:
        versions = self._subject_versions(subject, deleted=deleted)
        return await asyncio.to_thread(self._find, versions, request, normalize)

    def _find(self, versions: list[SchemaValue], request: SchemaRequest, normalize: bool) -> SchemaValue:
        parsed = self._parse_request(request)
        match = self._matching(versions, request, parsed, normalize)
        if match is None:
            raise E.schema_not_found()
        return match

    def _matching(self, versions: list[SchemaValue], request: SchemaRequest, parsed: ParsedSchema,
                  normalize: bool) -> SchemaValue | None:
        """The newest version holding this schema: the same stored text and references, or (asked
        to normalize) the same normalized form."""
        wanted = (request.schema_type, parsed.canonical, request.references)
        for value in reversed(versions):
            if value.content == wanted or (value.schema_type, value.schema.strip(), value.references) == wanted:
                return value
        if normalize:
            target = parsed.normalized()
            for value in reversed(versions):
                if value.schema_type == request.schema_type and value.references == request.references:
                    if self._parsed_value(value).normalized() == target:
                        return value
        return None

    async def check_compatibility(self, subject: str, version, request: SchemaRequest, *,
                                  verbose: bool = False) -> dict:
        def plan() -> list[str]:
            parsed = self._parse_request(request)
            live = self.state.versions(subject)
            if version is None:
                targets = live
            elif version == LATEST:
                targets = live[-1:]
            else:
                targets = [self.version(subject, version)]
            level = self.state.compatibility(subject)
            if version is not None:  # one version: the level's direction, without _TRANSITIVE
                level = level.removesuffix("_TRANSITIVE")
            return incompatibilities(level, parsed, [(v.version, self._parsed_value(v)) for v in targets])

        if version not in (None, LATEST):
            self.version(subject, version)  # 40401 / 40402 before parsing, as Confluent
        messages = await asyncio.to_thread(plan)
        out: dict[str, Any] = {"is_compatible": not messages}
        if verbose:
            out["messages"] = messages
        return out

    # ============================================================ writes
    async def register(self, subject: str, request: SchemaRequest, *, normalize: bool = False) -> dict:
        check_subject(subject)
        return await self._write(lambda: self._plan_register(subject, request, normalize))

    def _plan_register(self, subject: str, request: SchemaRequest, normalize: bool):
        state = self.state
        mode = state.mode(subject)
        if mode in ("READONLY", "READONLY_OVERRIDE"):
            raise E.operation_not_permitted(f"Subject {subject} is in read-only mode")
        importing = mode == "IMPORT"
        if request.id is not None and not importing:
            raise E.operation_not_permitted(f"Subject {subject} is not in import mode: a schema id may only be "
                                            "given in IMPORT mode")
        if importing and request.id is None:
            raise E.operation_not_permitted(f"Subject {subject} is in import mode: the schema id must be given")
        parsed = self._parse_request(request)
        live = state.versions(subject)
        existing = self._matching(live, request, parsed, normalize)
        if existing is not None and (request.id is None or request.id == existing.id):
            return {"id": existing.id}, []
        text = parsed.normalized() if normalize else parsed.canonical
        content = (request.schema_type, text, request.references)
        if importing:
            bound = state.schema_by_id(request.id)
            if bound is not None and bound.content != content:
                raise E.operation_not_permitted(f"Overwrite new schema with id {request.id} is not permitted.")
            schema_id = request.id
            version = request.version or state.next_version(subject)
            if version in state.subjects.get(subject, {}):
                raise E.operation_not_permitted(f"Subject {subject} already has version {version}")
        else:
            level = state.compatibility(subject)
            messages = incompatibilities(level, parsed, [(v.version, self._parsed_value(v)) for v in live])
            if messages:
                raise E.incompatible_schema(subject, messages)
            schema_id = state.id_of(content) or state.next_id()
            version = state.next_version(subject)
        value = SchemaValue(subject, version, schema_id, text, request.schema_type, request.references,
                            metadata=request.metadata, rule_set=request.rule_set)
        return {"id": schema_id}, [rec.schema_record(value)]

    async def delete_version(self, subject: str, version, *, permanent: bool = False) -> int:
        return await self._write(lambda: self._plan_delete_version(subject, version, permanent))

    def _plan_delete_version(self, subject: str, version, permanent: bool):
        self._writable(subject)
        # a soft-deleted version is found (40406 / hard delete); "latest" of a soft delete is the latest live one
        value = self.version(subject, version, deleted=permanent or version != LATEST)
        if not permanent and value.deleted:
            raise E.version_soft_deleted(subject, value.version)
        if permanent and not value.deleted:
            raise E.version_not_soft_deleted(subject, value.version)
        self._not_referenced(subject, [value.version])
        if not permanent:
            return value.version, [rec.schema_record(replace(value, deleted=True))]
        return value.version, [*self._keep_max_id([value]), rec.schema_tombstone(subject, value.version)]

    async def delete_subject(self, subject: str, *, permanent: bool = False) -> list[int]:
        return await self._write(lambda: self._plan_delete_subject(subject, permanent))

    def _plan_delete_subject(self, subject: str, permanent: bool):
        self._writable(subject)
        every = self._subject_versions(subject, deleted=True)
        live = [v for v in every if not v.deleted]
        cleanup = []
        if subject in self.state.configs:
            cleanup.append(rec.config_record(subject, None))
        if subject in self.state.modes:
            cleanup.append(rec.mode_record(subject, None))
        if not permanent:
            if not live:
                raise E.subject_soft_deleted(subject)
            self._not_referenced(subject, [v.version for v in live])
            return [v.version for v in live], [rec.delete_subject_record(subject, live[-1].version), *cleanup]
        if live:
            raise E.subject_not_soft_deleted(subject)
        self._not_referenced(subject, [v.version for v in every])
        return [v.version for v in every], [*self._keep_max_id(every),
                                            *(rec.schema_tombstone(subject, v.version) for v in every),
                                            rec.delete_subject_tombstone(subject), *cleanup]

    def _writable(self, subject: str) -> None:
        if self.state.mode(subject) in ("READONLY", "READONLY_OVERRIDE"):
            raise E.operation_not_permitted(f"Subject {subject} is in read-only mode")

    def _not_referenced(self, subject: str, versions: list[int]) -> None:
        for version in versions:
            ids = self.state.referenced_by(subject, version)
            if ids:
                raise E.reference_exists(f"One or more references exist to the schema {{subject={subject}, "
                                         f"version={version}}} (from schema ids {ids})")

    def _keep_max_id(self, values: list[SchemaValue]) -> list[rec.Record]:
        """Before a hard delete drops the last record of the highest id: the id high-water mark."""
        doomed = {(v.subject, v.version) for v in values}
        holders = {(v.subject, v.version) for v in self.state.registrations_of(self.state.max_id, deleted=True)}
        if holders and holders <= doomed:
            return [rec.id_high_water_record(self.state.max_id)]
        return []

    async def set_config(self, subject: str | None, body: Any) -> dict:
        if not isinstance(body, dict):
            raise E.bad_request("the request body must be a JSON object")
        level = validate_level(body.get("compatibility", body.get("compatibilityLevel")))
        config = {k: v for k, v in body.items() if k not in ("compatibility", "compatibilityLevel")}
        config = {"compatibilityLevel": level, **config}
        if subject is not None:
            check_subject(subject)

        def plan():
            return {"compatibility": level}, [rec.config_record(subject, config)]
        return await self._write(plan)

    async def delete_config(self, subject: str | None) -> dict:
        def plan():
            current = self.get_config(subject)
            return current, [rec.config_record(subject, None)] if subject in self.state.configs else []
        return await self._write(plan)

    async def set_mode(self, subject: str | None, body: Any, *, force: bool = False) -> dict:
        if not isinstance(body, dict):
            raise E.bad_request("the request body must be a JSON object")
        mode = body.get("mode")
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise E.invalid_mode(mode)
        mode = mode.upper()

        def plan():
            if mode == "IMPORT" and not force:
                has_schemas = self.state.versions(subject, deleted=True) if subject else self.state.subjects
                if has_schemas:
                    raise E.operation_not_permitted("Cannot import since found existing subjects")
            return {"mode": mode}, [rec.mode_record(subject, mode)]
        return await self._write(plan)

    async def delete_mode(self, subject: str) -> dict:
        def plan():
            current = self.get_mode(subject)
            return current, [rec.mode_record(subject, None)]
        return await self._write(plan)
