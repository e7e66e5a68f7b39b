"""The registry's state, rebuilt from `_schemas` by one `replay(record)`: the same call applies a
record the registry just wrote and every record read at load, so what is served is always what
the log says (as the group and transaction coordinators replay their topics).

Replay is deterministic, so every reader of the topic (the broker, a standalone registry, the
lake) arrives at the same state. Records that contradict the state are skipped the way
Confluent's reader skips them: a schema id already bound to another schema, or a version that
already holds another id, keeps what came first.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from . import records as rec
from .records import Record, SchemaValue

log = logging.getLogger(__name__)

DEFAULT_COMPATIBILITY = "BACKWARD"
DEFAULT_MODE = "READWRITE"


class RegistryState:
    def __init__(self) -> None:
        self.subjects: dict[str, dict[int, SchemaValue]] = {}  # subject -> version -> value (soft-deleted too)
        self.configs: dict[str | None, dict] = {}  # None = global
        self.modes: dict[str | None, str] = {}
        self.max_id = 0  # highest schema id ever seen: ids are never reused
        self.next_offset = 0  # the `_schemas` offset after the last record replayed
        self._keys_by_id: dict[int, set[tuple[str, int]]] = {}
        self._id_by_content: dict[tuple, int] = {}

    # ================================================================ replay
    def replay_bytes(self, offset: int, key: bytes | None, value: bytes | None) -> bool:
        """Decode and replay the record at `offset`; an undecodable record is logged and skipped."""
        self.next_offset = max(self.next_offset, offset + 1)
        try:
            record = rec.decode(key, value)
        except rec.RecordError as exc:
            log.warning("_schemas offset %d: skipping a record that is not Confluent's format (%s)", offset, exc)
            return False
        return self.replay(record)

    def replay(self, record: Record) -> bool:
        """Apply one record; False when it contradicts the state and is skipped."""
        key, value = record.key, record.value
        if key.keytype == rec.SCHEMA:
            return self._replay_schema(key.subject, key.version, value)
        if key.keytype == rec.CONFIG:
            _set_or_drop(self.configs, key.subject, value)
        elif key.keytype == rec.MODE:
            mode = value.get("mode") if isinstance(value, dict) else None
            _set_or_drop(self.modes, key.subject, str(mode).upper() if mode is not None else None)
        elif key.keytype == rec.DELETE_SUBJECT and value is not None:
            upto = value.get("version")
            for version, v in list(self.subjects.get(key.subject, {}).items()):
                if isinstance(upto, int) and version <= upto and not v.deleted:
                    self.subjects[key.subject][version] = replace(v, deleted=True)
        elif key.keytype == rec.NOOP and isinstance(value, dict) and isinstance(value.get("maxId"), int):
            self.max_id = max(self.max_id, value["maxId"])
        return True

    def _replay_schema(self, subject: str, version: int, value: SchemaValue | None) -> bool:
        versions = self.subjects.get(subject, {})
        current = versions.get(version)
        if value is None:  # hard delete of one version
            if current is not None:
                del versions[version]
                if not versions:
                    del self.subjects[subject]
                self._unbind(current, (subject, version))
            return True
        if value.subject != subject or value.version != version:
            log.warning("_schemas: skipping schema value for %s/%d filed under key %s/%d",
                        value.subject, value.version, subject, version)
            return False
        bound = self._content_of(value.id)
        if bound is not None and bound != value.content:
            log.warning("_schemas: skipping %s version %d: schema id %d already belongs to another schema",
                        subject, version, value.id)
            return False
        if current is not None and current.id != value.id:
            log.warning("_schemas: skipping %s version %d with id %d: the version already holds id %d",
                        subject, version, value.id, current.id)
            return False
        self.subjects.setdefault(subject, {})[version] = value
        self._keys_by_id.setdefault(value.id, set()).add((subject, version))
        self._id_by_content.setdefault(value.content, value.id)
        self.max_id = max(self.max_id, value.id)
        return True

    def _unbind(self, value: SchemaValue, key: tuple[str, int]) -> None:
        keys = self._keys_by_id.get(value.id)
        if keys is None:
            return
        keys.discard(key)
        if not keys:
            del self._keys_by_id[value.id]
            if self._id_by_content.get(value.content) == value.id:
                del self._id_by_content[value.content]

    def _content_of(self, schema_id: int) -> tuple | None:
        value = self.schema_by_id(schema_id)
        return None if value is None else value.content

    # ================================================================ queries
    def subject_names(self, *, deleted: bool = False, prefix: str = "") -> list[str]:
        return sorted(s for s, versions in self.subjects.items()
                      if s.startswith(prefix) and any(deleted or not v.deleted for v in versions.values()))

    def versions(self, subject: str, *, deleted: bool = False) -> list[SchemaValue]:
        """The subject's versions in order (soft-deleted ones only with `deleted`)."""
        versions = self.subjects.get(subject, {})
        return [versions[n] for n in sorted(versions) if deleted or not versions[n].deleted]

    def latest(self, subject: str, *, deleted: bool = False) -> SchemaValue | None:
        versions = self.versions(subject, deleted=deleted)
        return versions[-1] if versions else None

    def next_version(self, subject: str) -> int:
        """Versions keep counting past soft-deleted ones (Confluent numbers them the same way)."""
        versions = self.subjects.get(subject)
        return max(versions) + 1 if versions else 1

    def next_id(self) -> int:
        return self.max_id + 1

    def schema_by_id(self, schema_id: int) -> SchemaValue | None:
        """A registration holding the id: a live one if any (the id's schema is served even when
        every registration of it is soft-deleted, so consumers can still read old records)."""
        keys = self._keys_by_id.get(schema_id)
        if not keys:
            return None
        values = [self.subjects[s][v] for s, v in sorted(keys)]
        return next((v for v in values if not v.deleted), values[0])

    def registrations_of(self, schema_id: int, *, deleted: bool = False) -> list[SchemaValue]:
        values = [self.subjects[s][v] for s, v in sorted(self._keys_by_id.get(schema_id, ()))]
        return [v for v in values if deleted or not v.deleted]

    def id_of(self, content: tuple) -> int | None:
        return self._id_by_content.get(content)

    def is_only_holder_of_max_id(self, subject: str, version: int) -> bool:
        """True when hard-deleting this version drops the last record of the highest id."""
        value = self.subjects.get(subject, {}).get(version)
        return value is not None and value.id == self.max_id and self._keys_by_id.get(value.id) == {(subject, version)}

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of live schemas that reference this subject version."""
        ids = {v.id for versions in self.subjects.values() for v in versions.values()
               if not v.deleted and any(r.subject == subject and r.version == version for r in v.references)}
        return sorted(ids)

    def compatibility(self, subject: str | None, *, fallback: bool = True) -> str | None:
        config = self.configs.get(subject)
        level = config.get("compatibilityLevel") if config else None
        if level is None and fallback and subject is not None:
            level = (self.configs.get(None) or {}).get("compatibilityLevel")
        if level is None and fallback:
            level = DEFAULT_COMPATIBILITY
        return level

    def mode(self, subject: str | None, *, fallback: bool = True) -> str | None:
        mode = self.modes.get(subject)
        if mode is None and fallback and subject is not None:
            mode = self.modes.get(None)
        if mode is None and fallback:
            mode = DEFAULT_MODE
        return mode


def _set_or_drop(table: dict, key, value) -> None:
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value
