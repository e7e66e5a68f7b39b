"""`_schemas` records in Confluent's format, and the replay that rebuilds the registry from them."""

from __future__ import annotations

import json

import pytest

from topiclake.registry import records as rec
from topiclake.registry.records import Reference, SchemaValue
from topiclake.registry.state import RegistryState


def _value(subject="s", version=1, schema_id=1, schema='"string"', **kw) -> SchemaValue:
    return SchemaValue(subject, version, schema_id, schema, **kw)


def _replay(state: RegistryState, *records: rec.Record) -> list[bool]:
    out = []
    for record in records:
        key, value = record.encode()
        out.append(state.replay_bytes(state.next_offset, key, value))
    return out


def test_keys_and_values_are_confluents_json():
    value = _value(schema_type="PROTOBUF", references=(Reference("a.proto", "a", 2),))
    key, body = rec.schema_record(value).encode()
    assert json.loads(key) == {"keytype": "SCHEMA", "subject": "s", "version": 1, "magic": 1}
    assert json.loads(body) == {"subject": "s", "version": 1, "id": 1, "schemaType": "PROTOBUF",
                                "references": [{"name": "a.proto", "subject": "a", "version": 2}],
                                "schema": '"string"', "deleted": False}
    assert json.loads(rec.config_record(None, {"compatibilityLevel": "FULL"}).encode()[0]) == \
        {"keytype": "CONFIG", "subject": None, "magic": 0}
    assert rec.mode_record("s", None).encode()[1] is None
    assert json.loads(rec.delete_subject_record("s", 3).encode()[1]) == {"subject": "s", "version": 3}
    # AVRO is the default type: Confluent leaves schemaType out
    assert "schemaType" not in json.loads(rec.schema_record(_value()).encode()[1])
    decoded = rec.decode(key, body)
    assert decoded.value == value and decoded.key == rec.Key("SCHEMA", "s", 1)


@pytest.mark.parametrize("key, value", [
    (b"not json", None),
    (b'{"keytype":"WHAT","magic":0}', None),
    (b'{"keytype":"SCHEMA","subject":"s","magic":1}', b'{}'),
    (b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}', b'{"subject":"s"}'),
    (None, b"{}"),
])
def test_records_not_in_confluents_format_are_refused(key, value):
    with pytest.raises(rec.RecordError):
        rec.decode(key, value)


def test_replay_skips_undecodable_records_and_goes_on():
    state = RegistryState()
    assert state.replay_bytes(0, b"garbage", b"{") is False
    assert _replay(state, rec.schema_record(_value())) == [True]
    assert state.next_offset == 2 and state.subject_names() == ["s"]


def test_soft_delete_hard_delete_and_subject_delete():
    state = RegistryState()
    _replay(state, rec.schema_record(_value(version=1, schema_id=1)),
            rec.schema_record(_value(version=2, schema_id=2, schema='"int"')))
    assert [v.version for v in state.versions("s")] == [1, 2]
    _replay(state, rec.schema_record(_value(version=1, schema_id=1, deleted=True)))
    assert [v.version for v in state.versions("s")] == [2]
    assert [v.version for v in state.versions("s", deleted=True)] == [1, 2]
    assert state.schema_by_id(1).deleted  # a soft-deleted schema is still served by id
    _replay(state, rec.delete_subject_record("s", 2))
    assert state.subject_names() == [] and state.subject_names(deleted=True) == ["s"]
    assert state.next_version("s") == 3  # versions keep counting past soft-deleted ones
    _replay(state, rec.schema_tombstone("s", 1), rec.schema_tombstone("s", 2))
    assert state.subjects == {} and state.schema_by_id(1) is None
    assert state.next_id() == 3  # ids are never reused
    assert state.next_version("s") == 1


def test_id_high_water_mark_survives_the_deleted_schema():
    """After compaction only the tombstone-free records remain: the NOOP high-water mark keeps the id."""
    state = RegistryState()
    _replay(state, rec.id_high_water_record(41), rec.schema_tombstone("gone", 1))
    assert state.next_id() == 42


def test_first_registration_of_an_id_or_a_version_wins():
    state = RegistryState()
    assert _replay(state, rec.schema_record(_value(schema_id=7))) == [True]
    other = _value(subject="t", schema_id=7, schema='"bytes"')  # id 7 is another schema's
    again = _value(schema_id=8, schema='"bytes"')  # s/1 already holds id 7
    assert _replay(state, rec.schema_record(other), rec.schema_record(again)) == [False, False]
    assert state.schema_by_id(7).schema == '"string"' and state.schema_by_id(8) is None


def test_config_and_mode_fall_back_to_global_then_defaults():
    state = RegistryState()
    assert state.compatibility("s") == "BACKWARD" and state.mode("s") == "READWRITE"
    _replay(state, rec.config_record(None, {"compatibilityLevel": "FULL"}), rec.mode_record("s", "READONLY"))
    assert state.compatibility("s") == "FULL" and state.compatibility("s", fallback=False) is None
    assert state.mode("s") == "READONLY" and state.mode(None) == "READWRITE"
    _replay(state, rec.config_record(None, None))
    assert state.compatibility("s") == "BACKWARD"


def test_referenced_by_lists_live_referrers():
    state = RegistryState()
    _replay(state, rec.schema_record(_value(subject="base", schema_id=1)),
            rec.schema_record(_value(subject="user", schema_id=2, schema='"x"',
                                     references=(Reference("Base", "base", 1),))))
    assert state.referenced_by("base", 1) == [2]
    _replay(state, rec.schema_record(_value(subject="user", schema_id=2, schema='"x"', deleted=True,
                                            references=(Reference("Base", "base", 1),))))
    assert state.referenced_by("base", 1) == []
