"""The `_schemas` topic's records, in Confluent Schema Registry's own JSON format (KafkaStore's
SchemaRegistrySerializer), so either registry can read the other's topic.

Keys (a compacted topic: the last record of a key wins):
  {"keytype":"SCHEMA","subject":S,"version":V,"magic":1}     value: the schema version, or null (hard delete)
  {"keytype":"CONFIG","subject":S|null,"magic":0}            value: {"compatibilityLevel": L, ...} or null
  {"keytype":"MODE","subject":S|null,"magic":0}              value: {"mode": M} or null
  {"keytype":"DELETE_SUBJECT","subject":S,"magic":0}         value: {"subject": S, "version": latest deleted}
  {"keytype":"CLEAR_SUBJECT","subject":S,"magic":0}          value: {"subject": S}
  {"keytype":"NOOP","magic":0}                               value: null, or {"maxId": N} (ours, below)

Schema values: {"subject","version","id","schemaType" (absent = AVRO),"references":[{"name","subject",
"version"}],"metadata","ruleSet","schema","deleted"}.

One extension: when a hard delete removes the only record holding the highest schema id, we
first write the id high-water mark as the value of the NOOP key, so ids are never reused even
after compaction drops the deleted schema (Confluent ignores NOOP records).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

SCHEMA = "SCHEMA"
CONFIG = "CONFIG"
MODE = "MODE"
NOOP = "NOOP"
DELETE_SUBJECT = "DELETE_SUBJECT"
CLEAR_SUBJECT = "CLEAR_SUBJECT"
KEY_TYPES = (SCHEMA, CONFIG, MODE, NOOP, DELETE_SUBJECT, CLEAR_SUBJECT)

AVRO = "AVRO"


class RecordError(ValueError):
    """A `_schemas` record that is not in the format above (replay skips it, as Confluent does)."""


@dataclass(frozen=True, slots=True)
class Reference:
    name: str
    subject: str
    version: int

    def to_json(self) -> dict:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True, slots=True)
class SchemaValue:
    subject: str
    version: int
    id: int
    schema: str
    schema_type: str = AVRO
    references: tuple[Reference, ...] = ()
    deleted: bool = False
    # Confluent's data-contract fields, kept and served as given (not interpreted).
    metadata: Any = field(default=None, compare=False)
    rule_set: Any = field(default=None, compare=False)

    @property
    def content(self) -> tuple:
        """What makes two registrations the same schema (and so the same id)."""
        return (self.schema_type, self.schema, self.references)

    def to_json(self) -> dict:
        out: dict[str, Any] = {"subject": self.subject, "version": self.version, "id": self.id}
        if self.schema_type != AVRO:
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = [r.to_json() for r in self.references]
        if self.metadata is not None:
            out["metadata"] = self.metadata
        if self.rule_set is not None:
            out["ruleSet"] = self.rule_set
        out["schema"] = self.schema
        out["deleted"] = self.deleted
        return out


@dataclass(frozen=True, slots=True)
class Key:
    keytype: str
    subject: str | None = None
    version: int | None = None

    def encode(self) -> bytes:
        if self.keytype == SCHEMA:
            obj = {"keytype": SCHEMA, "subject": self.subject, "version": self.version, "magic": 1}
        elif self.keytype == NOOP:
            obj = {"keytype": NOOP, "magic": 0}
        else:
            obj = {"keytype": self.keytype, "subject": self.subject, "magic": 0}
        return json.dumps(obj, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class Record:
    """One `_schemas` record: a key and its decoded value (None = tombstone)."""

    key: Key
    value: Any  # SchemaValue | dict (config, mode, delete/clear subject, noop) | None

    def encode(self) -> tuple[bytes, bytes | None]:
        if self.value is None:
            return self.key.encode(), None
        value = self.value.to_json() if isinstance(self.value, SchemaValue) else self.value
        return self.key.encode(), json.dumps(value, separators=(",", ":")).encode()


# -- constructors for the records the registry writes
def schema_record(value: SchemaValue) -> Record:
    return Record(Key(SCHEMA, value.subject, value.version), value)


def schema_tombstone(subject: str, version: int) -> Record:
    return Record(Key(SCHEMA, subject, version), None)


def config_record(subject: str | None, config: dict | None) -> Record:
    return Record(Key(CONFIG, subject), config)


def mode_record(subject: str | None, mode: str | None) -> Record:
    return Record(Key(MODE, subject), None if mode is None else {"mode": mode})


def delete_subject_record(subject: str, version: int) -> Record:
    return Record(Key(DELETE_SUBJECT, subject), {"subject": subject, "version": version})


def delete_subject_tombstone(subject: str) -> Record:
    return Record(Key(DELETE_SUBJECT, subject), None)


def id_high_water_record(max_id: int) -> Record:
    return Record(Key(NOOP), {"maxId": max_id})


# -- decoding
def decode(key: bytes | None, value: bytes | None) -> Record:
    """Parse one record; RecordError if it is not Confluent's format."""
    if key is None:
        raise RecordError("record without a key")
    try:
        k = json.loads(key)
        v = None if value is None else json.loads(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordError(f"not JSON: {exc}") from None
    if not isinstance(k, dict) or k.get("keytype") not in KEY_TYPES:
        raise RecordError(f"unknown key {key[:200]!r}")
    keytype = k["keytype"]
    subject = k.get("subject")
    if subject is not None and not isinstance(subject, str):
        raise RecordError(f"key subject is not a string: {key[:200]!r}")
    if keytype == SCHEMA:
        version = k.get("version")
        if not isinstance(subject, str) or not _is_int(version):
            raise RecordError(f"SCHEMA key without subject and version: {key[:200]!r}")
        return Record(Key(SCHEMA, subject, version), None if v is None else _schema_value(v))
    if v is not None and not isinstance(v, dict):
        raise RecordError(f"{keytype} value is not an object: {value[:200]!r}")
    if keytype == NOOP:
        return Record(Key(NOOP), v)
    if keytype in (DELETE_SUBJECT, CLEAR_SUBJECT) and not isinstance(subject, str):
        raise RecordError(f"{keytype} key without a subject: {key[:200]!r}")
    return Record(Key(keytype, subject), v)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _schema_value(v: Any) -> SchemaValue:
    if not isinstance(v, dict):
        raise RecordError("SCHEMA value is not an object")
    try:
        refs = tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"])) for r in v.get("references") or ())
        value = SchemaValue(subject=str(v["subject"]), version=int(v["version"]), id=int(v["id"]),
                            schema=str(v["schema"]), schema_type=str(v.get("schemaType") or AVRO).upper(),
                            references=refs, deleted=bool(v.get("deleted", False)),
                            metadata=v.get("metadata"), rule_set=v.get("ruleSet"))
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"SCHEMA value lacks a field or has a wrong type: {exc}") from None
    return value
