"""The schema registry's REST API, over real HTTP, served by a real broker process: every endpoint,
and Confluent's error codes and bodies."""

from __future__ import annotations

import base64
import json
import uuid

import pytest
from google.protobuf import descriptor_pb2

from tests.support.registry_http import subject_path

AVRO_V1 = json.dumps({"type": "record", "name": "User", "namespace": "t",
                      "fields": [{"name": "name", "type": "string"}]})
AVRO_V2 = json.dumps({"type": "record", "name": "User", "namespace": "t",
                      "fields": [{"name": "name", "type": "string"},
                                 {"name": "age", "type": ["null", "int"], "default": None}]})
AVRO_BAD = json.dumps({"type": "record", "name": "User", "namespace": "t",  # new field, no default
                       "fields": [{"name": "name", "type": "string"}, {"name": "email", "type": "string"}]})


@pytest.fixture
def sr(registry_broker):
    return registry_broker[1]


def _subject(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_register_read_back_and_lookup(sr):
    subject, other = _subject("users"), _subject("copy")
    first = sr.ok("POST", f"/subjects/{subject}/versions", {"schema": AVRO_V1})
    assert set(first) == {"id"}
    assert sr.ok("POST", f"/subjects/{subject}/versions", {"schema": AVRO_V1}) == first  # idempotent
    assert sr.ok("POST", f"/subjects/{other}/versions", {"schema": AVRO_V1}) == first  # one id per schema
    second = sr.ok("POST", f"/subjects/{subject}/versions", {"schema": AVRO_V2, "schemaType": "AVRO"})
    assert second["id"] > first["id"]

    assert sr.ok("GET", f"/subjects/{subject}/versions") == [1, 2]
    latest = sr.ok("GET", f"/subjects/{subject}/versions/latest")
    assert latest == {"subject": subject, "version": 2, "id": second["id"], "schema": json.dumps(json.loads(AVRO_V2),
                                                                                                  separators=(",", ":"))}
    assert sr.ok("GET", f"/subjects/{subject}/versions/1")["id"] == first["id"]
    assert sr.ok("GET", f"/subjects/{subject}/versions/1/schema") == json.loads(AVRO_V1)  # the bare schema
    assert json.loads(sr.ok("GET", f"/schemas/ids/{first['id']}")["schema"]) == json.loads(AVRO_V1)
    assert sr.ok("GET", f"/schemas/ids/{first['id']}/schema") == json.loads(AVRO_V1)
    assert sr.ok("GET", f"/schemas/ids/{first['id']}/subjects") == sorted([subject, other])
    assert sr.ok("GET", f"/schemas/ids/{first['id']}/versions") == sorted(
        [{"subject": subject, "version": 1}, {"subject": other, "version": 1}], key=lambda v: v["subject"])
    found = sr.ok("POST", f"/subjects/{subject}", {"schema": AVRO_V1})
    assert (found["subject"], found["version"], found["id"]) == (subject, 1, first["id"])
    assert {subject, other} <= set(sr.ok("GET", "/subjects"))
    assert sr.ok("GET", "/subjects", subjectPrefix=subject) == [subject]
    assert [s["version"] for s in sr.ok("GET", "/schemas", subjectPrefix=subject)] == [1, 2]
    assert sr.ok("GET", "/schemas/types") == ["JSON", "PROTOBUF", "AVRO"]
    assert sr.ok("GET", "/") == {}


def test_confluent_error_codes(sr):
    subject = _subject("errors")
    missing = _subject("missing")
    sr.ok("POST", f"/subjects/{subject}/versions", {"schema": AVRO_V1})
    assert sr.error("GET", f"/subjects/{missing}/versions") == (404, 40401, f"Subject '{missing}' not found.")
    assert sr.error("POST", f"/subjects/{missing}", {"schema": AVRO_V1})[:2] == (404, 40401)
    assert sr.error("DELETE", f"/subjects/{missing}")[:2] == (404, 40401)
    assert sr.error("GET", f"/subjects/{subject}/versions/9") == (404, 40402, "Version 9 not found.")
    assert sr.error("GET", "/schemas/ids/987654") == (404, 40403, "Schema 987654 not found")
    assert sr.error("POST", f"/subjects/{subject}", {"schema": AVRO_V2})[:2] == (404, 40403)
    for version in ("a", "0", "2147483648"):
        status, code, message = sr.error("GET", f"/subjects/{subject}/versions/{version}")
        assert (status, code) == (422, 42202) and "is not a valid version id" in message
    for body in ({"schema": "{not json"}, {"schema": '{"type": "record", "name": "R", "fields": "x"}'},
                 {"schema": AVRO_V1, "schemaType": "XML"}, {"schema": ""}, {}):
        status, code, message = sr.error("POST", f"/subjects/{subject}/versions", body)
        assert (status, code) == (422, 42201) and message.startswith("Invalid schema"), body
    assert sr.error("POST", f"/subjects/{subject}", {"schema": "{not json"})[:2] == (422, 42201)
    status, code, message = sr.error("POST", f"/subjects/{subject}/versions", {"schema": AVRO_BAD})
    assert (status, code) == (409, 409)
    assert message.startswith(f'Schema being registered is incompatible with an earlier schema for subject "{subject}"')
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in message and "{oldSchemaVersion: 1}" in message
    assert sr.error("PUT", "/config", {"compatibility": "SIDEWAYS"})[:2] == (422, 42203)
    assert sr.error("PUT", "/mode", {"mode": "READMAYBE"})[:2] == (422, 42204)
    status, code, _ = sr.error("POST", f"/subjects/{subject}/versions", raw=b"{broken")
    assert (status, code) == (400, 400)
    assert sr.error("GET", "/no/such/endpoint")[:2] == (404, 404)
    assert sr.ok("GET", f"/subjects/{subject}/versions") == [1]  # nothing above changed the subject


def test_compatibility_endpoint(sr):
    subject = _subject("compat")
    sr.ok("POST", f"/subjects/{subject}/versions", {"schema": AVRO_V1})
    assert sr.ok("POST", f"/compatibility/subjects/{subject}/versions/latest", {"schema": AVRO_V2}) == \
        {"is_compatible": True}
    verbose = sr.ok("POST", f"/compatibility/subjects/{subject}/versions/1", {"schema": AVRO_BAD}, verbose=True)
    assert verbose["is_compatible"] is False and any("READER_FIELD_MISSING_DEFAULT_VALUE" in m
                                                     for m in verbose["messages"])
    assert sr.ok("POST", f"/compatibility/subjects/{subject}/versions", {"schema": AVRO_V2}, verbose=True) == \
        {"is_compatible": True, "messages": []}
    assert sr.error("POST", f"/compatibility/subjects/{subject}/versions/7", {"schema": AVRO_V2})[:2] == (404, 40402)
    sr.ok("PUT", f"/config/{subject_path(subject)}", {"compatibility": "FORWARD"})
    assert sr.ok("POST", f"/compatibility/subjects/{subject}/versions/latest", {"schema": AVRO_BAD}) == \
        {"is_compatible": True}  # old readers ignore the new field
    assert sr.ok("GET", f"/subjects/{subject}/versions") == [1]  # checks register nothing


def test_config_and_mode(sr):
    subject = _subject("cfg")
    sr.ok("POST", f"/subjects/{subject}/versions", {"schema": AVRO_V1})
    assert sr.ok("GET", "/config") == {"compatibilityLevel": "BACKWARD"}
    assert sr.error("GET", f"/config/{subject}")[:2] == (404, 40408)
    assert sr.ok("GET", f"/config/{subject}", defaultToGlobal=True) == {"compatibilityLevel": "BACKWARD"}
    assert sr.ok("PUT", f"/config/{subject}", {"compatibility": "none"}) == {"compatibility": "NONE"}
    assert sr.ok("GET", f"/config/{subject}") == {"compatibilityLevel": "NONE"}
    assert sr.ok("POST", f"/subjects/{subject}/versions", {"schema": AVRO_BAD})["id"] > 0  # NONE lets it in
    assert sr.ok("DELETE", f"/config/{subject}") == {"compatibilityLevel": "NONE"}
    assert sr.error("GET", f"/config/{subject}")[:2] == (404, 40408)

    assert sr.ok("GET", "/mode") == {"mode": "READWRITE"}
    assert sr.ok("PUT", f"/mode/{subject}", {"mode": "READONLY"}) == {"mode": "READONLY"}
    status, code, message = sr.error("POST", f"/subjects/{subject}/versions", {"schema": AVRO_V2})
    assert (status, code) == (422, 42205) and "read-only" in message
    assert sr.error("DELETE", f"/subjects/{subject}/versions/1")[:2] == (422, 42205)
    assert sr.ok("DELETE", f"/mode/{subject}") == {"mode": "READONLY"}
    assert sr.error("GET", f"/mode/{subject}")[:2] == (404, 40409)

    imported = _subject("import")
    assert sr.error("PUT", f"/mode/{subject}", {"mode": "IMPORT"})[:2] == (422, 42205)  # it has schemas
    sr.ok("PUT", f"/mode/{imported}", {"mode": "IMPORT"})
    assert sr.error("POST", f"/subjects/{imported}/versions", {"schema": AVRO_V1})[:2] == (422, 42205)  # id needed
    assert sr.ok("POST", f"/subjects/{imported}/versions", {"schema": AVRO_V2, "id": 900_000, "version": 5}) == \
        {"id": 900_000}
    assert sr.ok("GET", f"/subjects/{imported}/versions") == [5]
    other = json.dumps({"type": "string"})
    assert sr.error("POST", f"/subjects/{imported}/versions", {"schema": other, "id": 900_000})[:2] == (422, 42205)
    sr.ok("DELETE", f"/mode/{imported}")
    assert sr.error("POST", f"/subjects/{subject}/versions", {"schema": AVRO_V1, "id": 5})[:2] == (422, 42205)


def test_soft_and_hard_delete_never_reuse_ids(sr):
    subject = _subject("del")
    name = f'"User{uuid.uuid4().hex[:8]}"'
    own = [s.replace('"User"', name) for s in (AVRO_V1, AVRO_V2)]  # schema ids of this test only
    ids = [sr.ok("POST", f"/subjects/{subject}/versions", {"schema": s})["id"] for s in own]
    assert sr.error("DELETE", f"/subjects/{subject}/versions/2", permanent=True)[:2] == (404, 40407)
    assert sr.ok("DELETE", f"/subjects/{subject}/versions/2") == 2
    assert sr.error("DELETE", f"/subjects/{subject}/versions/2")[:2] == (404, 40406)
    assert sr.error("GET", f"/subjects/{subject}/versions/2")[:2] == (404, 40402)
    assert sr.ok("GET", f"/subjects/{subject}/versions/2", deleted=True)["id"] == ids[1]
    assert sr.ok("GET", f"/subjects/{subject}/versions", deleted=True) == [1, 2]
    assert sr.ok("GET", f"/schemas/ids/{ids[1]}")  # soft-deleted schemas stay readable by id
    assert sr.error("DELETE", f"/subjects/{subject}", permanent=True)[:2] == (404, 40405)
    assert sr.ok("DELETE", f"/subjects/{subject}") == [1]
    assert subject not in sr.ok("GET", "/subjects") and subject in sr.ok("GET", "/subjects", deleted=True)
    assert sr.error("DELETE", f"/subjects/{subject}")[:2] == (404, 40404)
    assert sr.ok("DELETE", f"/subjects/{subject}", permanent=True) == [1, 2]
    assert subject not in sr.ok("GET", "/subjects", deleted=True)
    assert sr.error("GET", f"/schemas/ids/{ids[1]}")[:2] == (404, 40403)
    again = sr.ok("POST", f"/subjects/{subject}/versions", {"schema": own[1]})
    assert again["id"] > max(ids)  # the hard-deleted ids are never handed out again
    assert sr.ok("GET", f"/subjects/{subject}/versions") == [1]


def test_references_and_referenced_by(sr):
    base, user = _subject("address"), _subject("person")
    address = json.dumps({"type": "record", "name": "Address", "namespace": "t",
                          "fields": [{"name": "city", "type": "string"}]})
    person = json.dumps({"type": "record", "name": "Person", "namespace": "t",
                         "fields": [{"name": "home", "type": "t.Address"}]})
    sr.ok("POST", f"/subjects/{base}/versions", {"schema": address})
    refs = [{"name": "t.Address", "subject": base, "version": 1}]
    assert sr.error("POST", f"/subjects/{user}/versions", {"schema": person})[:2] == (422, 42201)  # unknown type
    person_id = sr.ok("POST", f"/subjects/{user}/versions", {"schema": person, "references": refs})["id"]
    assert sr.ok("GET", f"/schemas/ids/{person_id}")["references"] == refs
    assert sr.ok("GET", f"/subjects/{base}/versions/1/referencedby") == [person_id]
    assert sr.error("DELETE", f"/subjects/{base}/versions/1")[:2] == (422, 42206)
    bad_ref = [{"name": "t.Address", "subject": base, "version": 9}]
    assert sr.error("POST", f"/subjects/{_subject('x')}/versions", {"schema": person, "references": bad_ref})[:2] == \
        (422, 42201)


def test_protobuf_and_json_schemas(sr):
    proto_subject, json_subject = _subject("proto"), _subject("json")
    text = 'syntax = "proto3";\npackage shop;\nmessage Order { string id = 1; int64 cents = 2; }\n'
    proto_id = sr.ok("POST", f"/subjects/{proto_subject}/versions", {"schema": text, "schemaType": "PROTOBUF"})["id"]
    stored = sr.ok("GET", f"/schemas/ids/{proto_id}")
    assert stored["schemaType"] == "PROTOBUF" and stored["schema"] == text.strip()
    serialized = sr.ok("GET", f"/schemas/ids/{proto_id}", format="serialized")["schema"]
    descriptor = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized))
    assert descriptor.package == "shop" and [f.name for f in descriptor.message_type[0].field] == ["id", "cents"]
    changed = text.replace("int64 cents", "string cents")
    status, code, message = sr.error("POST", f"/subjects/{proto_subject}/versions",
                                     {"schema": changed, "schemaType": "PROTOBUF"})
    assert (status, code) == (409, 409) and "FIELD_SCALAR_KIND_CHANGED" in message
    assert sr.error("POST", f"/subjects/{proto_subject}/versions",
                    {"schema": "message {", "schemaType": "PROTOBUF"})[:2] == (422, 42201)

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    sr.ok("POST", f"/subjects/{json_subject}/versions", {"schema": json.dumps(schema), "schemaType": "JSON"})
    schema["properties"]["n"] = {"type": "string"}
    status, code, message = sr.error("POST", f"/subjects/{json_subject}/versions",
                                     {"schema": json.dumps(schema), "schemaType": "JSON"})
    assert (status, code) == (409, 409) and "TYPE_CHANGED" in message
